// What the kubelet's NodePrepareResources and NodeUnprepareResources calls are about, as the
// Preparer (prepare.hpp) and the kubelet's servers (kubelet.hpp) hand them to each other: the
// claim the kubelet names, the devices Prepare answers for it, and what the call allows.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace vfiod::dra {

// A claim as the kubelet names it in a Prepare or Unprepare call.
struct ClaimRef {
    std::string uid;
    std::string namespace_;
    std::string name;
    // "namespace/name (uid)", for errors and logs, made printable.
    std::string str() const;
};

// One device of a prepared claim, as the answer lists it.
struct PreparedDevice {
    std::vector<std::string> requests;  // the request names it was allocated for
    std::string pool;
    std::string device;                 // "pci-0000-01-00-0"
    std::vector<std::string> cdi_ids;   // "vfiod.io/vfio=<claim uid>-<device>"
    bool operator==(const PreparedDevice&) const = default;
};

// The answer for one claim: the devices, or an error naming the claim and why.
struct PrepareResult {
    std::string error;  // empty: prepared
    std::vector<PreparedDevice> devices;
};

// What a kubelet call allows the claims it names: a deadline and whether the kubelet still
// waits. The kubelet calls again when its deadline passes, so work for a call it gave up on only
// keeps workers from the live calls: a claim is not started, and no API request is made, once
// the call is over, and a request gets at most the time the call has left (DESIGN §10).
struct CallLimit {
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    std::function<bool()> cancelled;  // empty: never
    // "" while the call may go on; otherwise why not ("the kubelet's call is past its deadline").
    std::string over() const;
    // The time left, at most `cap`; zero when none is.
    std::chrono::milliseconds left(std::chrono::milliseconds cap) const;
};

}  // namespace vfiod::dra
