#include "app/udev_monitor.hpp"

#include <cerrno>
#include <cstring>

#include <libudev.h>

#include "core/mdev.hpp"

namespace vfiod {

std::unique_ptr<UdevMonitor> UdevMonitor::open(std::string* err) {
    udev* u = udev_new();
    if (!u) {
        *err = "udev_new failed";
        return nullptr;
    }
    udev_monitor* m = udev_monitor_new_from_netlink(u, "udev");
    int r = m ? udev_monitor_enable_receiving(m) : -ENOMEM;
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
        const char* subsystem = udev_device_get_subsystem(d);
        const char* state = udev_device_get_property_value(d, "MDEV_STATE");
        PciEvent e{action ? action : "", std::nullopt, "", ""};
        if (name && subsystem && std::strcmp(subsystem, "pci") == 0) {
            e.address = PciAddress::parse(name);
            if (e.action == "change")
                e.recovery = recovery_of(udev_device_get_property_value(d, "ERROR_EVENT"));
        }
        if (name && subsystem && std::strcmp(subsystem, "mdev") == 0 && is_canonical_uuid(name))
            e.mdev = name;
        if (name && state && e.action == "change" &&
            (std::strcmp(state, "registered") == 0 || std::strcmp(state, "unregistered") == 0))
            e.mdev_parent = name;
        if (action && (e.address || !e.mdev_parent.empty() || !e.mdev.empty()))
            events.push_back(std::move(e));
        udev_device_unref(d);
    }
    return events;
}

}  // namespace vfiod
