// vfiod: binds allowlisted PCI devices' IOMMU groups to vfio-pci and publishes them on D-Bus.
// Argument parsing and wiring only; the work is in daemon/service.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <malloc.h>
#include <optional>
#include <string>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "io/host_fs.hpp"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/objects.hpp"
#include "service/event_loop.hpp"
#include "infra/logging.hpp"
#include "infra/loop.hpp"
#include "service/service.hpp"
#include "service/udev_match.hpp"
#include "service/udev_monitor.hpp"
#include "infra/workers.hpp"
#ifdef VFIOD_FAKE_KERNEL
#include "fake_kernel.hpp"
#include "scenarios.hpp"
#endif

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
    "\n"
    "Exit status: 0 stopped cleanly; 1 runtime failure (no system bus, name taken, bus lost);\n"
    "2 bad arguments or a bad configuration (the unit does not restart on it).\n"
    "See also: vfioctl --help (plan, doctor, status, bind, release).\n";

struct Options {
    std::string root = "/";
    vfiod::ServiceOptions service;
    bool verbose = false;
    std::optional<std::string> udev_match;
};

// 0 to run, otherwise the exit code (+1) to leave with.
int parse(int argc, char** argv, Options* o) {
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
            return 1;
        } else if (a == "--version") {
            std::puts("vfiod " VFIOD_VERSION);
            return 1;
        } else if (a == "--observe") {
            o->service.force_observe = true;
        } else if (a == "--verbose") {
            o->verbose = true;
        } else if (a == "--root" || a == "--config" || a == "--udev-match") {
            const char* v = value(a.c_str());
            if (!v)
                return 3;  // exit 2
            if (a == "--root")
                o->root = v;
            else if (a == "--config")
                o->service.config_file = v;
            else
                o->udev_match = v;
        } else {
            std::fprintf(stderr, "vfiod: unknown argument '%s'\n%s", a.c_str(), kUsage);
            return 3;
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options opts;
    if (int r = parse(argc, argv, &opts))
        return r - 1;
    if (opts.udev_match)
        return vfiod::run_udev_match(opts.root, *opts.udev_match);

    vfiod::setup_logging(opts.verbose);
    vfiod::block_signals();
#ifdef VFIOD_FAKE_KERNEL
    // Test builds only (tests/integration/vfiod-fake-kernel, never installed): --root names a
    // synthetic host (tests/support/scenarios) laid out in a temporary tree whose writes the
    // fake kernel carries out, so consumers see real binds and releases. The tree goes on exit.
    vfiod::test::FakeTree tree;
    if (!vfiod::test::build_scenario(opts.root, tree)) {
        spdlog::critical("unknown scenario {}", opts.root);
        return 2;
    }
    vfiod::test::FakeKernel fs(tree);
    std::printf("root=%s\n", tree.root().c_str());
    std::fflush(stdout);
#else
    vfiod::KernelHostFs fs(opts.root);
#endif

    // The monitor exists before the coldplug scan in Service::start(): an event in between is
    // queued on its socket rather than lost.
    std::unique_ptr<vfiod::UdevMonitor> monitor;
    if (fs.live()) {
        std::string err;
        monitor = vfiod::UdevMonitor::open(&err);
        if (!monitor) {
            spdlog::critical("{}", err);
            return 1;
        }
    }

    std::unique_ptr<sdbus::IConnection> bus = vfiod::connect_system_bus();
    if (!bus)
        return 1;

    vfiod::Service service(fs, opts.service);
    vfiod::Authorizer auth(*bus);
    vfiod::CallLog call_log;
    vfiod::DbusObjects objects(*bus, service, auth, call_log);
    service.set_on_change([&objects](const vfiod::Inventory& inv,
                                     const vfiod::InventoryChange& change) {
        objects.publish(inv, change);
    });
    // Every write runs here, off the loop: Bind, Release, and the daemon's own binds from
    // coldplug on. Declared after the service, so it waits for its jobs before the service goes.
    vfiod::Workers workers;
    service.set_workers(&workers);
    try {
        if (!service.start()) {
            spdlog::critical("refusing to start with a bad configuration");
            return 2;  // the unit's RestartPreventExitStatus: retrying cannot fix a config
        }
    } catch (const std::exception& e) {
        // Publishing the first inventory found no bus: exit like a lost bus, never abort.
        spdlog::critical("starting: {}", e.what());
        return 1;
    }

    // The name comes last, so a client that sees it finds the whole object tree.
    try {
        bus->requestName("org.vfiod1");
    } catch (const sdbus::Error& e) {
        spdlog::critical("cannot own org.vfiod1: {}", e.getMessage());
        return 1;
    }
    // Ready once the coldplug binds have ended (bound, refused, failed or stuck), as a unit
    // ordered after vfiod.service expects; the bus is served meanwhile. A write the last run
    // left blocked in the kernel can hold its group's reconciliation for good: after a minute
    // (systemd's start timeout is 90 s) vfiod says it is ready all the same.
    bool ready = false;
    auto ready_by = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    auto say_ready = [&](const std::string& note) {
        if (ready)
            return;
        ready = true;
        spdlog::info("vfiod {} ready: mode {}, root {}{}{}", VFIOD_VERSION,
                     vfiod::to_string(service.mode()), opts.root,
                     monitor ? "" : " (no udev: re-read on Reload/SIGHUP)", note);
        sd_notifyf(0, "READY=1\nSTATUS=running%s", note.c_str());
        // The coldplug read's transient heap (the whole host parsed, every group planned)
        // goes back to the kernel: 2.3 MiB of RSS at 4,000 objects.
        malloc_trim(0);
    };
    service.when_idle([&] { say_ready(""); });
    vfiod::LoopHooks hooks;
    hooks.work_fd = workers.fd();
    hooks.work_ready = [&] { workers.dispatch(); };
    hooks.release_held = objects.hold_bulk_reads();
    hooks.after_dispatch = [&] {
        auth.tidy();
        call_log.flush();
        if (!ready && std::chrono::steady_clock::now() >= ready_by)
            say_ready("; a group still waits for a write blocked in the kernel");
    };
    hooks.next_deadline = [&] {
        auto log = call_log.next_deadline();
        if (ready)
            return log;
        return std::optional(log ? std::min(*log, ready_by) : ready_by);
    };
    try {
        return vfiod::run_event_loop(*bus, service, monitor.get(), hooks);
    } catch (const std::exception& e) {
        // Every entry into the service is guarded and marks its groups failed; this is the last
        // resort for what is not (std::bad_alloc between two entries): exit like a lost bus, so
        // systemd restarts vfiod, rather than std::terminate.
        spdlog::critical("event loop: {}; exiting", e.what());
        return 1;
    }
}
