// When this process receives vfiod's PropertiesChanged for one object with the State a bench is
// waiting for (device_plugin_bench, dra_plugin_bench): the time taken for the change in flight
// only, since a time left from an earlier change of the same kind must never stand in for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

namespace vfiod::bench {

// Seconds since the epoch, as Python's time.time() (the fake API server's write log) has them.
inline double wall_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

class StateWatch {
public:
    struct Seen {
        std::chrono::steady_clock::time_point steady;
        double wall = 0;  // wall_now()
    };

    // On the system bus (DBUS_SYSTEM_BUS_ADDRESS), for /org/vfiod1/group/GROUP.
    explicit StateWatch(unsigned group) : StateWatch("/org/vfiod1/group/" + std::to_string(group)) {}
    // For the object at `path` (an mdev's: /org/vfiod1/mdev/<uuid with - as _>).
    explicit StateWatch(const std::string& path) : bus_(sdbus::createSystemBusConnection()) {
        slot_ = bus_->addMatch(
            "type='signal',interface='org.freedesktop.DBus.Properties',"
            "member='PropertiesChanged',path='" + path + "'",
            [this](sdbus::Message& m) { on_signal(m); });
        bus_->enterEventLoopAsync();
    }
    ~StateWatch() { bus_->leaveEventLoop(); }
    StateWatch(const StateWatch&) = delete;
    StateWatch& operator=(const StateWatch&) = delete;

    // From now on wait for `state`; whatever was seen before is forgotten.
    void expect(const std::string& state) {
        std::lock_guard l(mu_);
        want_ = state;
        seen_.reset();
    }
    // When the State expected came; nullopt if it did not within `timeout`.
    std::optional<Seen> wait(std::chrono::milliseconds timeout) {
        std::unique_lock l(mu_);
        cv_.wait_for(l, timeout, [&] { return seen_.has_value(); });
        return seen_;
    }

private:
    void on_signal(sdbus::Message& m) {
        Seen now{std::chrono::steady_clock::now(), wall_now()};
        std::string iface;
        std::map<std::string, sdbus::Variant> changed;
        m >> iface >> changed;
        auto it = changed.find("State");
        std::lock_guard l(mu_);
        if (it != changed.end() && it->second.get<std::string>() == want_ && !seen_) {
            seen_ = now;
            cv_.notify_all();
        }
    }

    std::unique_ptr<sdbus::IConnection> bus_;
    sdbus::Slot slot_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::string want_;
    std::optional<Seen> seen_;
};

}  // namespace vfiod::bench
