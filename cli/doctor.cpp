#include "doctor.hpp"

#include "core/strings.hpp"

namespace vfiod::cli {

namespace {

std::string count(size_t n, const char* entry) {
    return std::to_string(n) + " " + entry + (n == 1 ? " entry" : " entries");
}

// An [[sriov]] entry is work for vfiod as much as a [[device]] entry: a host that only makes
// VFs (for a CNI that takes them from their host driver) is not an empty config.
Check allowlist_check(const Config& config) {
    std::vector<std::string> have;
    if (!config.devices.empty())
        have.push_back(count(config.devices.size(), "[[device]]"));
    if (!config.sriovs.empty())
        have.push_back(count(config.sriovs.size(), "[[sriov]]"));
    if (!have.empty())
        return {"allowlist", true, join(have, ", ")};
    // The file actually read (--config, or the one under --root), never a guess.
    if (config.files.empty())
        return {"allowlist", false,
                "the allowlist is empty: no configuration file was found; write one with "
                "[[device]] or [[sriov]] entries"};
    return {"allowlist", false, "the allowlist is empty: add [[device]] or [[sriov]] entries to " +
                                    printable(config.files.front(), 4096)};
}

std::vector<Check> host_checks(const HostFs& fs, const Topology& t, const Config& config) {
    std::vector<Check> checks;
    std::string cmdline = fs.read("proc/cmdline").value_or("");
    bool iommu_arg = cmdline.find("intel_iommu=on") != std::string::npos ||
                     cmdline.find("amd_iommu=on") != std::string::npos;
    checks.push_back({"iommu", t.iommu_enabled,
                      t.iommu_enabled ? std::to_string(t.groups.size()) + " IOMMU groups"
                      : iommu_arg     ? "the kernel command line asks for it, but no IOMMU came up: "
                                        "is VT-d/AMD-Vi enabled in the firmware?"
                                      : "no IOMMU: add intel_iommu=on (Intel) to the kernel command "
                                        "line and enable VT-d/AMD-Vi in the firmware"});
    bool vfio = t.drivers.count("vfio-pci") > 0;
    checks.push_back({"vfio-pci", vfio,
                      vfio ? "the vfio-pci driver is loaded"
                           : "the vfio-pci driver is not loaded (modprobe vfio-pci; vfiod.service "
                             "pulls in modprobe@vfio_pci.service)"});
    checks.push_back(allowlist_check(config));
    return checks;
}

std::optional<std::vector<PfFinding>> pf_findings(const Topology& t, const Plan& plan) {
    if (!plan.pfs)
        return std::nullopt;
    std::vector<PfFinding> out;
    for (const auto& pf : *plan.pfs) {
        const PciFunction* fn = t.find(pf.address);
        bool driverless = pf.action == PfAction::Create && fn && fn->driver.empty();
        out.push_back({&pf, fn, driverless, pf_advice(pf, driverless)});
    }
    return out;
}

}  // namespace

bool kubevirt_counts(const PciFunction& fn) { return fn.driver == "vfio-pci" && fn.iommu_group; }

Diagnosis diagnose(const HostFs& fs, const Topology& t, const Config& config, const Plan& plan) {
    Diagnosis dx;
    dx.checks = host_checks(fs, t, config);
    for (const auto& g : plan.groups)
        for (const auto& d : g.devices) {
            if (d.role != Role::Allowlisted)
                continue;
            const PciFunction* fn = t.find(d.address);
            dx.findings.push_back({fn, &g, &d});
            auto& counts = dx.per_resource[d.resource_name.value_or("(no resource_name)")];
            counts.first += fn && kubevirt_counts(*fn);
            counts.second += g.action != Action::Refuse && d.target == "vfio-pci";
        }
    dx.pfs = pf_findings(t, plan);
    for (const auto& c : dx.checks)
        dx.healthy = dx.healthy && c.ok;
    // Until a PF has its VFs, the VFs to pass through are not there.
    for (const auto& p : dx.pfs.value_or(std::vector<PfFinding>{}))
        dx.healthy = dx.healthy && p.pf->action == PfAction::Ready;
    for (const auto& f : dx.findings)
        dx.healthy = dx.healthy && f.g->action == Action::Bound && f.fn && kubevirt_counts(*f.fn);
    return dx;
}

// Host use changes without a PCI uevent (an fd closed, a disk unmounted), and vfiod adds no polling:
// after the fix, a Bind has it decide again.
std::string advice(Reason r, const PciAddress& a) {
    const std::string then = "; then `vfioctl bind " + a.str() + "`";
    switch (r) {
    case Reason::NoIommu:
        return "enable the IOMMU: VT-d/AMD-Vi in the firmware and intel_iommu=on (Intel) on the "
               "kernel command line, then reboot";
    case Reason::Protected:
        return "a [[protect]] entry covers the group; remove it if the host really does not need "
               "that device";
    case Reason::InUseStorage:
        return "the host uses a disk on it: unmount it and swapoff it; for a holder named "
               "above, deactivate the LVM volume group (vgchange -an), stop the md array "
               "(mdadm --stop), flush the multipath map (multipath -f) or close the dm-crypt "
               "mapping; for an exclusive claim (bind reports it), export the ZFS pool (zpool "
               "export) or stop the program holding it" + then;
    case Reason::InUseNetwork:
        return "the host uses a network interface on it: move its routes/addresses, take it "
               "out of its bond/bridge, or move it back from the network namespace named above "
               "(or stop the pod/container using it) first" + then;
    case Reason::InUseDevice:
        return "stop or restart without the device the process named above (pid, command) that "
               "holds its device node open" + then;
    case Reason::SriovPf:
        return "this is an SR-IOV PF with VFs enabled, or one an [[sriov]] entry names: vfiod "
               "never binds it; allowlist its VFs instead (or, without an [[sriov]] entry, set "
               "sriov_numvfs to 0 first)";
    case Reason::InUseVf:
        return "changing the VF count would destroy VFs the host or a VM uses: stop what uses "
               "the VFs named above (or set num_vfs back); vfiod tries again on the next reload "
               "or bind/release, or a udev event of the PF or its VFs";
    case Reason::VfsExceedTotal:
        return "num_vfs is above what the PF can have (sriov_totalvfs): lower it in the "
               "[[sriov]] entry, then reload";
    case Reason::MdevParent:
        return "an [[mdev]] entry names this function as a mediated-device parent, so vfiod "
               "never binds it: hand its mdevs to VMs instead, or remove the [[mdev]] entry";
    case Reason::BootVga:
        return "it is the boot GPU; set allow_boot_vga = true only if the host console can live "
               "without it";
    case Reason::Companion:
        return "another function shares the IOMMU group: allowlist it too, or set companions = "
               "\"bind\"";
    case Reason::None:
    case Reason::MdevUnavailable:  // an mdev's reasons: no group is refused with them
    case Reason::NoParent:
    case Reason::UnknownType:
    case Reason::InUseMdev:
    case Reason::InUseVfio:
    case Reason::VfioUnavailable:
    case Reason::WriteFailed:
    case Reason::Stuck:
    case Reason::Drift:
        return "";  // not planning reasons: make_plan() never gives them
    }
    return "";
}

// A count change is retried on a Reload, Bind/Release or a udev event of the PF or its VFs,
// never on a timer (DESIGN §11): after the fix, a reload has vfiod try again at once. A driver
// binding to the PF is such an event, so that fix needs no reload.
std::string pf_advice(const PfPlan& pf, bool driverless) {
    const std::string reload = "; then `systemctl reload vfiod`";
    switch (pf.reason) {
    case Reason::InUseVf: {
        std::string vfs;
        for (const auto& b : pf.blockers)
            vfs += (vfs.empty() ? "" : ", ") + b.str();
        return "changing the count destroys every VF, and " + vfs +
               (pf.blockers.size() == 1 ? " is" : " are") +
               " in use: stop what holds " + (pf.blockers.size() == 1 ? "it" : "them") +
               " (named above: the VM, the mount, the interface or the process), or set num_vfs "
               "back to " + std::to_string(pf.num_vfs) + reload;
    }
    case Reason::VfsExceedTotal:
        return "lower num_vfs in the [[sriov]] entry to at most " + std::to_string(pf.total_vfs) +
               " (the PF's sriov_totalvfs)" + reload;
    case Reason::Protected:
        return "a [[protect]] entry covers the PF, so vfiod never writes its VF count: remove "
               "that entry or the [[sriov]] entry" + reload;
    default:
        break;
    }
    if (driverless)
        return "load the PF's driver (its vendor's, e.g. modprobe nvme, mlx5_core, ice): the "
               "kernel makes VFs only through it; vfiod tries again when the driver binds";
    return "";
}

}  // namespace vfiod::cli
