// A thin libudev wrapper: PCI uevents as (action, address) pairs, mdev parents announcing or
// withdrawing their types, and mdevs' own events (DESIGN §12). No decisions are made here.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/health.hpp"
#include "core/pci_address.hpp"

struct udev;
struct udev_monitor;

namespace vfiod {

struct PciEvent {
    std::string action;  // add, remove, bind, unbind, change, …
    std::optional<PciAddress> address;  // a PCI function's event; nullopt for a virtual parent
    // A change with MDEV_STATE=registered or unregistered: the parent's name under
    // sys/class/mdev_bus (a PCI parent's event has its address too).
    std::string mdev_parent;
    // An mdev's own event (subsystem mdev: add, bind, unbind, remove): its UUID.
    std::string mdev;
    // A PCI function's change with ERROR_EVENT=SUCCESSFUL_RECOVERY or FAILED_RECOVERY (DESIGN
    // §13); BEGIN_RECOVERY and unknown values set nothing here (the event still names the
    // function, whose health is then read).
    Recovery recovery{};
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
    // Subscribes to the "udev" netlink group, unfiltered: a virtual mdev parent's subsystem is
    // its class name (mbochs, mtty), so no subsystem filter can name them all. Create it before
    // the coldplug scan so no event falls between the scan and the subscription.
    static std::unique_ptr<UdevMonitor> open(std::string* err);
    ~UdevMonitor() override;
    UdevMonitor(const UdevMonitor&) = delete;
    UdevMonitor& operator=(const UdevMonitor&) = delete;

    int fd() const override;
    // Every event queued on the socket (non-blocking): the pci subsystem's, for names that are a
    // PCI function's address, the mdev subsystem's, for canonical UUIDs, and any device's change
    // with MDEV_STATE=registered or unregistered; the rest are dropped.
    std::vector<PciEvent> receive() override;

private:
    UdevMonitor(udev* u, udev_monitor* m) : udev_(u), monitor_(m) {}
    udev* udev_;
    udev_monitor* monitor_;
};

}  // namespace vfiod
