// The SR-IOV policy (DESIGN §11): what the daemon does with a PF an [[sriov]] entry governs
// (publish its plan, or change its VF count off the loop) and which new VFs it sends to their
// host driver. Like the Decider it turns a request into the writes to run and sets the statuses
// it decides; it must not run writes, queue operations or publish.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/pci_address.hpp"
#include "core/plan.hpp"
#include "exec/executor.hpp"

namespace vfiod {

class HostModel;
class StatusStore;

class PfDecider {
public:
    PfDecider(HostModel& host, StatusStore& store, std::function<Mode()> mode)
        : host_(host), store_(store), mode_(std::move(mode)) {}

    // One PF, on the host as it is now (the PF and its VFs re-read: whether a VF is in use has
    // no event of its own): its status at once (nullopt), or the count change to write.
    std::optional<PfPlan> decide(const PciAddress& pf);
    // What a count change came to, published (the caller has re-read the PF).
    void finish(const PciAddress& pf, const PfOutcome& o);

    // The VFs among `touched` that are left to the host: a VF of a governed PF, driverless,
    // with no driver_override, that no [[device]] entry allowlists and whose group holds no
    // allowlisted function. Their PF's autoprobe was 0 when they were made; they go to their
    // host driver as they would have without vfiod.
    std::vector<PciAddress> to_probe(const std::set<PciAddress>& touched) const;

private:
    HostModel& host_;
    StatusStore& store_;
    std::function<Mode()> mode_;
};

}  // namespace vfiod
