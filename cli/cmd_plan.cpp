// vfioctl plan: the dry run. Same config loader, reader and planner as the daemon.
#include <cstdio>

#include "commands.hpp"
#include "core/plan_json.hpp"
#include "host_plan.hpp"
#include "text.hpp"

namespace vfiod::cli {

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
    std::printf("config: %s; %zu [[device]], %zu [[protect]]\n",
                config->files.empty() ? "(none)" : config->files.front().c_str(),
                config->devices.size(), config->protects.size());
    std::printf("%s\n", host_use_scope(fs));
    if (plan.groups.empty()) {
        std::printf("\nNothing to do: no PCI function on this host matches the allowlist.\n");
        return kExitOk;
    }
    size_t counts[3] = {0, 0, 0};
    for (const auto& g : plan.groups) {
        std::printf("\n%s", render_group(g, true).c_str());
        ++counts[static_cast<int>(g.action)];
    }
    std::printf("\n%zu to bind, %zu already bound, %zu refused\n", counts[0], counts[1],
                counts[2]);
    if (!t.iommu_enabled)
        std::printf("The IOMMU is off: enable it on the kernel command line (intel_iommu=on or "
                    "amd_iommu=on, and VT-d/AMD-Vi in the firmware); see vfioctl doctor.\n");
    return kExitOk;
}

}  // namespace vfiod::cli
