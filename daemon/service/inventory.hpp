// What the daemon publishes (DESIGN §6) as plain values: the service layer fills it, the D-Bus
// layer diffs two of them into InterfacesAdded/Removed and PropertiesChanged. No D-Bus here.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/health.hpp"
#include "core/pci_address.hpp"
#include "core/plan.hpp"
#include "core/state.hpp"

namespace vfiod {

// A published object's health (DESIGN §13): a function's own, an mdev's its parent's.
struct HealthInfo {
    Health health = Health::Unknown;
    std::string health_reason;  // "" for ok; "CODE: text" otherwise

    bool operator==(const HealthInfo&) const = default;
};

// A published function: the planner's record of it (core/plan.hpp), and what only the daemon
// knows about it. Published as "" where the record holds nullopt (a bridge's target, no
// resource_name).
struct DeviceInfo : DeviceRecord, HealthInfo {
    std::string original_driver;  // "" when unknown or none
    unsigned group = 0;

    bool operator==(const DeviceInfo&) const = default;
};

struct GroupInfo {
    unsigned id = 0;
    GroupState state = GroupState::Pending;
    Reason reason = Reason::None;
    std::vector<PciAddress> blockers;
    std::vector<PciAddress> devices;
    Health health = Health::Ok;  // the worst of its functions'

    bool operator==(const GroupInfo&) const = default;
};

// A PF an [[sriov]] entry names (DESIGN §11): /org/vfiod1/pf/…, org.vfiod1.PhysicalFunction.
struct PfInfo {
    PciAddress address;
    unsigned total_vfs = 0;   // sriov_totalvfs
    unsigned num_vfs = 0;     // sriov_numvfs as last read
    unsigned wanted_vfs = 0;  // the governing entry's num_vfs
    PfState state = PfState::Pending;
    Reason reason = Reason::None;
    std::vector<PciAddress> blockers;

    bool operator==(const PfInfo&) const = default;
};

// An mdev (DESIGN §12): one an [[mdev]] entry wants (present or not), one of vfiod's own on
// its way out, or a foreign one: /org/vfiod1/mdev/…, org.vfiod1.MediatedDevice.
struct MdevInfo : HealthInfo {
    std::string uuid;           // canonical lower case
    std::string parent;         // its name under /sys/class/mdev_bus
    std::string type;           // the type's directory
    std::string type_name;      // the type's name file, else the type
    std::string resource_name;  // the governing entry's; "" for a foreign mdev
    // Its IOMMU group while its /dev/vfio/<N> exists (IommuGroup 0 and VfioPath "" otherwise).
    std::optional<unsigned> group;
    int numa_node = -1;  // the parent's; -1 for a virtual parent
    MdevState state = MdevState::Pending;
    Reason reason = Reason::None;
    std::vector<std::string> blockers;  // in-use-mdev: who holds it open

    bool operator==(const MdevInfo&) const = default;
};

struct Inventory {
    std::string mode = "observe";
    bool iommu = false;
    std::map<unsigned, GroupInfo> groups;
    std::map<PciAddress, DeviceInfo> devices;
    std::map<PciAddress, PfInfo> pfs;  // empty without [[sriov]] entries
    std::map<std::string, MdevInfo> mdevs;  // by UUID; empty without [[mdev]] entries

    bool operator==(const Inventory&) const = default;
};

// What one publication changed: the D-Bus layer touches these objects and no others, so a change
// costs the same on a host of four groups or four thousand.
struct InventoryChange {
    bool manager = false;          // Mode or IommuEnabled may differ
    std::set<unsigned> groups;     // groups added, changed or gone
    std::set<PciAddress> devices;  // functions added, changed or gone
    std::set<PciAddress> pfs;      // PFs added, changed or gone
    std::set<std::string> mdevs;   // mdevs (by UUID) added, changed or gone

    bool empty() const {
        return !manager && groups.empty() && devices.empty() && pfs.empty() && mdevs.empty();
    }
    void merge(InventoryChange&& other) {
        manager = manager || other.manager;
        groups.merge(other.groups);
        devices.merge(other.devices);
        pfs.merge(other.pfs);
        mdevs.merge(other.mdevs);
    }
};

// Told what a publication changed, with the inventory as it is now (Service::set_on_change).
using OnChange = std::function<void(const Inventory&, const InventoryChange&)>;

// inv as it may go on the bus: every string valid UTF-8 (invalid bytes become U+FFFD). The host
// names things with bytes, not text (a driver directory "evil\xff", a journal entry recording
// it), and sd-bus refuses to send a string that is not UTF-8; the D-Bus layer publishes only
// what passed through here.
Inventory publishable(Inventory inv);
DeviceInfo publishable(DeviceInfo d);
MdevInfo publishable(MdevInfo m);

}  // namespace vfiod
