#include "app/options.hpp"

#include <cstdio>

namespace vfiod {

namespace {

constexpr const char* kUsage =
    "Usage: vfiod [--root DIR] [--config FILE] [--observe] [--verbose]\n"
    "       vfiod --udev-match ADDR   (for the udev rule)\n"
    "\n"
    "Binds allowlisted PCI devices' whole IOMMU groups to vfio-pci and publishes them as\n"
    "org.vfiod1 on the system bus (DBUS_SYSTEM_BUS_ADDRESS selects another bus).\n"
    "\n"
    "  --root DIR      resolve every path under DIR (default /); udev is used only for /\n"
    "  --config FILE   read FILE (and conf.d/ beside it) instead of DIR/etc/vfiod/vfiod.toml\n"
    "  --observe       plan and publish, never write, whatever the config's mode\n"
    "  --verbose       debug logging\n"
    "  --help, --version\n"
    "\n"
    "Normally started by vfiod.service (or by the udev rule when an allowlisted device appears).\n"
    "SIGHUP or `systemctl reload vfiod` re-reads the configuration; a bad one is rejected and the\n"
    "running one kept. SIGTERM stops it; bindings stay as they are.\n"
    "\n"
    "Files: DIR/etc/vfiod/vfiod.toml, DIR/etc/vfiod/conf.d/*.toml (configuration);\n"
    "       DIR/run/vfiod/group-N (journal of binds and releases; survives restarts)\n"
    "       DIR/run/vfiod/health (device health states and AER baselines; enforce mode)\n"
    "\n"
    "Exit status: 0 stopped cleanly; 1 runtime failure (no system bus, name taken, bus lost);\n"
    "2 bad arguments or a bad configuration (the unit does not restart on it).\n"
    "See also: vfioctl --help (plan, doctor, status, bind, release).\n";

}  // namespace

std::optional<int> parse_options(int argc, char** argv, DaemonOptions* o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&](const char* name) -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "vfiod: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 0;
        } else if (a == "--version") {
            std::puts("vfiod " VFIOD_VERSION);
            return 0;
        } else if (a == "--observe") {
            o->service.force_observe = true;
        } else if (a == "--verbose") {
            o->verbose = true;
        } else if (a == "--root" || a == "--config" || a == "--udev-match") {
            const char* v = value(a.c_str());
            if (!v)
                return 2;
            if (a == "--root")
                o->root = v;
            else if (a == "--config")
                o->service.config_file = v;
            else
                o->udev_match = v;
        } else {
            std::fprintf(stderr, "vfiod: unknown argument '%s'\n%s", a.c_str(), kUsage);
            return 2;
        }
    }
    return std::nullopt;
}

}  // namespace vfiod
