// vfiod-device-plugin: the kubelet device plugin fed by vfiod's D-Bus inventory (DESIGN §9).
// This file parses the command line, takes the per-kubelet-directory lock, connects to the bus
// and hands over to plugin::Plugin (plugin.hpp), which does the work on one Loop.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "infra/fd.hpp"
#include "infra/instance_lock.hpp"
#include "infra/logging.hpp"
#include "infra/loop.hpp"
#include "plugin.hpp"

namespace {

using namespace vfiod;
using namespace vfiod::plugin;

constexpr const char* kUsage =
    "Usage: vfiod-device-plugin [--kubelet-dir DIR] [--pod-resources PATH] [--root DIR] "
    "[--verbose]\n"
    "\n"
    "Serves vfiod's pass-through devices to the kubelet (device plugin API v1beta1): one\n"
    "resource per ResourceName that vfiod publishes on the system bus (org.vfiod1), device ID =\n"
    "PCI address, Healthy while the IOMMU group is bound and /dev/vfio/<N> exists. It never\n"
    "starts vfiod; while vfiod is away it keeps the last inventory and follows /dev/vfio.\n"
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

// 0 to run, otherwise the exit code + 1.
int parse(int argc, char** argv, Options* o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 1;
        }
        if (a == "--version") {
            std::puts("vfiod-device-plugin " VFIOD_VERSION);
            return 1;
        }
        if (a == "--verbose") {
            o->verbose = true;
            continue;
        }
        std::string* target = a == "--kubelet-dir"     ? &o->kubelet_dir
                              : a == "--pod-resources" ? &o->pod_resources
                              : a == "--root"          ? &o->root
                                                       : nullptr;
        if (!target) {
            std::fprintf(stderr, "vfiod-device-plugin: unknown argument '%s'\n%s", a.c_str(),
                         kUsage);
            return 3;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            std::fprintf(stderr, "vfiod-device-plugin: %s needs a value\n", a.c_str());
            return 3;
        }
        *target = argv[++i];
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options opts;
    if (int r = parse(argc, argv, &opts))
        return r - 1;
    vfiod::setup_logging(opts.verbose, "vfiod-device-plugin");
    // Before gRPC starts its threads, so they inherit the mask and signalfd sees the signals.
    sigset_t signals = signal_set({SIGTERM, SIGINT});
    block_signals(signals);
    signal(SIGPIPE, SIG_IGN);

    // One plugin per kubelet directory: a second one would take over the first one's sockets.
    // The lock is on the directory itself, which the kubelet never removes; it may not have run
    // yet, and creates the directory the same way.
    mkdir(opts.kubelet_dir.c_str(), 0750);
    Fd lock;
    if (!lock_instance("vfiod-device-plugin", opts.kubelet_dir, &lock))
        return 1;
    std::unique_ptr<sdbus::IConnection> bus = connect_system_bus();
    if (!bus)
        return 1;
    spdlog::info("vfiod-device-plugin {} starting: kubelet directory {}, root {}", VFIOD_VERSION,
                 opts.kubelet_dir, opts.root);
    Loop loop(*bus, signals);
    Plugin plugin(opts, *bus, loop);
    return plugin.run(*bus);
}

