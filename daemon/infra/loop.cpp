#include "infra/loop.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

namespace vfiod {

namespace {

using Clock = Loop::Clock;

// Bus messages dispatched in one turn at most. A flood of cheap calls then cannot keep the loop
// from its signals, workers, timers and watchdog, nor from the held reads, each of which goes
// back on the bus once per turn.
constexpr int kMaxDispatchPerTurn = 64;

// systemd's watchdog (WatchdogSec=): WATCHDOG=1 from the loop itself, so the pings stop exactly
// when the loop stops turning, whatever other threads do.
class Watchdog {
public:
    Watchdog() {
        uint64_t usec = 0;
        // Checks WATCHDOG_PID too: a ping from a process the manager does not watch is wrong.
        if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
            // Well inside systemd's "at least every half interval": a late poll() wake-up or a
            // slow dispatch still leaves margin.
            period_ = std::chrono::microseconds(usec * 2 / 5);
            next_ = Clock::now();
        }
    }
    std::optional<Clock::time_point> deadline() const {
        return period_.count() ? std::optional(next_) : std::nullopt;
    }
    void ping_if_due() {
        if (!period_.count())
            return;
        auto now = Clock::now();
        if (now < next_)
            return;
        sd_notify(0, "WATCHDOG=1");
        next_ = now + period_;
    }

private:
    std::chrono::microseconds period_{0};
    Clock::time_point next_;
};

std::optional<Clock::time_point> earliest(std::optional<Clock::time_point> a,
                                          std::optional<Clock::time_point> b) {
    if (!a)
        return b;
    if (!b)
        return a;
    return std::min(*a, *b);
}

// poll(2)'s timeout: the bus's own (-1: none) shortened to reach `deadline`, if any.
int poll_timeout(int bus_timeout, const std::optional<Clock::time_point>& deadline) {
    if (!deadline)
        return bus_timeout;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
    int ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 24 * 3600 * 1000));
    return bus_timeout < 0 ? ms : std::min(bus_timeout, ms);
}

}  // namespace

std::unique_ptr<sdbus::IConnection> connect_system_bus() {
    try {
        return sdbus::createSystemBusConnection();
    } catch (const sdbus::Error& e) {
        spdlog::critical("cannot connect to the system bus: {}", e.getMessage());
        return nullptr;
    }
}

sigset_t signal_set(std::initializer_list<int> signals) {
    sigset_t set;
    sigemptyset(&set);
    for (int s : signals)
        sigaddset(&set, s);
    return set;
}

void block_signals(const sigset_t& signals) { pthread_sigmask(SIG_BLOCK, &signals, nullptr); }

Mailbox::Mailbox() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void Mailbox::post(std::function<void()> work) {
    {
        std::lock_guard l(mu_);
        queue_.push_back(std::move(work));
    }
    uint64_t one = 1;
    (void)!write(fd_.get(), &one, sizeof one);
}

std::vector<std::function<void()>> Mailbox::take() {
    uint64_t n;
    (void)!read(fd_.get(), &n, sizeof n);
    std::lock_guard l(mu_);
    return std::exchange(queue_, {});
}

Loop::Loop(sdbus::IConnection& bus, const sigset_t& signals) : bus_(bus), signals_(signals) {}

void Loop::watch(int fd, std::function<void()> handler) {
    watches_.emplace_back(fd, std::move(handler));
}

Loop::TimerId Loop::at(Clock::time_point when, std::function<void()> handler) {
    TimerId id = next_timer_++;
    timers_.emplace(id, std::make_pair(when, std::move(handler)));
    return id;
}

std::shared_ptr<Mailbox> Loop::mailbox() {
    if (!mailbox_) {
        mailbox_ = std::make_shared<Mailbox>();
        watch(mailbox_->fd(), [this] {
            for (auto& work : mailbox_->take())
                if (!exit_code_) {
                    work();
                    settle();
                }
        });
    }
    return mailbox_;
}

std::optional<Clock::time_point> Loop::next_wakeup() const {
    std::optional<Clock::time_point> t;
    for (const auto& [id, timer] : timers_)
        t = earliest(t, timer.first);
    for (const auto& d : hooks_.deadlines)
        t = earliest(t, d());
    return t;
}

void Loop::run_due_timers() {
    auto now = Clock::now();
    // One at a time, looked up again each round: a handler may add or cancel timers.
    for (;;) {
        auto due = std::find_if(timers_.begin(), timers_.end(),
                                [&](const auto& t) { return t.second.first <= now; });
        if (due == timers_.end() || exit_code_)
            return;
        auto handler = std::move(due->second.second);
        timers_.erase(due);
        handler();
        settle();
    }
}

void Loop::settle() {
    for (auto& f : hooks_.after_each)
        f();
}

int Loop::run() {
    Fd sig(signalfd(-1, &signals_, SFD_CLOEXEC | SFD_NONBLOCK));
    if (sig.get() < 0 || (mailbox_ && mailbox_->fd() < 0)) {
        spdlog::critical("cannot create a signalfd or eventfd: {}", std::strerror(errno));
        return 1;
    }
    Watchdog watchdog;
    std::vector<pollfd> fds;
    while (!exit_code_) {
        watchdog.ping_if_due();
        sdbus::IConnection::PollData bus_poll;
        try {
            for (int n = 0; n < kMaxDispatchPerTurn && bus_.processPendingRequest(); ++n)
                settle();
            for (auto& f : hooks_.after_dispatch)
                f();
            // One held call goes back on the read queue, ahead of what is still in the socket;
            // like the messages read while the handlers above called out, it makes the
            // connection's timeout 0 and the next turn dispatches it first.
            if (hooks_.release_held)
                hooks_.release_held();
            bus_poll = bus_.getEventLoopPollData();
        } catch (const sdbus::Error& e) {
            // The bus went away (dbus-daemon restarted): systemd restarts us onto the new one.
            spdlog::critical("system bus connection lost: {}", e.getMessage());
            return 1;
        }
        if (exit_code_)
            break;
        fds.assign({{bus_poll.fd, bus_poll.events, 0}, {sig.get(), POLLIN, 0}});
        for (const auto& [fd, handler] : watches_)
            fds.push_back({fd, POLLIN, 0});
        auto wake = earliest(watchdog.deadline(), next_wakeup());
        int r = poll(fds.data(), fds.size(), poll_timeout(bus_poll.getPollTimeout(), wake));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            spdlog::critical("poll: {}", std::strerror(errno));
            return 1;
        }
        if (fds[1].revents & POLLIN) {
            signalfd_siginfo si;
            while (!exit_code_ &&
                   read(sig.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
                if (on_signal_) {
                    on_signal_(static_cast<int>(si.ssi_signo));
                    settle();
                }
        }
        // Only the fds polled this turn; a handler may add a watch, so it runs from a copy.
        for (size_t i = 2; i < fds.size() && !exit_code_; ++i)
            if (fds[i].revents & POLLIN) {
                auto handler = watches_[i - 2].second;
                handler();
                settle();
            }
        run_due_timers();
    }
    return *exit_code_;
}

}  // namespace vfiod
