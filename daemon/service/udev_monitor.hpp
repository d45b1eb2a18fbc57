// A thin libudev wrapper: PCI uevents as (action, address) pairs. No decisions are made here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/pci_address.hpp"

struct udev;
struct udev_monitor;

namespace vfiod {

struct PciEvent {
    std::string action;  // add, remove, bind, unbind, change, …
    PciAddress address;
};

class UdevMonitor {
public:
    // Subscribes to the "udev" netlink group filtered to the pci subsystem. Create it before the
    // coldplug scan so no event falls between the scan and the subscription.
    static std::unique_ptr<UdevMonitor> open(std::string* err);
    ~UdevMonitor();
    UdevMonitor(const UdevMonitor&) = delete;
    UdevMonitor& operator=(const UdevMonitor&) = delete;

    int fd() const;
    // Every event queued on the socket (non-blocking); events for names that are not a PCI
    // function address are dropped.
    std::vector<PciEvent> receive();

private:
    UdevMonitor(udev* u, udev_monitor* m) : udev_(u), monitor_(m) {}
    udev* udev_;
    udev_monitor* monitor_;
};

}  // namespace vfiod
