// vfioctl plan: the dry run. Same config loader, reader and planner as the daemon.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "core/plan_json.hpp"
#include "host_plan.hpp"
#include "initramfs.hpp"
#include "text.hpp"

namespace vfiod::cli {

namespace {

// The PFs of [[sriov]] entries after the groups; nothing at all without such entries.
void print_pfs(const Plan& plan) {
    if (!plan.pfs)
        return;
    size_t counts[3] = {0, 0, 0};
    for (const auto& pf : *plan.pfs) {
        std::printf("\n%s", render_pf(pf, true).c_str());
        ++counts[static_cast<int>(pf.action)];
    }
    std::printf("\nSR-IOV: %zu PF%s to change, %zu ready, %zu refused\n", counts[0],
                counts[0] == 1 ? "" : "s", counts[1], counts[2]);
}

// The mdevs of [[mdev]] entries (DESIGN §12) after the PFs; nothing at all without such entries.
void print_mdevs(const Plan& plan) {
    if (!plan.mdevs)
        return;
    size_t counts[5] = {0, 0, 0, 0, 0};
    for (const auto& m : *plan.mdevs) {
        std::printf("\nmdev %s on %s, type %s: %s%s%s\n", m.uuid.c_str(), m.parent.c_str(),
                    m.type.empty() ? "?" : m.type.c_str(), to_string(m.action),
                    m.reason == Reason::None ? "" : " ", to_string(m.reason));
        for (const auto& d : m.details)
            std::printf("  %s\n", d.c_str());
        for (const auto& w : m.writes())
            std::printf("  write %s <- %s\n", w.path.c_str(), w.value.c_str());
        ++counts[static_cast<int>(m.action)];
    }
    std::printf("\nmdevs: %zu to create, %zu ready, %zu to remove, %zu refused, %zu foreign\n",
                counts[0], counts[1], counts[2], counts[3], counts[4]);
}

// What each kernel's initramfs carries for early binding (DESIGN §14), after the mdevs; nothing
// without a record or an early entry.
void print_initramfs(const HostFs& fs, const Config& config, const Plan& plan) {
    std::vector<std::string> warnings;
    InitramfsSummary sum = summarize_initramfs(fs, config, plan, &warnings);
    print_lines(warnings, "warning: ");
    if (!sum.shown)
        return;
    std::printf("\n");
    for (const auto& line : sum.lines)
        std::printf("%s\n", line.c_str());
}

}  // namespace

int run_plan(const Args& args) {
    std::optional<Config> config = checked_config(args, "no plan was made");
    if (!config)
        return kExitUsage;
    KernelHostFs fs(args.root);
    HostPlan hp = plan_host(fs, *config);
    const Plan& plan = hp.plan;

    if (args.json) {
        std::fputs(plan_to_json(plan).c_str(), stdout);
        return kExitOk;
    }

    const Topology& t = hp.snapshot.topology;
    std::printf("IOMMU: %s, %zu groups; vfio-pci driver: %s\n",
                t.iommu_enabled ? "enabled" : "DISABLED", t.groups.size(),
                t.drivers.count("vfio-pci") ? "loaded" : "not loaded");
    // [[sriov]] entries are counted only when there are some: other hosts' text is unchanged.
    std::string tables =
        config->sriovs.empty() ? "" : ", " + std::to_string(config->sriovs.size()) + " [[sriov]]";
    if (!config->mdevs.empty())
        tables += ", " + std::to_string(config->mdevs.size()) + " [[mdev]]";
    std::printf("config: %s; %zu [[device]], %zu [[protect]]%s\n",
                config->files.empty() ? "(none)" : config->files.front().c_str(),
                config->devices.size(), config->protects.size(), tables.c_str());
    std::printf("%s\n", host_use_scope(fs));
    if (plan.groups.empty() && (!plan.pfs || plan.pfs->empty()) &&
        (!plan.mdevs || plan.mdevs->empty())) {
        std::printf("\nNothing to do: no PCI function on this host matches the allowlist%s.\n",
                    plan.pfs ? " or an [[sriov]] entry" : "");
        print_initramfs(fs, *config, plan);
        return kExitOk;
    }
    size_t counts[3] = {0, 0, 0};
    for (const auto& g : plan.groups) {
        std::printf("\n%s", render_group(g, true).c_str());
        ++counts[static_cast<int>(g.action)];
    }
    std::printf("\n%zu to bind, %zu already bound, %zu refused\n", counts[0], counts[1],
                counts[2]);
    print_pfs(plan);
    print_mdevs(plan);
    print_initramfs(fs, *config, plan);
    if (!t.iommu_enabled)
        std::printf("The IOMMU is off: enable it on the kernel command line (intel_iommu=on or "
                    "amd_iommu=on, and VT-d/AMD-Vi in the firmware); see vfioctl doctor.\n");
    return kExitOk;
}

}  // namespace vfiod::cli
