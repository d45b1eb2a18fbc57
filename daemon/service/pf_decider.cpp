#include "service/pf_decider.hpp"

#include "core/strings.hpp"
#include "exec/executor.hpp"
#include "service/host_model.hpp"
#include "service/status_store.hpp"

namespace vfiod {

std::optional<PfPlan> PfDecider::decide(const PciAddress& pf) {
    host_.refresh({pf});
    const PfPlan* plan = host_.pf_plan(pf);
    if (plan && plan->num_vfs != plan->wanted_vfs) {
        // The count must change: whether a VF is in use is read now, since a VM opening one
        // raises no event. A PF whose count is right costs only its own read, whatever its VFs.
        host_.refresh(host_.vfs_of(pf));
        plan = host_.pf_plan(pf);
    }
    if (!plan)
        return std::nullopt;  // gone, or no entry governs it now: the status store drops it
    PfStatus planned{planned_state(plan->action), plan->reason, join(plan->details, "; "),
                     plan->blockers};
    if (plan->action != PfAction::Create) {
        store_.set_pf_status(pf, std::move(planned));
        return std::nullopt;
    }
    std::string change = "sriov_numvfs " + std::to_string(plan->num_vfs) + " -> " +
                         std::to_string(plan->wanted_vfs);
    if (mode_() == Mode::Observe) {
        store_.set_pf_status(pf, {PfState::Pending, Reason::None, "would write " + change, {}});
        return std::nullopt;
    }
    // Consumers see `pending` while the writes run.
    store_.set_pf_status(pf, {PfState::Pending, Reason::None, "writing " + change, {}});
    return *plan;
}

void PfDecider::finish(const PciAddress& pf, const PfOutcome& o) {
    if (!host_.pf_plan(pf))
        return;
    if (o.state == PfState::Ready)
        store_.set_pf_status(pf, {PfState::Ready, Reason::None, "", {}});
    else
        store_.set_pf_status(pf, o);
}

std::vector<PciAddress> PfDecider::to_probe(const std::set<PciAddress>& touched) const {
    std::vector<PciAddress> out;
    const Topology& topo = host_.snapshot().topology;
    for (const auto& a : touched) {
        const PciFunction* fn = topo.find(a);
        if (!fn || !fn->physfn || !host_.pf_plan(*fn->physfn) || !fn->iommu_group)
            continue;
        if (!fn->driver.empty() || !fn->driver_override.empty())
            continue;
        if (governing_entry(host_.config(), *fn) || host_.group_plan(*fn->iommu_group))
            continue;
        out.push_back(a);
    }
    return out;
}

}  // namespace vfiod
