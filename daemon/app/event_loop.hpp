// The daemon's one event loop, a Loop (infra/loop.hpp): the bus, the udev monitor, a signalfd,
// the workers' completions and the udev coalescing timer share a single poll(2). Idle means
// blocked in poll: no timers, no log lines.
#pragma once

#include <chrono>
#include <functional>
#include <optional>

#include <signal.h>

namespace sdbus {
class IConnection;
}

namespace vfiod {

class Service;
class PciEventSource;

// The signals the loop reads from its signalfd: SIGHUP, SIGTERM, SIGINT. Block them
// (block_signals(daemon_signals()), infra/loop.hpp) before any thread is started, so they are
// delivered only there.
sigset_t daemon_signals();

// What else the loop serves between bus dispatches: housekeeping that must not run inside a bus
// callback, and a deadline (the end of a log rate-limiting window) it must wake up for.
struct LoopHooks {
    std::function<void()> after_dispatch;
    std::function<std::optional<std::chrono::steady_clock::time_point>()> next_deadline;
    // Finished off-loop operations: `work_ready` runs their completions when `work_fd` polls in.
    int work_fd = -1;
    std::function<void()> work_ready;
    // Puts back one bus call held back behind the others (DbusObjects::hold_bulk_reads).
    std::function<void()> release_held;
};

// Runs until SIGTERM/SIGINT, or until the bus is lost. `events` (the udev monitor) is null when
// the root is not "/" (no udev then). Returns the process exit code. Every call into the
// service is one of its guarded entries: a runtime error there is logged, never the end.
int run_event_loop(sdbus::IConnection& bus, Service& service, PciEventSource* events,
                   const LoopHooks& hooks = {});

}  // namespace vfiod
