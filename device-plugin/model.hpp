// What vfiod-device-plugin tells the kubelet, as pure functions of vfiod's inventory (DESIGN §9):
// resources and their devices with health and NUMA node, socket and environment names, the
// Allocate answer and the preferred allocation. No gRPC and no D-Bus here, so the rules are unit
// tested on their own.
#pragma once

#include <functional>
#include <map>
#include <optional>
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
    bool operator==(const PluginDevice&) const = default;
};

// A device ID from the kubelet, parsed once where gRPC hands it over (server.cpp). The IDs this
// plugin lists are canonical PCI addresses; any other text names no device of ours, and is kept
// only for the error that names it.
struct DeviceId {
    std::optional<PciAddress> address;  // none: not an ID this plugin lists
    std::string unknown;                // the text as received, when address is none

    static DeviceId parse(const std::string& text);
    // The ID as the kubelet sent it (not yet made printable).
    std::string str() const { return address ? address->str() : unknown; }
};
// One container's IDs, as the kubelet listed them.
using DeviceIds = std::vector<DeviceId>;

// Each of `texts` (strings: a request's repeated field, say) parsed, in order.
template <typename Texts>
DeviceIds parse_device_ids(const Texts& texts) {
    DeviceIds out;
    out.reserve(static_cast<size_t>(texts.size()));
    for (const auto& t : texts)
        out.push_back(DeviceId::parse(t));
    return out;
}

// Snapshot::ids' key: an address packed into one word.
struct PciAddressHash {
    size_t operator()(const PciAddress& a) const noexcept;
};

struct Snapshot {
    // Resource name → its functions, by address.
    std::map<std::string, std::vector<PluginDevice>> resources;
    // Every non-bridge function of each published group (companions included): Allocate hands
    // out whole groups and checks all of their functions.
    std::map<unsigned, std::vector<PciAddress>> group_functions;
    // Resource names not served, and why: two names that would share a socket or an environment
    // variable (check-config refuses them; a vfiod that publishes them anyway gets neither served).
    std::map<std::string, std::string> refused;
    // Device ID -> its resource and its position there, filled by make_snapshot(): a lookup by
    // ID is one probe, so Allocate's work grows with the request, not with request x inventory.
    std::unordered_map<PciAddress, std::pair<std::string, size_t>, PciAddressHash> ids;

    // The device `id` names in `resource`; nullptr when it names none there.
    const PluginDevice* find(const std::string& resource, const PciAddress& id) const;
    // The same in any resource.
    const PluginDevice* find(const PciAddress& id) const;
};

// Device records the model has examined on this thread (a lookup by ID counts one, a walk over
// devices one per device): tests hold Allocate and GetPreferredAllocation to linear work by it.
size_t examined_on_this_thread();

// Healthy = the group's State is bound and its /dev/vfio/<N> exists (asked of vfio_exists).
Snapshot make_snapshot(const client::DaemonView& view,
                       const std::function<bool(unsigned group)>& vfio_exists);

struct DeviceNode {
    std::string path;  // host path = container path
    bool operator==(const DeviceNode&) const = default;
};

struct ContainerAllocation {
    std::vector<DeviceNode> devices;  // permissions "mrw" each
    std::map<std::string, std::string> envs;
};

// The nodes a container needs for `groups`, in this order: /dev/vfio/vfio, /dev/vfio/<N> of each
// group, then /dev/iommu and /dev/vfio/devices/vfio<M> of each of the groups' functions when the
// kernel has them (`host` says: dev/iommu, and each sys/bus/pci/devices/<BDF>/vfio-dev/vfio<M>
// whose node exists). Host paths whatever the root. Allocate's answer and the DRA plugin's CDI
// spec both come from here, so the two can never hand out different nodes.
std::vector<DeviceNode> group_device_nodes(const Snapshot& snap,
                                           const std::vector<unsigned>& groups,
                                           const HostFs& host);

struct AllocateError {
    enum class Code { InvalidArgument, FailedPrecondition, Unavailable };
    Code code = Code::InvalidArgument;
    std::string message;
};

// Who holds what, from the kubelet's PodResources List: device ID → "namespace/pod/container".
using Holders = std::map<std::string, std::string>;

// The functions of the requested IDs' groups that the request leaves out: if any of them is
// held by a container, the request would split a group. Empty: no need to ask the kubelet.
std::vector<PciAddress> group_mates_outside(const Snapshot& snap,
                                            const std::vector<DeviceIds>& requests);

// One answer per container request, or the first error (naming the ID and, for a split group,
// the holder). `holders` may be empty when group_mates_outside() was empty. `host` says which
// iommufd nodes exist (dev/iommu, and dev/vfio/devices/vfio<M> for each
// sys/bus/pci/devices/<BDF>/vfio-dev/vfio<M>); the answer names
// host paths ("/dev/vfio/13") whatever the root.
bool allocate(const Snapshot& snap, const std::string& resource,
              const std::vector<DeviceIds>& requests, const Holders& holders,
              const HostFs& host, std::vector<ContainerAllocation>* out, AllocateError* err);

// A preferred set of `size` IDs from `available` that contains `must_include`: whole groups
// first (the groups of must_include, then groups that fit whole), on as few NUMA nodes as
// possible, then single functions if nothing whole fits. Deterministic for equal inputs.
std::vector<PciAddress> preferred_allocation(const Snapshot& snap, const std::string& resource,
                                             const DeviceIds& available,
                                             const DeviceIds& must_include, int size);

}  // namespace vfiod::plugin
