#include "service/event_loop.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "io/fd.hpp"
#include "service/service.hpp"
#include "service/udev_monitor.hpp"

namespace vfiod {

namespace {

// One GPU hot-plug fires add/bind/… for every function within a few milliseconds; waiting this
// long after the first event lets the burst finish so the group is decided once, whole.
constexpr long kCoalesceNs = 100'000'000;

sigset_t handled_signals() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
#ifdef VFIOD_TEST_HOOKS
    sigaddset(&set, SIGUSR1);
#endif
    return set;
}

using Clock = std::chrono::steady_clock;

// systemd's watchdog (WatchdogSec=): WATCHDOG=1 from the loop itself, so the pings stop exactly
// when the loop stops turning, whatever the write threads do.
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

void reload(Service& service) {
    sd_notify(0, "RELOADING=1");
    // Runs once the operations in flight have ended; the loop goes on serving meanwhile.
    service.reload_async([](const OpResult& r) {
        sd_notifyf(0, "READY=1\nSTATUS=%s", r.ok() ? "running" : "running; last reload rejected");
    });
}

}  // namespace

void block_signals() {
    sigset_t set = handled_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// poll(2)'s timeout: the bus's own (-1: none) shortened to reach `deadline`, if any.
static int poll_timeout(int bus_timeout, const std::optional<Clock::time_point>& deadline) {
    if (!deadline)
        return bus_timeout;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
    int ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 24 * 3600 * 1000));
    return bus_timeout < 0 ? ms : std::min(bus_timeout, ms);
}

int run_event_loop(sdbus::IConnection& bus, Service& service, PciEventSource* events,
                   const LoopHooks& hooks) {
    sigset_t set = handled_signals();
    Fd sig(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    Fd timer(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (sig.get() < 0 || timer.get() < 0) {
        spdlog::critical("cannot create signalfd/timerfd: {}", std::strerror(errno));
        return 1;
    }
    std::set<PciAddress> touched;
    bool timer_armed = false;
    Watchdog watchdog;

    for (;;) {
        watchdog.ping_if_due();
        sdbus::IConnection::PollData bus_poll;
        try {
            while (bus.processPendingRequest()) {
            }
            if (hooks.after_dispatch)
                hooks.after_dispatch();
            bus_poll = bus.getEventLoopPollData();
        } catch (const sdbus::Error& e) {
            // The bus went away (dbus-daemon restarted): systemd restarts us onto the new one.
            spdlog::critical("system bus connection lost: {}", e.getMessage());
            return 1;
        }
        pollfd fds[5] = {
            {bus_poll.fd, bus_poll.events, 0},
            {sig.get(), POLLIN, 0},
            {timer.get(), POLLIN, 0},
            {events ? events->fd() : -1, POLLIN, 0},
            {hooks.work_fd, POLLIN, 0},
        };
        auto deadline = earliest(watchdog.deadline(),
                                 hooks.next_deadline ? hooks.next_deadline() : std::nullopt);
        int r = poll(fds, 5, poll_timeout(bus_poll.getPollTimeout(), deadline));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            spdlog::critical("poll: {}", std::strerror(errno));
            return 1;
        }
        if (fds[1].revents & POLLIN) {
            signalfd_siginfo si;
            while (read(sig.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGHUP) {
                    spdlog::info("SIGHUP: reloading the configuration");
                    reload(service);
#ifdef VFIOD_TEST_HOOKS
                } else if (si.ssi_signo == SIGUSR1) {
                    // Test builds only (tests/integration/vfiod-test-hooks): a wedged loop, to
                    // show the watchdog pings stop. Only SIGKILL ends it.
                    spdlog::warn("test hook: wedging the event loop");
                    for (;;)
                        pause();
#endif
                } else {
                    spdlog::info("signal {}: stopping", si.ssi_signo);
                    sd_notify(0, "STOPPING=1");
                    return 0;
                }
            }
        }
        if ((fds[4].revents & POLLIN) && hooks.work_ready)
            hooks.work_ready();
        if (fds[3].revents & POLLIN) {
            for (const auto& e : events->receive()) {
                spdlog::debug("udev: {} {}", e.action, e.address.str());
                touched.insert(e.address);
            }
            if (!touched.empty() && !timer_armed) {
                itimerspec its{};
                its.it_value.tv_nsec = kCoalesceNs;
                timerfd_settime(timer.get(), 0, &its, nullptr);
                timer_armed = true;
            }
        }
        if (fds[2].revents & POLLIN) {
            uint64_t expirations;
            (void)!read(timer.get(), &expirations, sizeof expirations);
            timer_armed = false;
            std::set<PciAddress> batch;
            batch.swap(touched);
            service.handle_events(batch);
        }
    }
}

}  // namespace vfiod
