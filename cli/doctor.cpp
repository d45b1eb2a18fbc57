#include "doctor.hpp"

#include <set>

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
    if (!config.mdevs.empty())
        have.push_back(count(config.mdevs.size(), "[[mdev]]"));
    if (!have.empty())
        return {"allowlist", true, join(have, ", ")};
    // The file actually read (--config, or the one under --root), never a guess.
    if (config.files.empty())
        return {"allowlist", false,
                "the allowlist is empty: no configuration file was found; write one with "
                "[[device]], [[sriov]] or [[mdev]] entries"};
    return {"allowlist", false,
            "the allowlist is empty: add [[device]], [[sriov]] or [[mdev]] entries to " +
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

// One mdev of the plan counted into its pair's finding: a wanted one as ready, to create or
// refused (the pair's reason, said once); one of vfiod's own to remove only when it cannot be.
void count_mdev(MdevFinding& f, const MdevPlan& p) {
    const bool removal = p.action == MdevAction::Remove ||
                         (p.action == MdevAction::Refuse && p.reason == Reason::InUseMdev);
    f.wanted += !removal;
    f.ready += p.action == MdevAction::Ready;
    f.to_create += p.action == MdevAction::Create;
    if (p.action != MdevAction::Refuse)
        return;
    if (removal) {
        if (f.reason == Reason::None)
            f.reason = Reason::InUseMdev;
        for (const auto& why : p.details)
            f.details.push_back(p.uuid + ": " + why);
    } else if (f.reason == Reason::None || f.reason == Reason::InUseMdev) {
        f.reason = p.reason;  // every refused wanted mdev of a pair has the same why
        f.details.insert(f.details.begin(), p.details.begin(), p.details.end());
    }
}

// A selector entry that reaches no parent has no mdev in the plan: it still wants `count`.
void add_unmatched(std::vector<MdevFinding>& out, const MdevHost& host, const Topology& t,
                   const Config& config) {
    for (const auto& e : config.mdevs) {
        if (!e.selector || e.count == 0)
            continue;
        bool reached = false;
        for (const auto& [name, p] : host.parents)
            if (const PciFunction* fn = p.address ? t.find(*p.address) : nullptr)
                reached = reached || e.selector->matches(fn->vendor, fn->device);
        if (reached)
            continue;
        MdevFinding f{"selector " + e.selector->str(), e.type, e.type, e.resource_name,
                      e.count, 0, 0, Reason::NoParent, {}, ""};
        f.details.push_back("no parent under /sys/class/mdev_bus is a PCI function " +
                            e.selector->str() + " (the [[mdev]] entry at " + e.origin.str() +
                            ")");
        out.push_back(std::move(f));
    }
}

}  // namespace

// The plan's (parent, type) pairs, in its order (a pair's mdevs are next to each other there);
// foreign mdevs belong to none, and a pair no entry names that only loses mdevs is left out.
std::optional<std::vector<MdevFinding>> mdev_findings(const MdevHost& host, const Topology& t,
                                                      const Config& config, const Plan& plan) {
    if (!plan.mdevs)
        return std::nullopt;
    std::vector<MdevFinding> out;
    for (const auto& p : *plan.mdevs) {
        if (p.action == MdevAction::Foreign)
            continue;
        if (out.empty() || out.back().parent != p.parent || out.back().type != p.type)
            out.push_back({p.parent, p.type, p.type_name, p.resource_name, 0, 0, 0,
                           Reason::None, {}, ""});
        count_mdev(out.back(), p);
    }
    std::erase_if(out, [](const MdevFinding& f) {
        return f.resource_name.empty() && f.reason == Reason::None;
    });
    add_unmatched(out, host, t, config);
    for (auto& f : out) {
        auto parent = host.parents.find(f.parent);
        f.fix = mdev_advice(f, parent == host.parents.end() ? nullptr : &parent->second);
    }
    return out;
}

bool kubevirt_counts(const PciFunction& fn) { return fn.driver == "vfio-pci" && fn.iommu_group; }

namespace {

// A finding's health: its own, and a group-mate's failure when its own is not failed.
void add_health(Finding& f, const std::map<PciAddress, client::Health>& health) {
    if (auto h = health.find(f.d->address); h != health.end())
        f.health = h->second;
    f.health_fix = health_advice(f.health, f.d->address);
    if (client::health_failed(f.health.state))
        return;
    for (const auto& mate : f.g->devices)
        if (auto h = health.find(mate.address);
            h != health.end() && client::health_failed(h->second.state)) {
            f.failed_mate = mate.address;
            f.health_fix = health_advice(h->second, mate.address);
            return;
        }
}

}  // namespace

Diagnosis diagnose(const HostFs& fs, const Topology& t, const Config& config, const Plan& plan,
                   const MdevHost& mdevs, const DaemonHealth& health) {
    Diagnosis dx;
    dx.checks = host_checks(fs, t, config);
    for (const auto& g : plan.groups)
        for (const auto& d : g.devices) {
            if (d.role != Role::Allowlisted)
                continue;
            const PciFunction* fn = t.find(d.address);
            dx.findings.push_back({fn, &g, &d});
            add_health(dx.findings.back(), health.functions);
            auto& counts = dx.per_resource[d.resource_name.value_or("(no resource_name)")];
            counts.first += fn && kubevirt_counts(*fn);
            counts.second += g.action != Action::Refuse && d.target == "vfio-pci";
        }
    dx.pfs = pf_findings(t, plan);
    dx.mdevs = mdev_findings(mdevs, t, config, plan);
    for (size_t i = 0; dx.mdevs && i < dx.mdevs->size(); ++i) {
        MdevFinding& m = (*dx.mdevs)[i];
        if (auto h = health.mdev_parents.find(m.parent); h != health.mdev_parents.end()) {
            m.health = h->second;  // an mdev parent is never bound: a Reload clears it
            m.health_fix = health_advice(m.health, std::nullopt);
        }
    }
    for (const auto& c : dx.checks)
        dx.healthy = dx.healthy && c.ok;
    // Until a PF has its VFs, the VFs to pass through are not there.
    for (const auto& p : dx.pfs.value_or(std::vector<PfFinding>{}))
        dx.healthy = dx.healthy && p.pf->action == PfAction::Ready;
    for (const auto& f : dx.findings)
        dx.healthy = dx.healthy && f.g->action == Action::Bound && f.fn && kubevirt_counts(*f.fn) &&
                     !client::health_failed(f.health.state) && !f.failed_mate;
    // As with groups and PFs: healthy once every wanted mdev is there, not when it is planned.
    for (const auto& m : dx.mdevs.value_or(std::vector<MdevFinding>{}))
        dx.healthy = dx.healthy && m.ready == m.wanted && !client::health_failed(m.health.state);
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
    case Reason::MdevUnavailable:  // an mdev's reasons, mdev_advice()'s: no group has them
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

// vfiod clears failed and degraded on an operator's Bind of the group, or on a Reload that finds
// the function readable with no new errors (DESIGN §13); a Reload while it reads all ones keeps
// failed.
std::string health_advice(const client::Health& h, const std::optional<PciAddress>& bindable) {
    const std::string reload = "`systemctl reload vfiod` (a reload clears it when the device "
                               "reads fine with no new errors)";
    const std::string clear =
        "clear the state with " +
        (bindable ? "`vfioctl bind " + bindable->str() + "` once it reads fine, or " + reload
                  : reload);
    if (h.state == "failed")
        return "vfiod hands it to no VM: reseat the card, check the slot and its power (the "
               "kernel log, journalctl -k, names the errors), and replace it if it fails again; "
               "then " + clear;
    if (h.state == "degraded")
        return "it raised errors the kernel recovered from: watch the counts (vfioctl status, "
               "journalctl -k); if they keep rising, reseat or replace it; " + clear;
    if (h.state == "unknown")
        return "vfiod has no reading of this function's errors (the reason says why: no AER "
               "capability, files it cannot read, or not read yet); nothing to fix";
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

namespace {

// Why a type yields too few: the numbers of the parent's budget, and where to make room.
std::string unavailable_advice(const MdevFinding& f, const MdevType* type) {
    const unsigned missing = f.wanted - f.ready;
    const std::string want = std::to_string(missing) + " more wanted (count " +
                             std::to_string(f.wanted) + ", " + std::to_string(f.ready) +
                             " ready)";
    const std::string share = "the types of one parent share its budget, so lower this "
                              "entry's count";
    const std::string rest = ", or an earlier [[mdev]] entry's count on " + f.parent +
                             " (or remove mdevs made there by hand); then `systemctl reload "
                             "vfiod`";
    if (!type || !type->available)
        return f.type + " on " + f.parent + " has no readable available_instances; " + want +
               ": see the parent's driver for its budget" + rest;
    const unsigned avail = *type->available;
    if (avail == 0)
        return f.type + " on " + f.parent + " has no instances left (available_instances 0), " +
               want + ": other mdevs on " + f.parent + " take its budget; " + share + " to " +
               std::to_string(f.ready) + rest;
    return f.type + " on " + f.parent + " has " + std::to_string(avail) +
           " available_instances, " + want + ": " + share + " to at most " +
           std::to_string(f.ready + avail) + rest;
}

const MdevType* type_of(const MdevParent* parent, const std::string& type) {
    if (!parent)
        return nullptr;
    auto t = parent->types.find(type);
    return t == parent->types.end() ? nullptr : &t->second;
}

std::string type_list(const MdevParent& parent) {
    std::vector<std::string> types;
    for (const auto& [dir, t] : parent.types)
        types.push_back(t.name.empty() || t.name == dir ? dir : dir + " (" + t.name + ")");
    return join(types, ", ");
}

}  // namespace

// A parent's registration is an event vfiod acts on (DESIGN §12): that fix needs no reload; a
// config change or a closed mdev does.
std::string mdev_advice(const MdevFinding& f, const MdevParent* parent) {
    const std::string reload = "; then `systemctl reload vfiod`";
    switch (f.reason) {
    case Reason::NoParent:
        return "load the parent's driver (for a vGPU its vendor's vGPU manager, e.g. the nvidia "
               "driver; for the kernel's samples `modprobe mbochs`, mtty or mdpy): the parent "
               "must appear under /sys/class/mdev_bus, and vfiod makes its mdevs when it does";
    case Reason::UnknownType:
        if (parent && !parent->types.empty())
            return "name one of " + f.parent + "'s mdev_supported_types in the [[mdev]] entry: " +
                   type_list(*parent) + reload;
        return "name one of the types under /sys/class/mdev_bus/" + f.parent +
               "/mdev_supported_types in the [[mdev]] entry" + reload;
    case Reason::MdevUnavailable:
        return unavailable_advice(f, type_of(parent, f.type));
    case Reason::Protected:
        return "a [[protect]] entry covers " + f.parent + ", so vfiod makes no mdevs on it: "
               "remove that entry or the [[mdev]] entry" + reload;
    case Reason::InUseMdev:
        return "one of vfiod's own mdevs that is to go is open (who holds it is named above): "
               "close the VM using it" + reload;
    default:
        return "";
    }
}

// virt-handler keeps an mdev whose type's name (spaces as '_'), or else type directory, is in
// the CR's configured types or external mediatedDevices entries, and removes every other one at
// start and on each change of the CR, unless its mdev handling is off.
Check kubevirt_cr_check(const KubevirtMdevConfig& cr,
                        const std::optional<std::vector<MdevFinding>>& mdevs) {
    const char* name = "kubevirt";
    if (!mdevs)
        return {name, true, "no [[mdev]] entries: virt-handler has none of vfiod's mdevs to remove"};
    std::vector<std::string> removed, created;
    std::set<std::string> seen;
    for (const auto& f : *mdevs) {
        if (f.resource_name.empty() || !seen.insert(f.type).second)
            continue;
        const std::string by_name = kubevirt_type_key(f.type_name), by_dir = kubevirt_type_key(f.type);
        auto in = [&](const std::set<std::string>& s) { return s.count(by_name) || s.count(by_dir); };
        std::string shown = printable(f.type) +
                            (f.type_name == f.type ? "" : " (\"" + printable(f.type_name) + "\")");
        if (in(cr.configured))
            created.push_back(shown);
        else if (!in(cr.external))
            removed.push_back(shown);
    }
    std::string gate = kDisableMdevGate;
    std::string detail;
    if (cr.handling_off())
        detail = "KubeVirt's mdev handling is off (" +
                 (cr.enabled ? "mediatedDevicesConfiguration.enabled: false" : gate + " gate") +
                 "): virt-handler neither creates nor removes mdevs";
    else if (!removed.empty())
        detail = "virt-handler would remove vfiod's mdevs of type " + join(removed) +
                 ": the CR keeps them neither in mediatedDevicesConfiguration nor by a "
                 "mediatedDevices entry with externalResourceProvider: true; add the entries "
                 "vfioctl kubevirt prints, with the " + gate + " feature gate";
    else
        detail = "virt-handler keeps every type of vfiod's mdevs; note: its mdev handling is on: "
                 "add the " + gate + " feature gate (KubeVirt v1.0 to v1.9; from v1.8 "
                 "mediatedDevicesConfiguration.enabled: false does the same)";
    if (!cr.handling_off() && !created.empty())
        detail += "; note: mediatedDevicesConfiguration lists " + join(created) +
                  ", so virt-handler also creates mdevs of it on each parent that has none, "
                  "taking the instances vfiod's entries want";
    if (cr.gate && cr.enabled)
        detail += "; note: the " + gate + " gate is ignored, mediatedDevicesConfiguration.enabled "
                  "is set and wins";
    if (cr.node_types)
        detail += " (every nodeMediatedDeviceTypes entry counted, whatever its nodeSelector)";
    return {name, cr.handling_off() || removed.empty(), detail};
}

}  // namespace vfiod::cli
