// The device model both kubelet plugins serve from, as pure functions of vfiod's inventory
// (DESIGN §9, §10, §12): the published functions by resource name, with health and NUMA node,
// each group's functions, the served mdevs by resource name, and the device nodes a container
// needs for a group or an mdev. No gRPC and no D-Bus
// here, so the rules are unit tested on their own. The device plugin's Allocate and preferred
// allocation are built on it (device-plugin/allocation.hpp), the DRA plugin's devices too
// (dra-plugin/devices.hpp).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/pci_address.hpp"
#include "core/resource_names.hpp"
#include "dbus_client.hpp"
#include "io/host_fs.hpp"

namespace vfiod::plugin {

struct PluginDevice {
    PciAddress address;  // the device ID the kubelet sees
    unsigned group = 0;
    int numa_node = -1;
    bool healthy = false;
    // vfiod's Health is failed for it or its group (DESIGN §13): unhealthy whatever its State.
    bool failed = false;
    bool operator==(const PluginDevice&) const = default;
};

// A served mediated device (DESIGN §12): the kubelet's ID for it is its UUID.
struct PluginMdev {
    std::string uuid;  // canonical lower case
    unsigned group = 0;
    int numa_node = -1;  // its parent's
    // False while vfiod's Health of it (its parent's) is failed: listed Unhealthy, not withdrawn,
    // so a running VM's device shows what became of it (DESIGN §13).
    bool healthy = true;
    bool operator==(const PluginMdev&) const = default;
};

// Snapshot::ids' key: an address packed into one word.
struct PciAddressHash {
    size_t operator()(const PciAddress& a) const noexcept;
};

struct Snapshot {
    // A resource name is functions or mdevs, never both: a name vfiod publishes for both kinds
    // is in `refused`, in neither map.
    // Resource name → its functions, by address.
    std::map<std::string, std::vector<PluginDevice>> resources;
    // Resource name → its served mdevs (mdev_served()), by UUID: one pool whatever their types
    // and parents. A name whose mdevs are all withdrawn is kept, with none: its endpoint stays
    // and lists nothing.
    std::map<std::string, std::vector<PluginMdev>> mdev_resources;
    // Every non-bridge function of each published group (companions included): Allocate hands
    // out whole groups and checks all of their functions.
    std::map<unsigned, std::vector<PciAddress>> group_functions;
    // Resource names not served, and why: two names that would share a socket or an environment
    // variable (check-config refuses them; a vfiod that publishes them anyway gets neither served).
    std::map<std::string, std::string> refused;
    // Device ID -> its resource and its position there, filled by make_snapshot(): a lookup by
    // ID is one probe, so Allocate's work grows with the request, not with request x inventory.
    std::unordered_map<PciAddress, std::pair<std::string, size_t>, PciAddressHash> ids;
    // The same for mdevs, by UUID.
    std::unordered_map<std::string, std::pair<std::string, size_t>> mdev_ids;
    // UUID → its resource name and why, for each mdev vfiod publishes with a resource name but
    // that is not served: what Allocate says when the kubelet still asks for one.
    std::unordered_map<std::string, std::pair<std::string, std::string>> withdrawn;

    // The device `id` names in `resource`; nullptr when it names none there.
    const PluginDevice* find(const std::string& resource, const PciAddress& id) const;
    // The same in any resource.
    const PluginDevice* find(const PciAddress& id) const;
    // The served mdev `uuid` names in `resource`; nullptr when it names none there.
    const PluginMdev* find_mdev(const std::string& resource, const std::string& uuid) const;
    // Whether `resource` is served, of either kind.
    bool serves(const std::string& resource) const {
        return resources.count(resource) || mdev_resources.count(resource);
    }
};

// Device records the model has examined on this thread (a lookup by ID counts one, a walk over
// devices one per device): tests hold Allocate and GetPreferredAllocation to linear work by it.
size_t examined_on_this_thread();
// Counts `n` more: a walk over the snapshot's records outside this file.
void count_examined(size_t n);

// Healthy = the group's State is bound, its /dev/vfio/<N> exists (asked of vfio_exists), and
// vfiod's Health is not failed, neither the group's (the worst of its functions) nor the
// function's (DESIGN §13: degraded and unknown stay healthy). An mdev is listed when
// mdev_served() and its UUID is canonical (the only ID form Allocate takes), and healthy unless
// its Health (its parent's) is failed.
Snapshot make_snapshot(const client::DaemonView& view,
                       const std::function<bool(unsigned group)>& vfio_exists);

// The rule both plugins serve a mediated device by (DESIGN §12): its State is ready, it has an
// IOMMU group, and that group's /dev/vfio/<N> exists (asked of vfio_exists). Any other mdev
// (pending, refused in-use-mdev, failed, foreign, or its node gone) is withdrawn, never listed.
bool mdev_served(const client::DaemonMdev& m,
                 const std::function<bool(unsigned group)>& vfio_exists);

struct DeviceNode {
    std::string path;  // host path = container path
    bool operator==(const DeviceNode&) const = default;
};

// The nodes a container needs for `groups`, in this order: /dev/vfio/vfio, /dev/vfio/<N> of each
// group, then /dev/iommu and /dev/vfio/devices/vfio<M> of each of the groups' functions when the
// kernel has them (`host` says: dev/iommu, and each sys/bus/pci/devices/<BDF>/vfio-dev/vfio<M>
// whose node exists). Host paths whatever the root. Allocate's answer and the DRA plugin's CDI
// spec both come from here, so the two can never hand out different nodes.
std::vector<DeviceNode> group_device_nodes(const Snapshot& snap,
                                           const std::vector<unsigned>& groups,
                                           const HostFs& host);
// The same for mdevs: /dev/vfio/vfio, each mdev's /dev/vfio/<N>, then /dev/iommu and the
// /dev/vfio/devices/vfio<M> of each sys/bus/mdev/devices/<uuid>/vfio-dev/vfio<M> whose node
// exists.
std::vector<DeviceNode> mdev_device_nodes(const std::vector<PluginMdev>& mdevs,
                                          const HostFs& host);

}  // namespace vfiod::plugin
