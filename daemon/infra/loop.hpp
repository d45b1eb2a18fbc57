// Loop: one poll(2) around a system bus connection, shared by vfiod (app/event_loop.cpp) and
// vfiod-device-plugin. It serves the bus, a signalfd, the other fds a program adds, one-shot
// timers and systemd's watchdog. Idle means blocked in poll: only an fd, a due timer, a deadline
// or a signal wakes it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <signal.h>

#include "infra/fd.hpp"

namespace sdbus {
class IConnection;
}

namespace vfiod {

// The system bus (DBUS_SYSTEM_BUS_ADDRESS selects another), or null after logging why.
std::unique_ptr<sdbus::IConnection> connect_system_bus();

sigset_t signal_set(std::initializer_list<int> signals);
// Blocks `signals` for the calling thread. Call it before any thread starts, so that they are
// delivered only to a Loop's signalfd.
void block_signals(const sigset_t& signals);

// Work handed to a Loop from other threads (a gRPC completion, say): post() queues it and wakes
// the loop, which runs it on its own thread. Whoever posts holds the mailbox, so a post that
// comes after the loop has gone is dropped instead of touching freed memory.
class Mailbox {
public:
    Mailbox();
    void post(std::function<void()> work);
    int fd() const { return fd_.get(); }
    // Everything posted so far, in order; clears the wake-up.
    std::vector<std::function<void()>> take();

private:
    Fd fd_;  // an eventfd
    std::mutex mu_;
    std::vector<std::function<void()>> queue_;
};

class Loop {
public:
    using Clock = std::chrono::steady_clock;
    using TimerId = std::uint64_t;

    // `signals` (blocked by block_signals() beforehand) are read from a signalfd and handed to
    // on_signal().
    Loop(sdbus::IConnection& bus, const sigset_t& signals);
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;

    void on_signal(std::function<void(int signo)> handler) { on_signal_ = std::move(handler); }
    // `handler` runs whenever `fd` polls readable. The fd stays the caller's.
    void watch(int fd, std::function<void()> handler);
    // `handler` runs once, on the loop, when `when` has come; cancel() before that drops it.
    TimerId at(Clock::time_point when, std::function<void()> handler);
    TimerId after(Clock::duration delay, std::function<void()> handler) {
        return at(Clock::now() + delay, std::move(handler));
    }
    void cancel(TimerId id) { timers_.erase(id); }
    // Runs after each round of bus dispatching, before the loop sleeps: work that must not run
    // inside a bus callback. A bus error it throws ends the loop like a lost bus.
    void after_dispatch(std::function<void()> handler) {
        hooks_.after_dispatch.push_back(std::move(handler));
    }
    // Runs after every single dispatch: each bus message, signal, fd handler, timer and
    // mailbox item. What a handler changed is made visible here (vfiod publishes the groups it
    // touched and then sends the replies it held), before the loop reads the next message: a
    // caller that has its answer and asks again sees what the answer did. It must not throw.
    void after_each(std::function<void()> handler) {
        hooks_.after_each.push_back(std::move(handler));
    }
    // Asked before every sleep: a time the loop must wake up at (the end of a log window).
    void wake_by(std::function<std::optional<Clock::time_point>()> deadline) {
        hooks_.deadlines.push_back(std::move(deadline));
    }
    // Bus calls a filter held back (vfiod's bulk reads, dbus/sd_bus_objects.hpp HeldCalls):
    // `release_one` puts the oldest back on the connection's read queue. A turn of the loop
    // dispatches up to 64 bus messages, then calls it; the call it put back is dispatched
    // first in the next turn, and the fds, signals and timers are served in between. So a
    // call waits for one held read at most, and held reads for 64 other messages at most (and,
    // HeldCalls' own rule, for the connection's write queue to drain).
    void release_held(std::function<void()> release_one) {
        hooks_.release_held = std::move(release_one);
    }
    // The loop's mailbox, created (and watched) on first use.
    std::shared_ptr<Mailbox> mailbox();
    // run() returns `code` once the handler that called this has returned.
    void quit(int code) { exit_code_ = code; }

    // Until quit(); 1 when the bus is lost or poll(2) fails.
    int run();

private:
    std::optional<Clock::time_point> next_wakeup() const;
    void run_due_timers();
    void settle();

    sdbus::IConnection& bus_;
    sigset_t signals_;
    std::function<void(int)> on_signal_;
    std::vector<std::pair<int, std::function<void()>>> watches_;
    std::map<TimerId, std::pair<Clock::time_point, std::function<void()>>> timers_;
    TimerId next_timer_ = 1;
    // What the program hooked into each turn (after_dispatch(), after_each(), wake_by(),
    // release_held()).
    struct Hooks {
        std::vector<std::function<void()>> after_dispatch;
        std::vector<std::function<void()>> after_each;
        std::vector<std::function<std::optional<Clock::time_point>()>> deadlines;
        std::function<void()> release_held;
    };
    Hooks hooks_;
    std::optional<int> exit_code_;
    std::shared_ptr<Mailbox> mailbox_;
};

}  // namespace vfiod
