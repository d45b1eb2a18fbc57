// vfiod put together: the service on a HostFs, its writes off the loop (Workers), its D-Bus
// objects, polkit and call log on the system bus, the udev monitor, and the event loop that
// serves them. It owns the order they are made and started in, when vfiod says READY=1, and
// how it stops. vfiod's main(), its fake-kernel test build and the integration tests and
// benchmarks all run this one Daemon.
//
// daemon/app is the one room that may include every other. The Daemon does no PCI work of its
// own: deciding and writing is the service's, the bus protocol the D-Bus objects', watchdog
// pings the Loop's (infra/loop.hpp), SIGHUP reloads the event loop's (app/event_loop.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "app/event_loop.hpp"
#include "app/options.hpp"
#include "dbus/call_log.hpp"
#include "infra/workers.hpp"
#include "service/service.hpp"

namespace sdbus {
class IConnection;
}

namespace vfiod {

class HostFs;
class PciEventSource;
class UdevMonitor;
class Authorizer;
class DbusObjects;

// Before the Daemon, in main(): answers --help, --version, --udev-match and bad arguments (the
// exit code: the process is done), else sets up logging and blocks the signals the event loop
// reads. Call it before any thread starts, so those signals reach only the loop's signalfd.
std::optional<int> begin_vfiod(int argc, char** argv, DaemonOptions* options);

class Daemon {
public:
    // `events` stands in for udev (a test's scripted events); without it the udev monitor is
    // opened when `fs` is the live root. The daemon's signals must be blocked already
    // (begin_vfiod, or block_signals(daemon_signals()) in a test).
    explicit Daemon(HostFs& fs, DaemonOptions options = {}, PciEventSource* events = nullptr);
    // Stops a loop start_thread() started, then waits for the writes still running.
    ~Daemon();
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;

    // Opens the udev monitor, connects to the system bus, reads the host and starts the
    // coldplug binds, then owns org.vfiod1. 0 when it serves; else the exit code, logged: 2 for
    // a bad configuration (retrying cannot fix it), 1 for the rest.
    int start();
    // The event loop on the calling thread, until SIGTERM/SIGINT (0) or a lost bus (1).
    int run();
    // start(), then run() on a thread of its own (tests, benchmarks); false if start() failed.
    bool start_thread();
    // Ends that thread's loop as SIGTERM does and returns run()'s exit code.
    int stop();

    // READY=1 was sent: the coldplug binds ended, or a minute passed.
    bool ready() const { return readiness_.ready; }
    Service& service() { return service_; }

private:
    // Where PCI events come from: udev on the live root, a test's events, or nothing.
    struct Events {
        bool live;  // the running host's root: udev describes it
        std::unique_ptr<UdevMonitor> monitor;
        PciEventSource* source;  // monitor, a test's events, or null
    };
    struct Readiness {
        std::atomic<bool> ready{false};
        std::chrono::steady_clock::time_point by;
    };
    struct Background {
        std::thread loop;
        std::atomic<bool> running{false};
        int exit_code = 0;
    };

    int open_events();
    int serve_bus();
    void say_ready(const std::string& note);
    LoopHooks loop_hooks();

    std::string root_;  // as given, for the ready line
    Events events_;
    std::unique_ptr<sdbus::IConnection> bus_;
    Service service_;
    std::unique_ptr<Authorizer> auth_;
    CallLog call_log_;
    std::unique_ptr<DbusObjects> objects_;
    // Every write runs here, off the loop. After the service: on destruction it waits for its
    // jobs before the service goes.
    Workers workers_;
    Readiness readiness_;
    Background background_;
};

// vfiod on `fs`: a Daemon started and run to its end; the exit code.
int run_daemon(HostFs& fs, const DaemonOptions& options);

}  // namespace vfiod
