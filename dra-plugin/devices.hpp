// What vfiod-dra-plugin publishes, as pure functions of vfiod's inventory (DESIGN §10): one DRA
// device per function the device model calls healthy (allowlisted, group bound, /dev/vfio/<N>
// present) and one per mediated device it serves (plugin::mdev_served: ready, /dev/vfio/<N>
// present; DESIGN §12), its name and what it is (the ResourceSlices' attributes:
// api_objects.hpp). Built on the device model both plugins share (plugin-common/model.hpp), not
// a second reading of the inventory. No I/O beyond the HostFs reads, no network, no JSON.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/pci_address.hpp"
#include "dbus_client.hpp"
#include "io/host_fs.hpp"
#include "model.hpp"

namespace vfiod::dra {

// A PCI function, or a mediated device (mdev.uuid set): then address, ids and driver are
// unset, and pcie_root is its PCI parent's.
struct DraDevice {
    struct PciIds {
        uint16_t vendor = 0;
        uint16_t device = 0;
        uint32_t class_code = 0;
        bool operator==(const PciIds&) const = default;
    };
    struct Mdev {
        std::string uuid;       // canonical lower case
        std::string type;       // the type's directory: "nvidia-222"
        std::string type_name;  // its name file: "GRID T4-1Q"
        bool operator==(const Mdev&) const = default;
    };
    std::string name;           // "pci-0000-01-00-0", or "mdev-<uuid>"
    PciAddress address;
    unsigned group = 0;
    std::string resource_name;  // the config's resource_name; empty when none
    PciIds ids;
    std::string driver;         // "vfio-pci" or a variant driver
    int numa_node = -1;
    std::string pcie_root;      // "pci0000:00"; empty when the function's link leads nowhere
    Mdev mdev;
    // vfiod's Health of it (DESIGN §13): a function's own, or failed when another function of
    // its group is (a group is handed out whole); an mdev's is its parent's. State "" from a
    // vfiod that publishes none. The health stream and the slices' taints say it
    // (device_health.hpp).
    client::Health health;
    bool operator==(const DraDevice&) const = default;

    bool is_mdev() const { return !mdev.uuid.empty(); }
    // What the device is on the host, for checkpoints and messages: "0000:01:00.0", or the UUID.
    std::string host_id() const { return is_mdev() ? mdev.uuid : address.str(); }
};

// "pci-0000-01-00-0" for 0000:01:00.0, and back (nullopt for any other text).
std::string device_name(const PciAddress& a);
std::optional<PciAddress> parse_device_name(std::string_view name);
// "mdev-<uuid>" for an mdev's canonical UUID.
std::string mdev_device_name(std::string_view uuid);

// vfiod's inventory as the DRA plugin serves it: the device model's snapshot (for group
// mates and health) and the devices to publish, by name. Immutable once made: Prepare calls on
// gRPC threads share it through a shared_ptr while the loop makes the next one.
struct DraInventory {
    plugin::Snapshot snapshot;
    std::vector<DraDevice> devices;  // sorted by name
    // The published device of that name; nullptr when there is none (released, refused, unknown).
    const DraDevice* find(std::string_view name) const;
};

// pcie_root is read from `host`: the function's (an mdev's PCI parent's) sys/bus/pci/devices/<BDF>
// link resolved, its first component under sys/devices ("pci0000:00"). A device `before`
// publishes keeps the root found then (where a function sits does not change while it is there),
// so a change costs host lookups for the new devices only, not for all of them on every signal.
// An mdev whose UUID is not canonical is never published: its name would be no DNS label.
std::shared_ptr<const DraInventory> make_inventory(const client::DaemonView& view,
                                                   const std::function<bool(unsigned)>& vfio_exists,
                                                   const HostFs& host,
                                                   const DraInventory* before = nullptr);

// The device nodes a container needs for `d` (the CDI spec's), from the rules the device plugin's
// Allocate uses too: a function's whole group's (plugin::group_device_nodes), an mdev's own
// (plugin::mdev_device_nodes). Host paths whatever the root.
std::vector<plugin::DeviceNode> device_nodes(const DraDevice& d, const plugin::Snapshot& snapshot,
                                             const HostFs& host);

}  // namespace vfiod::dra
