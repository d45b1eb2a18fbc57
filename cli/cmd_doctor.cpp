// vfioctl doctor: explain, per allowlisted function, whether it is usable for pass-through now,
// what stands in the way, and what KubeVirt's device manager will count. Reads only.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/strings.hpp"
#include "core/json.hpp"
#include "core/plan.hpp"
#include "host_plan.hpp"

namespace vfiod::cli {

namespace {

struct Check {
    std::string name;
    bool ok;
    std::string detail;
};

// KubeVirt's virt-handler counts a permitted device only when its driver link is exactly
// vfio-pci (variant drivers are skipped) and it has an iommu_group link.
bool kubevirt_counts(const PciFunction& fn) { return fn.driver == "vfio-pci" && fn.iommu_group; }

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
        return "the host uses a disk on it: unmount it, swapoff, or remove the dm/md holder "
               "first" + then;
    case Reason::InUseNetwork:
        return "the host uses a network interface on it: move its routes/addresses, take it "
               "out of its bond/bridge, or move it back from the network namespace named above "
               "(or stop the pod/container using it) first" + then;
    case Reason::InUseDevice:
        return "stop or restart without the device the process named above (pid, command) that "
               "holds its device node open" + then;
    case Reason::SriovPf:
        return "this is an SR-IOV PF with VFs enabled: allowlist the VFs instead, or set "
               "sriov_numvfs to 0 first";
    case Reason::BootVga:
        return "it is the boot GPU; set allow_boot_vga = true only if the host console can live "
               "without it";
    case Reason::Companion:
        return "another function shares the IOMMU group: allowlist it too, or set companions = "
               "\"bind\"";
    case Reason::None:
    case Reason::InUseVfio:
    case Reason::VfioUnavailable:
    case Reason::WriteFailed:
    case Reason::Stuck:
    case Reason::Drift:
        return "";  // not planning reasons: make_plan() never gives them
    }
    return "";
}

}  // namespace

int run_doctor(const Args& args) {
    std::optional<Config> config = checked_config(args, "fix it first (vfioctl check-config)");
    if (!config)
        return kExitUsage;
    Sysfs fs(args.root);
    HostPlan hp = plan_host(fs, *config);
    const Topology& t = hp.snapshot.topology;
    const Plan& plan = hp.plan;

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
    bool allowlist = !config->devices.empty();
    checks.push_back({"allowlist", allowlist,
                      allowlist ? std::to_string(config->devices.size()) + " [[device]] entries"
                                : "the allowlist is empty: add [[device]] entries to "
                                  "/etc/vfiod/vfiod.toml"});

    struct Finding {
        const PciFunction* fn;
        const GroupPlan* g;
        const PlannedDevice* d;
    };
    std::vector<Finding> findings;
    std::map<std::string, std::pair<int, int>> per_resource;  // now, after vfiod binds
    for (const auto& g : plan.groups)
        for (const auto& d : g.devices) {
            if (d.role != Role::Allowlisted)
                continue;
            const PciFunction* fn = t.find(d.address);
            findings.push_back({fn, &g, &d});
            std::string res = d.resource_name.value_or("(no resource_name)");
            auto& counts = per_resource[res];
            counts.first += fn && kubevirt_counts(*fn);
            counts.second += g.action != Action::Refuse && d.target == "vfio-pci";
        }

    bool healthy = true;
    for (const auto& c : checks)
        healthy = healthy && c.ok;
    for (const auto& f : findings)
        healthy = healthy && f.g->action == Action::Bound && f.fn && kubevirt_counts(*f.fn);

    if (args.json) {
        JsonWriter w;
        w.begin_object();
        w.key("healthy").value(healthy);
        w.key("checks").begin_array();
        for (const auto& c : checks)
            w.begin_object().key("name").value(c.name).key("ok").value(c.ok).key("detail").value(
                c.detail).end_object();
        w.end_array();
        w.key("devices").begin_array();
        for (const auto& f : findings) {
            w.begin_object();
            w.key("address").value(f.d->address.str());
            w.key("group");
            if (f.g->group)
                w.value(static_cast<int64_t>(*f.g->group));
            else
                w.null();
            w.key("driver");
            if (f.d->driver.empty())
                w.null();
            else
                w.value(f.d->driver);
            w.key("action").value(to_string(f.g->action));
            w.key("reason");
            if (f.g->reason == Reason::None)
                w.null();
            else
                w.value(to_string(f.g->reason));
            w.key("resource_name");
            if (f.d->resource_name)
                w.value(*f.d->resource_name);
            else
                w.null();
            w.key("kubevirt_counts").value(f.fn && kubevirt_counts(*f.fn));
            w.end_object();
        }
        w.end_array();
        w.end_object();
        std::fputs(w.str().c_str(), stdout);
        return healthy ? kExitOk : kExitFailed;
    }

    for (const auto& c : checks)
        std::printf("%s %-10s %s\n", c.ok ? "[ok]  " : "[FAIL]", c.name.c_str(), c.detail.c_str());

    if (findings.empty() && allowlist)
        std::printf("\nNo PCI function on this host matches the allowlist.\n");
    for (const auto& f : findings) {
        const PlannedDevice& d = *f.d;
        std::printf("\n%s  %s  %s\n", d.address.str().c_str(),
                    d.resource_name.value_or("(no resource_name)").c_str(),
                    f.g->group ? ("IOMMU group " + std::to_string(*f.g->group)).c_str()
                               : "no IOMMU group");
        std::printf("  driver: %s; target: %s\n",
                    d.driver.empty() ? "(none)" : printable(d.driver).c_str(),
                    d.target.value_or("-").c_str());
        switch (f.g->action) {
        case Action::Bound:
            std::printf("  ready: the whole group is on its target drivers\n");
            break;
        case Action::Bind:
            std::printf("  vfiod will bind the group (%zu writes; vfioctl plan shows them)\n",
                        f.g->writes().size());
            break;
        case Action::Refuse:
            std::printf("  vfiod refuses the group: %s\n", to_string(f.g->reason));
            for (const auto& why : f.g->details)
                std::printf("    %s\n", why.c_str());
            if (auto a = advice(f.g->reason, d.address); !a.empty())
                std::printf("  fix: %s\n", a.c_str());
            break;
        case Action::Release:
        case Action::Released:
            break;  // release plans come from plan_release(), never from make_plan()
        }
        if (f.fn && kubevirt_counts(*f.fn))
            std::printf("  KubeVirt: counted (device ID = IOMMU group %u)\n", *f.fn->iommu_group);
        else if (d.target && *d.target != "vfio-pci")
            std::printf("  KubeVirt: NOT counted: its device manager only counts functions bound "
                        "to vfio-pci itself, not to the variant driver %s\n",
                        d.target->c_str());
        else
            std::printf("  KubeVirt: NOT counted now (driver is %s; virt-handler logs \"Skipping "
                        "non-vfio-pci device\")%s\n",
                        d.driver.empty() ? "none" : printable(d.driver).c_str(),
                        f.g->action == Action::Bind ? "; counted once vfiod has bound it" : "");
        if (!d.resource_name)
            std::printf("  note: no resource_name: KubeVirt's pciHostDevices needs one to expose "
                        "it\n");
    }
    if (!per_resource.empty()) {
        std::printf("\nWhat KubeVirt will count (node allocatable):\n");
        for (const auto& [res, c] : per_resource)
            std::printf("  %-40s %d now, %d once vfiod has bound what it can\n", res.c_str(),
                        c.first, c.second);
    }
    std::printf("\n%s\n", healthy ? "Healthy: every allowlisted device is ready for pass-through."
                                  : "Not every allowlisted device is ready (see above).");
    return healthy ? kExitOk : kExitFailed;
}

}  // namespace vfiod::cli
