// The D-Bus face of the service (DESIGN §6, §11, §12): the manager object with the object
// manager, and one object per published group, function, SR-IOV PF and mdev, kept in step with
// the service's Inventory. This is only their composition: it creates them on one connection and
// says which publication goes to which. Each kind is its own file: manager.hpp (an sdbus-c++
// object), group.hpp, device.hpp, pf.hpp and mdev.hpp (served by one sd-bus vtable per
// interface from the records published here, no per-object library state), each with its path
// spelled and parsed.
#pragma once

#include <functional>
#include <memory>

#include "core/pci_address.hpp"
#include "dbus/device.hpp"  // device_object_path, for those who name an object
#include "dbus/group.hpp"   // group_object_path
#include "dbus/mdev.hpp"    // mdev_object_path
#include "dbus/pf.hpp"      // pf_object_path
#include "service/inventory.hpp"

namespace sdbus {
class IConnection;
}

namespace vfiod {

class Authorizer;
class CallLog;
class Service;
class ManagerObject;
template <typename Key, typename Info>
class ExportedSet;
class HeldCalls;

class DbusObjects {
public:
    DbusObjects(sdbus::IConnection& connection, Service& service, Authorizer& auth,
                CallLog& log);
    ~DbusObjects();
    DbusObjects(const DbusObjects&) = delete;
    DbusObjects& operator=(const DbusObjects&) = delete;

    // Brings the objects `change` names in line with `inv` (the service's on_change): an
    // InterfacesAdded for each new group, function or PF, InterfacesRemoved for each gone one,
    // PropertiesChanged naming only the properties that changed. Objects it does not name are
    // not looked at.
    void publish(const Inventory& inv, const InventoryChange& change);

    // From now on, reads that cost in proportion to the whole inventory (GetManagedObjects,
    // Introspect, Plan) are held back while other calls wait (dbus/sd_bus_objects.hpp,
    // HeldCalls). The returned function puts the oldest back, to be dispatched next; the event
    // loop calls it once per turn (LoopHooks::release_held). Held reads wait for it, so a
    // program whose loop does not call it must not call this: its reads stay in order.
    std::function<void()> hold_bulk_reads();

private:
    // Destroyed in reverse: the functions' InterfacesRemoved go before their groups'.
    std::unique_ptr<ManagerObject> manager_;
    std::unique_ptr<ExportedSet<unsigned, GroupInfo>> groups_;
    std::unique_ptr<ExportedSet<PciAddress, DeviceInfo>> devices_;
    std::unique_ptr<ExportedSet<PciAddress, PfInfo>> pfs_;
    std::unique_ptr<ExportedSet<std::string, MdevInfo>> mdevs_;
    std::unique_ptr<HeldCalls> held_reads_;
};

}  // namespace vfiod
