#include "app/event_loop.hpp"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <utility>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "app/udev_monitor.hpp"
#include "infra/loop.hpp"
#include "service/service.hpp"

namespace vfiod {

namespace {

// One GPU hot-plug fires add/bind/… for every function within a few milliseconds; waiting this
// long after the first event lets the burst finish so the group is decided once, whole.
constexpr std::chrono::milliseconds kCoalesce{100};

void reload(Service& service) {
    sd_notify(0, "RELOADING=1");
    // Runs once the operations in flight have ended; the loop goes on serving meanwhile.
    service.reload_async([](const OpResult& r) {
        sd_notifyf(0, "READY=1\nSTATUS=%s", r.ok() ? "running" : "running; last reload rejected");
        malloc_trim(0);  // what re-reading the whole host left free goes back to the kernel
    });
}

// What the udev events since the last burst named: PCI functions, mdev parents that registered
// or unregistered, and mdevs (DESIGN §12). The first event arms the kCoalesce timer; the burst
// goes to the service when it is due.
struct UdevBursts {
    std::set<PciAddress> touched;
    std::set<std::string> parents;
    std::set<std::string> mdevs;
    std::map<PciAddress, Recovery> recovery;  // DESIGN §13: at most one entry per function
    bool coalescing = false;

    bool empty() const { return touched.empty() && parents.empty() && mdevs.empty(); }
    void add(const PciEvent& e) {
        if (!e.mdev_parent.empty()) {
            spdlog::debug("udev: {} {} (MDEV_STATE)", e.action, e.mdev_parent);
            parents.insert(e.mdev_parent);
        }
        if (!e.mdev.empty()) {
            spdlog::debug("udev: {} mdev {}", e.action, e.mdev);
            mdevs.insert(e.mdev);
        }
        if (e.address) {
            spdlog::debug("udev: {} {}", e.action, e.address->str());
            touched.insert(*e.address);
            if (e.recovery.failed || e.recovery.recovered)
                recovery[*e.address].merge(e.recovery);
        }
    }
};

void watch_udev(Loop& loop, Service& service, PciEventSource& events, UdevBursts& b) {
    loop.watch(events.fd(), [&] {
        for (const auto& e : events.receive())
            b.add(e);
        if (b.empty() || b.coalescing)
            return;
        b.coalescing = true;
        loop.after(kCoalesce, [&] {
            b.coalescing = false;
            std::set<PciAddress> batch = std::exchange(b.touched, {});
            std::set<std::string> parents = std::exchange(b.parents, {});
            std::set<std::string> mdevs = std::exchange(b.mdevs, {});
            std::map<PciAddress, Recovery> recovery = std::exchange(b.recovery, {});
            // The recovery first: the health check it queues is the one the burst's other
            // events join, so the finding names the recovery, not the count it moved.
            if (!recovery.empty())
                service.handle_recovery(recovery);
            if (!batch.empty())
                service.handle_events(batch);
            if (!parents.empty())
                service.handle_mdev_events(parents);
            if (!mdevs.empty())
                service.handle_mdev_changes(mdevs);
        });
    });
}

}  // namespace

sigset_t daemon_signals() {
    return signal_set({SIGHUP, SIGTERM, SIGINT
#ifdef VFIOD_TEST_HOOKS
                       ,
                       SIGUSR1
#endif
    });
}

int run_event_loop(sdbus::IConnection& bus, Service& service, PciEventSource* events,
                   const LoopHooks& hooks) {
    Loop loop(bus, daemon_signals());
    loop.on_signal([&](int signo) {
        if (signo == SIGHUP) {
            spdlog::info("SIGHUP: reloading the configuration");
            reload(service);
#ifdef VFIOD_TEST_HOOKS
        } else if (signo == SIGUSR1) {
            // Test builds only (tests/integration/vfiod-test-hooks): a wedged loop, to show the
            // watchdog pings stop. Only SIGKILL ends it.
            spdlog::warn("test hook: wedging the event loop");
            for (;;)
                pause();
#endif
        } else {
            spdlog::info("signal {}: stopping", signo);
            sd_notify(0, "STOPPING=1");
            loop.quit(0);
        }
    });
    if (hooks.work_fd >= 0 && hooks.work_ready)
        loop.watch(hooks.work_fd, hooks.work_ready);
    UdevBursts bursts;
    if (events)
        watch_udev(loop, service, *events, bursts);
    // What each dispatch decided goes on the bus before the next message is read, and before
    // the replies it held: Bind, Release, udev bursts, worker completions, Reload alike.
    loop.after_each([&] { service.publish(); });
    if (hooks.after_dispatch)
        loop.after_dispatch(hooks.after_dispatch);
    if (hooks.next_deadline)
        loop.wake_by(hooks.next_deadline);
    if (hooks.release_held)
        loop.release_held(hooks.release_held);
    return loop.run();
}

}  // namespace vfiod
