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

class MdevOp final : public Operation {
public:
    MdevOp(std::string parent, std::string type, Mode mode)
        : parent_(std::move(parent)), type_(std::move(type)), mode_(mode) {}
    const char* what() const override { return "an mdev operation"; }
    // On the loop: the pair planned from a fresh read, through the fenced view, of the mdev
    // side and who holds mdevs open; done here when nothing is to be written (or in observe
    // mode, which writes nothing): Refused, naming the reason and the first mdev, when the
    // plan refuses any, or `stuck` while a write of the parent's is still blocked.
    std::optional<OpResult> prepare(ServiceParts& s) override;
    // No PCI function is written: a blocked mdev remove holds the mdev, not its parent.
    std::set<PciAddress> fenced() const override { return {}; }
    // The parent (its types' available_instances) and the mdevs it removes.
    std::set<std::string> fenced_mdevs() const override;
    void run(ServiceParts& s) override;
    // Logs what each write did; the caller's answer is Failed when any create or remove was
    // refused or failed, naming the first.
    OpResult complete(ServiceParts& s) override;

    const std::vector<MdevPlan>& plan() const { return plan_; }
    const std::vector<MdevResult>& results() const { return results_; }

private:
    std::string parent_;
    std::string type_;
    Mode mode_;
    std::vector<MdevPlan> plan_;  // the pair's records of plan_mdevs
    std::vector<MdevResult> results_;
};

}  // namespace vfiod
