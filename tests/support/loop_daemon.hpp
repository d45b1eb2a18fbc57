// vfiod as daemon/main.cpp wires it (service, workers, D-Bus objects, the event loop on a
// thread of its own) on a test's HostFs and the bus DBUS_SYSTEM_BUS_ADDRESS names: for the
// integration tests and benchmarks that drive it through a real bus.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include <sdbus-c++/sdbus-c++.h>

#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/objects.hpp"
#include "service/event_loop.hpp"
#include "service/service.hpp"
#include "service/udev_monitor.hpp"
#include "infra/workers.hpp"

namespace vfiod::test {

// Call block_signals() before the first thread: SIGTERM must reach only the loop's signalfd.
class Daemon {
public:
    explicit Daemon(HostFs& fs, PciEventSource* events = nullptr, ServiceOptions options = {})
        : service_(fs, std::move(options)), events_(events) {
        bus_ = sdbus::createSystemBusConnection();
        auth_ = std::make_unique<Authorizer>(*bus_);
        objects_ = std::make_unique<DbusObjects>(*bus_, service_, *auth_, log_);
        service_.set_on_change([this](const Inventory& inv, const InventoryChange& change) {
            objects_->publish(inv, change);
        });
        service_.set_workers(&workers_);
    }
    bool start() {
        if (!service_.start())
            return false;
        bus_->requestName("org.vfiod1");
        service_.when_idle([this] { ready_ = true; });  // main.cpp's READY=1
        hooks_.work_fd = workers_.fd();
        hooks_.work_ready = [this] { workers_.dispatch(); };
        hooks_.after_dispatch = [this] { auth_->tidy(); };
        hooks_.release_held = objects_->hold_bulk_reads();
        loop_ = std::thread([this] { run_event_loop(*bus_, service_, events_, hooks_); });
        return true;
    }
    ~Daemon() {
        if (loop_.joinable()) {
            kill(getpid(), SIGTERM);  // blocked in every thread: only the loop's signalfd reads it
            loop_.join();
        }
    }
    Service& service() { return service_; }
    bool ready() const { return ready_; }

private:
    Service service_;
    PciEventSource* events_;
    std::atomic<bool> ready_{false};
    std::unique_ptr<sdbus::IConnection> bus_;
    std::unique_ptr<Authorizer> auth_;
    CallLog log_;
    std::unique_ptr<DbusObjects> objects_;
    LoopHooks hooks_;
    // Last but the thread: waits for the jobs still running before the service goes.
    Workers workers_;
    std::thread loop_;
};

}  // namespace vfiod::test
