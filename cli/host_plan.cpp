#include "host_plan.hpp"

#include <cstdio>

#include "io/config_loader.hpp"

namespace vfiod::cli {

void print_lines(const std::vector<std::string>& lines, const char* prefix) {
    for (const auto& l : lines)
        std::fprintf(stderr, "vfioctl: %s%s\n", prefix, l.c_str());
}

std::optional<Config> checked_config(const Args& args, const char* consequence) {
    ConfigResult cr = load_config(args.root, args.config);
    print_lines(cr.warnings, "warning: ");
    if (!cr.config) {
        print_lines(cr.errors, "");
        std::fprintf(stderr, "vfioctl: the configuration is invalid; %s\n", consequence);
    }
    return std::move(cr.config);
}

HostPlan plan_host(const HostFs& fs, const Config& config) {
    HostPlan hp;
    hp.snapshot = read_snapshot(fs);
    print_lines(hp.snapshot.warnings, "warning: ");
    hp.plan = make_plan(hp.snapshot.topology, hp.snapshot.use, config);
    hp.plan.mdevs = plan_mdevs(hp.snapshot.mdevs, hp.snapshot.topology, hp.snapshot.use, config,
                               &hp.plan.warnings);
    print_lines(hp.plan.warnings, "warning: ");
    return hp;
}

const char* host_use_scope(const HostFs& fs) {
    return fs.live() ? "host use: mounts (PID 1's table), swap, holders, routes, addresses, network "
                       "namespaces, open device nodes; exclusive claims are checked just before "
                       "binding"
                     : "host use: from the tree (mounts, swap, holders, routes, open device nodes "
                       "by path); addresses, other network namespaces and exclusive claims are "
                       "live-host only and were not checked";
}

}  // namespace vfiod::cli
