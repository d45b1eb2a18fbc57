#include "app/udev_monitor.hpp"

#include <cerrno>
#include <cstring>

#include <libudev.h>

namespace vfiod {

std::unique_ptr<UdevMonitor> UdevMonitor::open(std::string* err) {
    udev* u = udev_new();
    if (!u) {
        *err = "udev_new failed";
        return nullptr;
    }
    udev_monitor* m = udev_monitor_new_from_netlink(u, "udev");
    int r = m ? udev_monitor_filter_add_match_subsystem_devtype(m, "pci", nullptr) : -ENOMEM;
    if (r >= 0)
        r = udev_monitor_enable_receiving(m);
    if (r < 0) {
        *err = std::string("cannot listen to udev: ") + std::strerror(-r);
        if (m)
            udev_monitor_unref(m);
        udev_unref(u);
        return nullptr;
    }
    return std::unique_ptr<UdevMonitor>(new UdevMonitor(u, m));
}

UdevMonitor::~UdevMonitor() {
    udev_monitor_unref(monitor_);
    udev_unref(udev_);
}

int UdevMonitor::fd() const { return udev_monitor_get_fd(monitor_); }

std::vector<PciEvent> UdevMonitor::receive() {
    std::vector<PciEvent> events;
    // The monitor socket is non-blocking: receive_device returns null once it is drained.
    while (udev_device* d = udev_monitor_receive_device(monitor_)) {
        const char* action = udev_device_get_action(d);
        const char* name = udev_device_get_sysname(d);
        auto addr = name ? PciAddress::parse(name) : std::nullopt;
        if (action && addr)
            events.push_back({action, *addr});
        udev_device_unref(d);
    }
    return events;
}

}  // namespace vfiod
