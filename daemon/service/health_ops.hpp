// The health check of a group's functions (DESIGN §13), run by Service in a queue of its own
// (one check per group at a time, beside the group's writes: it writes nothing, and neither a
// write nor a Reload waits for it). Its reads (the AER totals, the live config space, after a
// release whether a driver has the function) run on a worker, since a config read sleeps while
// a reset blocks config access; its findings go to the HealthTracker and the StatusStore back
// on the loop. A function fenced (being written, or stuck) is not read.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/health.hpp"
#include "service/service_parts.hpp"

namespace vfiod {

class HealthOp final : public Operation {
public:
    HealthOp(unsigned group, HealthCheck why) : group_(group), why_(why) {}

    // What another trigger adds while the check waits in the queue: one check answers all.
    void add(HealthCheck why) { why_ = std::max(why_, why); }
    void add_recovery(const PciAddress& fn, const Recovery& r) { recovery_[fn].merge(r); }
    // After a release: the driver each function went back to ("" unknown).
    void add_released(const std::map<PciAddress, std::string>& originals) {
        for (const auto& [a, d] : originals)
            released_[a] = d;
    }

    const char* what() const override { return "checking device health"; }
    std::optional<OpResult> prepare(ServiceParts& s) override;
    std::set<PciAddress> fenced() const override { return {}; }
    void run(ServiceParts& s) override;
    OpResult complete(ServiceParts& s) override;

private:
    unsigned group_;
    HealthCheck why_;
    std::map<PciAddress, Recovery> recovery_;
    std::map<PciAddress, std::string> released_;
    std::vector<PciAddress> functions_;  // prepare(): the group's watched functions
    std::map<PciAddress, HealthReading> readings_;
};

}  // namespace vfiod
