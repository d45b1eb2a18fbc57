// vfioctl plan: the dry run. Same config loader, reader and planner as the daemon.
#include <cstdio>

#include "commands.hpp"
#include "core/plan_json.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "text.hpp"

namespace vfiod::cli {

namespace {

void print_lines(const std::vector<std::string>& lines, const char* prefix) {
    for (const auto& l : lines)
        std::fprintf(stderr, "vfioctl: %s%s\n", prefix, l.c_str());
}

}  // namespace

int run_plan(const Args& args) {
    ConfigResult cr = load_config(args.root, args.config);
    print_lines(cr.warnings, "warning: ");
    if (!cr.config) {
        print_lines(cr.errors, "");
        std::fprintf(stderr, "vfioctl: the configuration is invalid; no plan was made\n");
        return kExitUsage;
    }
    Sysfs fs(args.root);
    Snapshot snap = read_snapshot(fs);
    print_lines(snap.warnings, "warning: ");
    Plan plan = make_plan(snap.topology, snap.use, *cr.config);
    print_lines(plan.warnings, "warning: ");

    if (args.json) {
        std::fputs(plan_to_json(plan).c_str(), stdout);
        return kExitOk;
    }

    const Topology& t = snap.topology;
    std::printf("IOMMU: %s, %zu groups; vfio-pci driver: %s\n",
                t.iommu_enabled ? "enabled" : "DISABLED", t.groups.size(),
                t.drivers.count("vfio-pci") ? "loaded" : "not loaded");
    std::printf("config: %s; %zu [[device]], %zu [[protect]]\n",
                cr.config->files.empty() ? "(none)" : cr.config->files.front().c_str(),
                cr.config->devices.size(), cr.config->protects.size());
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
