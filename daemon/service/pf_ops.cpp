#include "service/pf_ops.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "core/pci_paths.hpp"

namespace vfiod {

namespace {

// One read of the PF and its VFs once its operation ended: the count the change reached, and
// the VFs whose add events came while it ran (or, after a crash, were never heard), which the
// operation then probes (FollowUps::probe_left).
void reread_pf(ServiceParts& s, const PciAddress& pf) {
    std::set<PciAddress> fns = s.host.vfs_of(pf);
    fns.insert(pf);
    s.host.refresh(fns);
}

}  // namespace

std::optional<OpResult> PfChangeOp::prepare(ServiceParts& s) {
    plan_ = s.pf_decider.decide(pf_);
    if (!plan_)
        return OpResult{};  // the status is set: nothing to write
    return std::nullopt;
}

void PfChangeOp::run(ServiceParts& s) { outcome_ = s.executor.apply_pf(*plan_); }

OpResult PfChangeOp::complete(ServiceParts& s) {
    reread_pf(s, pf_);
    s.pf_decider.finish(pf_, outcome_);
    s.then.probe_left(s.host.vfs_of(pf_), &pf_);
    return {};
}

std::optional<OpResult> PfSettleOp::prepare(ServiceParts& s) {
    if (const PfPlan* plan = s.host.pf_plan(pf_))
        wanted_ = plan->wanted_vfs;
    return std::nullopt;
}

void PfSettleOp::run(ServiceParts& s) {
    auto o = s.executor.reconcile_pf(pf_, wanted_, s.host.config());
    outcome_ = o ? *o : PfOutcome{PfState::Ready, Reason::None, "", {}};
}

OpResult PfSettleOp::complete(ServiceParts& s) {
    reread_pf(s, pf_);
    if (!outcome_.message.empty())
        spdlog::warn("PF {}: unfinished VF count change from the last run: {}", pf_.str(),
                     outcome_.message);
    s.then.probe_left(s.host.vfs_of(pf_), &pf_);
    return {};
}

void VfProbeOp::run(ServiceParts& s) {
    error_ = s.executor.write(vf_, pci_paths::kDriversProbe, vf_.str());
}

OpResult VfProbeOp::complete(ServiceParts& s) {
    s.host.refresh({vf_});
    const PciFunction* vf = s.host.snapshot().topology.find(vf_);
    if (error_)
        spdlog::warn("{}: probing its host driver: {}: {}", vf_.str(), pci_paths::kDriversProbe,
                     std::strerror(error_));
    else if (vf && !vf->driver.empty())
        spdlog::info("{}: a VF no entry allowlists, sent to its host driver {}", vf_.str(),
                     vf->driver);
    else
        spdlog::info("{}: a VF no entry allowlists, probed; no host driver took it", vf_.str());
    return {};
}

}  // namespace vfiod
