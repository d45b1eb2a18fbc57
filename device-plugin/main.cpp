// vfiod-device-plugin: the kubelet device plugin fed by vfiod's D-Bus inventory (DESIGN §9).
// This file says what its command line is and where its lock goes (the kubelet directory);
// plugin_main.hpp starts it, and plugin::Plugin (plugin.hpp) does the work on one Loop.
#include <sys/stat.h>

#include <cstdio>
#include <optional>
#include <string>

#include <spdlog/spdlog.h>

#include "plugin.hpp"
#include "plugin_main.hpp"

namespace {

using namespace vfiod;
using namespace vfiod::plugin;

constexpr const char* kUsage =
    "Usage: vfiod-device-plugin [--kubelet-dir DIR] [--pod-resources PATH] [--root DIR] "
    "[--verbose]\n"
    "\n"
    "Serves vfiod's pass-through devices to the kubelet (device plugin API v1beta1): one\n"
    "resource per ResourceName that vfiod publishes on the system bus (org.vfiod1), device ID =\n"
    "PCI address, Healthy while the IOMMU group is bound, /dev/vfio/<N> exists and vfiod does\n"
    "not report the group's health failed. It never starts vfiod; while vfiod is away it keeps\n"
    "the last inventory and follows /dev/vfio.\n"
    "It never waits for vfiod: a read it does not answer within 5 s is tried again later.\n"
    "\n"
    "  --kubelet-dir DIR     the kubelet's device plugin directory, with kubelet.sock\n"
    "                        (default /var/lib/kubelet/device-plugins)\n"
    "  --pod-resources PATH  the kubelet's PodResources socket, asked before an Allocate that\n"
    "                        could split an IOMMU group\n"
    "                        (default /var/lib/kubelet/pod-resources/kubelet.sock)\n"
    "  --root DIR            look for dev/vfio and sys under DIR (tests); answers still name\n"
    "                        host paths such as /dev/vfio/13\n"
    "  --verbose             debug logging\n"
    "  --help, --version\n"
    "\n"
    "DBUS_SYSTEM_BUS_ADDRESS selects another system bus. SIGTERM sends every open ListAndWatch\n"
    "stream an empty list, then exits 0.\n"
    "Exit status: 0 stopped by a signal; 1 runtime failure (no system bus, another instance on\n"
    "the same kubelet directory); 2 bad arguments.\n";

CommandLine command_line(Options* o) {
    return {"vfiod-device-plugin", kUsage, &o->verbose,
            {{"--kubelet-dir", &o->kubelet_dir},
             {"--pod-resources", &o->pod_resources},
             {"--root", &o->root}},
            [](const std::string& what, bool unknown) {
                std::fprintf(stderr, "vfiod-device-plugin: %s\n%s", what.c_str(),
                             unknown ? kUsage : "");
            }};
}

// One plugin per kubelet directory. The lock is on the directory itself, which the kubelet never
// removes; it may not have run yet, and creates the directory the same way.
std::optional<std::string> lock_dir(const Options& o) {
    mkdir(o.kubelet_dir.c_str(), 0750);
    return o.kubelet_dir;
}

int serve(const Options& o, sdbus::IConnection& bus, Loop& loop) {
    spdlog::info("vfiod-device-plugin {} starting: kubelet directory {}, root {}", VFIOD_VERSION,
                 o.kubelet_dir, o.root);
    Plugin plugin(o, bus, loop);
    return plugin.run(bus);
}

}  // namespace

int main(int argc, char** argv) {
    Options opts;
    if (std::optional<int> exit = parse_command_line(argc, argv, command_line(&opts)))
        return *exit;
    return run_plugin({"vfiod-device-plugin", opts.verbose, [&] { return lock_dir(opts); },
                       [&](sdbus::IConnection& bus, Loop& loop) {
                           return serve(opts, bus, loop);
                       }});
}
