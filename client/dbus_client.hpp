// The one client of vfiod's D-Bus API (DESIGN §6), linked by vfioctl and vfiod-device-plugin:
// the inventory as plan-shaped values, Bind/Release calls with their errors classified, and the
// signals a long-running consumer follows. Reads never D-Bus-activate vfiod (DESIGN §9).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/state.hpp"
#include "health.hpp"

namespace sdbus {
class IConnection;
class IProxy;
class MethodReply;
class Message;
class Error;
}

namespace vfiod::client {

struct DaemonGroup {
    // Group, reason, blockers and devices as the daemon publishes them: each device the
    // daemon's record of it (core/plan.hpp DeviceRecord, NumaNode included), without writes.
    GroupPlan plan;
    std::string state;  // the D-Bus State as published, for display (a newer daemon's too)
    std::string vfio_path;  // VfioPath: "/dev/vfio/N"
    // `state` decoded (core/state.hpp); nullopt for a state this build does not know.
    std::optional<GroupState> state_value = std::nullopt;
    std::string health;  // the group's Health: the worst of its functions' ("" unpublished)
    // Each function's Health and HealthReason, by address; empty when not read from vfiod.
    std::map<PciAddress, Health> device_health = {};
};

struct DaemonPf {
    // Address, counts, reason and blockers as the daemon publishes them (DESIGN §11); the
    // action and writes are a plan's, never published.
    PfPlan plan;
    std::string state;  // the D-Bus State as published, for display (a newer daemon's too)
    // `state` decoded (core/state.hpp); nullopt for a state this build does not know.
    std::optional<PfState> state_value = std::nullopt;
};

struct DaemonMdev {
    // UUID, parent, type, names, group, reason and blockers as the daemon publishes them
    // (DESIGN §12); the action and writes are a plan's, never published.
    MdevPlan plan;
    std::string state;      // the D-Bus State as published, for display (a newer daemon's too)
    std::string vfio_path;  // VfioPath: "/dev/vfio/N", "" while absent
    int numa_node = -1;
    // `state` decoded (core/state.hpp); nullopt for a state this build does not know.
    std::optional<MdevState> state_value = std::nullopt;
    Health health = {};  // its parent's (DESIGN §13)
};

struct DaemonView {
    std::string version;
    std::string mode;
    bool iommu = false;
    std::vector<DaemonGroup> groups;  // by group number
    // By address; nullopt when the daemon publishes no PhysicalFunction object (no [[sriov]]
    // entry names a PF), so that status reads as it did before SR-IOV there.
    std::optional<std::vector<DaemonPf>> pfs = std::nullopt;
    // Foreign last, then by parent, type, vfiod's index (UUID for foreign ones); nullopt when
    // the daemon publishes no MediatedDevice object (no [[mdev]] entry), as for pfs.
    std::optional<std::vector<DaemonMdev>> mdevs = std::nullopt;
};

struct ClientResult {
    enum class Code { Ok, Unavailable, Denied, InvalidArgs, Failed };
    Code code = Code::Ok;
    std::string message;  // why it failed, ready for the operator

    bool ok() const { return code == Code::Ok; }
};

// Reads the daemon's whole object tree (GetManagedObjects + the Manager's properties), addressed
// to org.vfiod1's current unique name so that a stopped vfiod is never activated: without an
// owner the result is Unavailable.
ClientResult fetch_view(sdbus::IConnection& bus, DaemonView* view);
// The same on a fresh system bus connection (DBUS_SYSTEM_BUS_ADDRESS selects another bus).
ClientResult fetch_view(DaemonView* view);

// vfiod's inventory as its objects, kept current from its signals (DESIGN §9): a whole read
// (ViewReader, fetch_view) fills it; PropertiesChanged, InterfacesAdded and InterfacesRemoved
// then change only the objects they name, so a change costs the change, not the inventory. It
// holds decoded copies only: it neither calls nor watches the bus.
class Inventory {
public:
    // Applies one of vfiod's signals (watch_inventory). False when it cannot be applied (the
    // signal invalidates properties without their values, names an object not known here, or
    // does not decode): then only a whole read brings the inventory up to date.
    bool apply(sdbus::Message& signal);
    // The inventory as plan-shaped values, groups by number.
    DaemonView view() const;
    // Objects decoded into this inventory so far: a whole read counts every object, a signal
    // the objects it names. Tests hold a change's cost to the change by it.
    size_t decoded() const { return decoded_; }

private:
    friend struct InventoryEditor;  // the decoders, in dbus_client.cpp
    struct GroupRecord {
        DaemonGroup group;                 // without its devices
        std::vector<std::string> devices;  // Devices: object paths
    };
    std::string version_, mode_;
    bool iommu_ = false;
    std::map<std::string, GroupRecord> groups_;  // by object path
    struct DeviceEntry {
        DeviceRecord record;
        Health health;
    };
    // By object path, as published: a bridge's Target is kept here and dropped by view(), so
    // the order in which Role and Target arrive does not matter.
    std::map<std::string, DeviceEntry> devices_;
    std::map<std::string, DaemonPf> pfs_;  // by object path
    std::map<std::string, DaemonMdev> mdevs_;  // by object path
    size_t decoded_ = 0;
};

// What fetch_view() reads, without waiting for it: for a program whose loop must keep serving
// while vfiod is slow, frozen or hostile. Three asynchronous calls in a row (GetNameOwner to the
// bus, then GetManagedObjects and the Manager's GetAll to that unique name, so nothing is
// activated), each bounded by `timeout`; the outcome arrives through the connection's message
// processing. One read at a time. A failed read reports why: Unavailable when org.vfiod1 has no
// owner, Failed when vfiod did not answer in time or answered something that is no inventory.
class ViewReader {
public:
    using Done = std::function<void(const ClientResult&, Inventory&&)>;

    ViewReader(sdbus::IConnection& bus, std::chrono::milliseconds timeout);
    ~ViewReader();
    ViewReader(const ViewReader&) = delete;
    ViewReader& operator=(const ViewReader&) = delete;

    // Starts a read, abandoning one in flight (its `done` never runs). Ok when it is on its way;
    // otherwise it could not even be sent, and `done` will not run either. Never throws.
    ClientResult start(Done done);
    // Abandons the read in flight, if any. Not from inside `done`.
    void cancel();
    bool busy() const { return read_ != nullptr; }

private:
    struct Read;
    // Each reply handler catches everything: an exception must not unwind through sd-bus.
    void on_owner(sdbus::MethodReply& reply, const sdbus::Error* error);
    void on_objects(sdbus::MethodReply& reply, const sdbus::Error* error);
    void on_manager(sdbus::MethodReply& reply, const sdbus::Error* error);
    void finish(const ClientResult& result, Inventory&& inventory = {});

    sdbus::IConnection& bus_;
    std::chrono::milliseconds timeout_;
    std::unique_ptr<sdbus::IProxy> bus_proxy_;  // org.freedesktop.DBus
    // To vfiod's unique name; replaced only outside its own callbacks (sdbus-c++ still uses a
    // proxy after its callback returns), when the owner has changed.
    std::unique_ptr<sdbus::IProxy> vfiod_;
    std::string owner_;
    std::unique_ptr<Read> read_;  // while a read is in flight
};

// Whether org.vfiod1 has an owner on the system bus (false when the bus cannot be reached).
bool daemon_running();

// Calls org.vfiod1.Manager.<method>(address): "Bind" or "Release".
ClientResult call_group_method(const std::string& method, const std::string& address);

// Subscribes to what changes the inventory: PropertiesChanged and InterfacesAdded/Removed from
// org.vfiod1 (`changed` gets the signal, for Inventory::apply), and NameOwnerChanged for
// org.vfiod1 (`owner` is true when it has one again). The callbacks run from the connection's
// message processing; the subscription lasts as long as the returned handle. Throws
// sdbus::Error when the bus refuses a subscription.
struct Watch;
std::shared_ptr<Watch> watch_inventory(sdbus::IConnection& bus,
                                       std::function<void(sdbus::Message&)> changed,
                                       std::function<void(bool owner)> owner_changed);

}  // namespace vfiod::client
