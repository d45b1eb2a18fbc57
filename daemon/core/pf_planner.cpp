// The planner's SR-IOV half (DESIGN §11): the VF count of each PF an [[sriov]] entry names.
// Pure, as the group planner (planner.cpp) is; the host-use rules a VF is judged by are that
// planner's own (refusals_of), so "in use" means the same for a VF as for any function.
#include <algorithm>

#include "pci_paths.hpp"
#include "plan.hpp"

namespace vfiod {

namespace {

void refuse(PfPlan& p, Reason reason, const PciAddress& blocker, const std::string& why) {
    p.action = PfAction::Refuse;
    p.reason = reason;
    p.blockers.push_back(blocker);
    p.details.push_back(blocker.str() + ": " + why);
}

PfPlan plan_pf(const PciFunction& pf, const SriovEntry& entry,
               const std::vector<const PciFunction*>& vfs, const HostUse& use,
               const Config& config) {
    PfPlan p;
    p.address = pf.address;
    p.total_vfs = pf.sriov_totalvfs.value_or(0);
    p.num_vfs = pf.sriov_numvfs;
    p.wanted_vfs = entry.num_vfs;
    if (protected_by(config, pf)) {
        refuse(p, Reason::Protected, pf.address, "matches a [[protect]] entry");
        return p;
    }
    if (p.wanted_vfs > p.total_vfs) {
        refuse(p, Reason::VfsExceedTotal, pf.address,
               "num_vfs = " + std::to_string(p.wanted_vfs) + " (the [[sriov]] entry at " +
                   entry.origin.str() + ") is above its sriov_totalvfs, " +
                   std::to_string(p.total_vfs));
        return p;
    }
    if (p.num_vfs == p.wanted_vfs) {
        p.action = PfAction::Ready;
        return p;
    }
    for (const PciFunction* vf : vfs)
        for (const auto& r : vf_uses(*vf, use, config))
            for (const auto& why : r.details)
                refuse(p, Reason::InUseVf, vf->address, why);
    if (!p.blockers.empty()) {
        // One blocker per VF, however many lines say why.
        p.blockers.erase(std::unique(p.blockers.begin(), p.blockers.end()), p.blockers.end());
        return p;
    }
    p.action = PfAction::Create;
    p.writes = sriov_writes(pf.address, p.num_vfs, p.wanted_vfs);
    // Planned all the same: a driver may bind before the writes run, and the PF's bind event
    // brings it back otherwise (DESIGN §11).
    if (pf.driver.empty())
        p.details.push_back(pf.address.str() +
                            ": has no driver, so the kernel cannot make VFs yet (sriov_numvfs "
                            "answers ENOENT until one binds)");
    return p;
}

}  // namespace

std::vector<FunctionRefusal> vf_uses(const PciFunction& vf, const HostUse& use,
                                     const Config& config) {
    std::vector<FunctionRefusal> out;
    for (auto& r : refusals_of(vf, use, config))
        if (r.reason == Reason::InUseStorage || r.reason == Reason::InUseNetwork ||
            r.reason == Reason::InUseDevice)
            out.push_back(std::move(r));
    if (auto it = use.vfio.find(vf.address); it != use.vfio.end())
        out.push_back({Reason::InUseVfio, it->second});
    return out;
}

std::optional<std::vector<PfPlan>> plan_pfs(const Topology& topo, const HostUse& use,
                                            const Config& config,
                                            std::vector<std::string>* warnings) {
    if (config.sriovs.empty())
        return std::nullopt;
    std::map<PciAddress, std::vector<const PciFunction*>> vfs;  // by PF, sorted by address
    for (const auto& [addr, fn] : topo.functions)
        if (fn.physfn)
            vfs[*fn.physfn].push_back(&fn);
    std::vector<PfPlan> pfs;
    for (const auto& [addr, fn] : topo.functions)
        if (const SriovEntry* e = sriov_entry(config, fn, warnings))
            pfs.push_back(plan_pf(fn, *e, vfs[addr], use, config));
    return pfs;
}

std::optional<PfPlan> plan_one_pf(const Topology& topo, const HostUse& use, const Config& config,
                                  const PciAddress& pf, const std::vector<PciAddress>& vfs) {
    const PciFunction* fn = topo.find(pf);
    const SriovEntry* e = fn ? sriov_entry(config, *fn) : nullptr;
    if (!e)
        return std::nullopt;
    std::vector<const PciFunction*> mine;  // sorted by address, as plan_pfs has them
    for (const auto& a : vfs)
        if (const PciFunction* vf = topo.find(a); vf && vf->physfn == pf)
            mine.push_back(vf);
    return plan_pf(*fn, *e, mine, use, config);
}

std::vector<Write> sriov_writes(const PciAddress& pf, unsigned from, unsigned to) {
    std::vector<Write> w;
    if (from == to)
        return w;
    if (to != 0)
        w.push_back({Write::Kind::SriovAutoprobe, pf, "0"});
    if (from != 0)
        w.push_back({Write::Kind::SriovNumVfs, pf, "0"});
    if (to != 0) {
        w.push_back({Write::Kind::SriovNumVfs, pf, std::to_string(to)});
        // Back on, once the VFs exist: the kernel probes a VF (drivers_probe, a driver loading)
        // only while its PF's autoprobe is 1 or the VF has a driver_override
        // (pci_device_can_probe), so the VFs no entry allowlists could never reach their host
        // driver otherwise.
        w.push_back({Write::Kind::SriovAutoprobe, pf, "1"});
    }
    return w;
}

}  // namespace vfiod
