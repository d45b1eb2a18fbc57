#include "app/daemon.hpp"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "app/udev_match.hpp"
#include "app/udev_monitor.hpp"
#include "dbus/authorization.hpp"
#include "dbus/objects.hpp"
#include "infra/logging.hpp"
#include "infra/loop.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

namespace {

// A write the last run left blocked in the kernel can hold its group's reconciliation for
// good: after this long (systemd's start timeout is 90 s) vfiod says it is ready all the same.
constexpr std::chrono::minutes kReadyAtTheLatest{1};

}  // namespace

std::optional<int> begin_vfiod(int argc, char** argv, DaemonOptions* options) {
    if (auto code = parse_options(argc, argv, options))
        return code;
    if (options->udev_match)
        return run_udev_match(options->root, *options->udev_match);
    setup_logging(options->verbose);
    block_signals(daemon_signals());
    return std::nullopt;
}

Daemon::Daemon(HostFs& fs, DaemonOptions options, PciEventSource* events)
    : root_(std::move(options.root)),
      events_{fs.live(), nullptr, events},
      service_(fs, std::move(options.service)) {}

Daemon::~Daemon() {
    if (background_.loop.joinable())
        stop();
}

// The monitor exists before the coldplug scan in Service::start(): an event in between is
// queued on its socket rather than lost.
int Daemon::open_events() {
    if (events_.source || !events_.live)
        return 0;
    std::string err;
    events_.monitor = UdevMonitor::open(&err);
    if (!events_.monitor) {
        spdlog::critical("{}", err);
        return 1;
    }
    events_.source = events_.monitor.get();
    return 0;
}

int Daemon::serve_bus() {
    bus_ = connect_system_bus();
    if (!bus_)
        return 1;
    auth_ = std::make_unique<Authorizer>(*bus_);
    objects_ = std::make_unique<DbusObjects>(*bus_, service_, *auth_, call_log_);
    service_.set_on_change([this](const Inventory& inv, const InventoryChange& change) {
        objects_->publish(inv, change);
    });
    service_.set_workers(&workers_);
    try {
        if (!service_.start()) {
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
        bus_->requestName("org.vfiod1");
    } catch (const sdbus::Error& e) {
        spdlog::critical("cannot own org.vfiod1: {}", e.getMessage());
        return 1;
    }
    return 0;
}

int Daemon::start() {
    if (int code = open_events())
        return code;
    if (int code = serve_bus())
        return code;
    // Ready once the coldplug binds have ended (bound, refused, failed or stuck), as a unit
    // ordered after vfiod.service expects; the bus is served meanwhile.
    readiness_.by = std::chrono::steady_clock::now() + kReadyAtTheLatest;
    service_.when_idle([this] { say_ready(""); });
    return 0;
}

void Daemon::say_ready(const std::string& note) {
    if (readiness_.ready)
        return;
    readiness_.ready = true;
    spdlog::info("vfiod {} ready: mode {}, root {}{}{}", VFIOD_VERSION, to_string(service_.mode()),
                 root_, events_.source ? "" : " (no udev: re-read on Reload/SIGHUP)", note);
    sd_notifyf(0, "READY=1\nSTATUS=running%s", note.c_str());
    // The coldplug read's transient heap (the whole host parsed, every group planned) goes
    // back to the kernel: 2.3 MiB of RSS at 4,000 objects.
    malloc_trim(0);
}

LoopHooks Daemon::loop_hooks() {
    LoopHooks hooks;
    hooks.work_fd = workers_.fd();
    hooks.work_ready = [this] { workers_.dispatch(); };
    hooks.release_held = objects_->hold_bulk_reads();
    hooks.after_dispatch = [this] {
        auth_->tidy();
        call_log_.flush();
        if (!readiness_.ready && std::chrono::steady_clock::now() >= readiness_.by)
            say_ready("; a group still waits for a write blocked in the kernel");
        service_.flush_health();
    };
    hooks.next_deadline = [this] {
        auto log = call_log_.next_deadline();
        if (auto health = service_.health_due())
            log = log ? std::min(*log, *health) : *health;
        if (readiness_.ready)
            return log;
        return std::optional(log ? std::min(*log, readiness_.by) : readiness_.by);
    };
    return hooks;
}

int Daemon::run() {
    try {
        return run_event_loop(*bus_, service_, events_.source, loop_hooks());
    } catch (const std::exception& e) {
        // Every entry into the service is guarded and marks its groups failed; this is the last
        // resort for what is not (std::bad_alloc between two entries): exit like a lost bus, so
        // systemd restarts vfiod, rather than std::terminate.
        spdlog::critical("event loop: {}; exiting", e.what());
        return 1;
    }
}

bool Daemon::start_thread() {
    if (start() != 0)
        return false;
    background_.running = true;
    background_.loop = std::thread([this] {
        background_.exit_code = run();
        background_.running = false;
    });
    return true;
}

int Daemon::stop() {
    if (!background_.loop.joinable())
        return background_.exit_code;
    // Blocked in every thread: only the loop's signalfd reads it, as it reads systemd's. A loop
    // that ended already (its bus lost) would leave it pending for the next Daemon's.
    if (background_.running)
        kill(getpid(), SIGTERM);
    background_.loop.join();
    return background_.exit_code;
}

int run_daemon(HostFs& fs, const DaemonOptions& options) {
    Daemon daemon(fs, options);
    if (int code = daemon.start())
        return code;
    return daemon.run();
}

}  // namespace vfiod
