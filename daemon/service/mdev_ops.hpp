// The mediated-device operation (DESIGN §12): one (parent, type) pair's mdevs made and removed.
// The service queues one per pair, in config order, in one queue of their own (Service::
// decide_mdevs): the pairs of a parent share its budget, so they are planned one after another.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "exec/mdev_writer.hpp"
#include "service/service_parts.hpp"

namespace vfiod {

// The published records of `plan`'s mdevs as planned, before anything is written: ready (bound,
// with its /dev/vfio/<N>), pending (to create, being probed, or to remove), refused, failed
// (no-parent) or foreign.
std::vector<MdevInfo> mdev_records(const std::vector<MdevPlan>& plan, const MdevHost& host,
                                   const Topology& topo, const HostFs& fs);

class MdevOp final : public Operation {
public:
    MdevOp(std::string parent, std::string type, Mode mode)
        : parent_(std::move(parent)), type_(std::move(type)), mode_(mode) {}
    const char* what() const override { return "an mdev operation"; }
    // On the loop: the pair planned from a fresh read, through the fenced view, of its parent
    // (and, for removes, of who holds mdevs open), and published (with the parent's foreign
    // mdevs); done here when nothing is to be written (or in observe mode, which writes
    // nothing): Refused, naming the reason and the first mdev, when the plan refuses any, or
    // `stuck` while a write of the parent's is still blocked.
    std::optional<OpResult> prepare(ServiceParts& s) override;
    // No PCI function is written: a blocked mdev remove holds the mdev, not its parent.
    std::set<PciAddress> fenced() const override { return {}; }
    // The parent (its types' available_instances) and the mdevs it removes.
    std::set<std::string> fenced_mdevs() const override;
    void run(ServiceParts& s) override;
    // Logs what each write did and publishes the pair as the host now has it, a write that
    // failed marking its mdev failed (refused for in-use-mdev); the caller's answer is Failed
    // when any create or remove was refused or failed, naming the first.
    OpResult complete(ServiceParts& s) override;

    const std::vector<MdevPlan>& plan() const { return plan_; }
    const std::vector<MdevResult>& results() const { return results_; }

private:
    // The pair's plan and the parent's foreign mdevs, planned on `host` with `use`.
    std::vector<MdevPlan> plan_pair(ServiceParts& s, const MdevHost& host,
                                    const HostUse& use) const;
    // The pair's plan from one fresh read of its parent (with_use, when the pair has mdevs to
    // remove: and of who holds mdevs open), its records and the parent's foreign ones kept in
    // published_.
    std::vector<MdevPlan> read_and_plan(ServiceParts& s, bool with_use);
    // published_ replaces the pair's records and the parent's foreign ones.
    void publish(ServiceParts& s) const;

    std::string parent_;
    std::string type_;
    Mode mode_;
    std::vector<MdevPlan> plan_;  // the pair's records of plan_mdevs
    std::vector<MdevResult> results_;
    std::vector<MdevInfo> published_;
};

}  // namespace vfiod
