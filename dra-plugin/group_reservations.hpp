// The group rule's memory (DESIGN §10): which prepared claim holds each IOMMU group, and through
// which function. A group is never split between claims: VFIO opens a group whole, so two
// claims on one group would hand one container the other's devices. The check and the taking
// are one locked step, so of two claims racing for one group exactly one gets it; the claim's
// GET from the API server happens before, with no lock held. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "claims.hpp"

namespace vfiod::dra {

class GroupReservations {
public:
    struct Holder {
        std::string uid, who, address;  // the claim's UID, ClaimRef::str(), the function
    };
    // One device of a claim: its group, through which function.
    struct Want {
        unsigned group = 0;
        std::string device, address;  // "pci-0000-01-00-0", "0000:01:00.0"
    };
    using Holders = std::map<unsigned, Holder>;

    // Every group `wants` names taken for `claim`, when each is free or the claim's already:
    // "". Otherwise none is taken, and why (the first device whose group another claim holds,
    // naming that claim and its function).
    std::string reserve(const ClaimRef& claim, const std::vector<Want>& wants);
    // The groups `uid` holds are free again.
    void release(const std::string& uid);

    // The holders as the checkpoints read at start say, in place of any now: `add` each
    // checkpoint's groups in the order read (the first to name a group holds it; a second one
    // is logged), then restore().
    static void add(Holders* holders, const ClaimRef& claim, unsigned group,
                    const std::string& address);
    void restore(Holders holders);

private:
    std::mutex mu_;
    Holders holders_;
};

}  // namespace vfiod::dra
