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

// Where the event loop gets PCI uevents: the udev monitor, or a test's scripted source.
class PciEventSource {
public:
    virtual ~PciEventSource() = default;
    // Readable when events are queued.
    virtual int fd() const = 0;
    // Every queued event (non-blocking).
    virtual std::vector<PciEvent> receive() = 0;
};

class UdevMonitor final : public PciEventSource {
public:
    // Subscribes to the "udev" netlink group filtered to the pci subsystem. Create it before the
    // coldplug scan so no event falls between the scan and the subscription.
    static std::unique_ptr<UdevMonitor> open(std::string* err);
    ~UdevMonitor() override;
    UdevMonitor(const UdevMonitor&) = delete;
    UdevMonitor& operator=(const UdevMonitor&) = delete;

    int fd() const override;
    // Every event queued on the socket (non-blocking); events for names that are not a PCI
    // function address are dropped.
    std::vector<PciEvent> receive() override;

private:
    UdevMonitor(udev* u, udev_monitor* m) : udev_(u), monitor_(m) {}
    udev* udev_;
    udev_monitor* monitor_;
};

}  // namespace vfiod
