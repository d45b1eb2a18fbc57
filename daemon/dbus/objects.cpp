#include "dbus/objects.hpp"

#include <sdbus-c++/sdbus-c++.h>

#include "core/strings.hpp"
#include "dbus/manager.hpp"
#include "dbus/raw_bus.hpp"
#include "dbus/sd_bus_objects.hpp"

namespace vfiod {

namespace {

// The reads HeldCalls holds back: what they cost grows with the inventory. Matched by member
// whatever the interface (sd-bus's own handlers need it, and holding back a cheap namesake
// costs nothing).
bool is_bulk_read(sd_bus_message* m) {
    for (const char* member : {"GetManagedObjects", "Introspect", "Plan"})
        if (sd_bus_message_is_method_call(m, nullptr, member) > 0)
            return true;
    return false;
}

}  // namespace

DbusObjects::DbusObjects(sdbus::IConnection& connection, Service& service, Authorizer& auth,
                         CallLog& log)
    : manager_(std::make_unique<ManagerObject>(connection, service, auth, log)) {
    sd_bus* bus = sd_bus_of(manager_->object());
    groups_ = std::make_unique<ExportedSet<unsigned, GroupInfo>>(bus, group_objects());
    devices_ = std::make_unique<ExportedSet<PciAddress, DeviceInfo>>(bus, device_objects());
    pfs_ = std::make_unique<ExportedSet<PciAddress, PfInfo>>(bus, pf_objects());
    mdevs_ = std::make_unique<ExportedSet<std::string, MdevInfo>>(bus, mdev_objects());
}

DbusObjects::~DbusObjects() = default;

std::function<void()> DbusObjects::hold_bulk_reads() {
    if (!held_reads_)
        held_reads_ = std::make_unique<HeldCalls>(sd_bus_of(manager_->object()), is_bulk_read);
    return [held = held_reads_.get()] { held->release_one(); };
}

void DbusObjects::publish(const Inventory& inv, const InventoryChange& change) {
    // The one way onto the bus: the objects below only ever hold publishable strings. A signal
    // that still cannot be sent throws to Service::publish, which marks what it could not
    // publish as failed and sends it again. Only what changed is looked at.
    if (change.manager)
        manager_->update(utf8_safe(inv.mode), inv.iommu);
    // Devices go before their group and come after it, so a device's Group path always names
    // an exported object.
    for (const auto& a : change.devices)
        if (!inv.devices.count(a))
            devices_->erase(a);
    for (unsigned id : change.groups)
        if (!inv.groups.count(id))
            groups_->erase(id);
    for (unsigned id : change.groups)
        if (auto g = inv.groups.find(id); g != inv.groups.end())
            groups_->put(id, g->second);
    for (const auto& a : change.devices)
        if (auto d = inv.devices.find(a); d != inv.devices.end())
            devices_->put(a, publishable(d->second));
    // A PF object names no group or function object: its order is its own. A PfInfo holds no
    // host text (dbus/pf.cpp), so it goes as it is.
    for (const auto& a : change.pfs)
        if (auto p = inv.pfs.find(a); p != inv.pfs.end())
            pfs_->put(a, p->second);
        else
            pfs_->erase(a);
    // An mdev object names no other object either.
    for (const auto& uuid : change.mdevs)
        if (auto m = inv.mdevs.find(uuid); m != inv.mdevs.end())
            mdevs_->put(uuid, publishable(m->second));
        else
            mdevs_->erase(uuid);
}

}  // namespace vfiod
