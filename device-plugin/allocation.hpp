// Allocate's answer and GetPreferredAllocation's choice (DESIGN §9, §12), as pure functions of
// the device model (model.hpp): whole IOMMU groups, checked against the request and the
// kubelet's holders, or served mdevs, and the preferred set of IDs. No gRPC here, so the rules
// are unit tested on their own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"
#include "model.hpp"

namespace vfiod::plugin {

struct ContainerAllocation {
    std::vector<DeviceNode> devices;  // permissions "mrw" each
    std::map<std::string, std::string> envs;
};

// A device ID from the kubelet, parsed once where gRPC hands it over (server.cpp). The IDs this
// plugin lists are canonical PCI addresses (functions) and canonical lower-case UUIDs (mdevs);
// any other text names no device of ours, and is kept only for the error that names it.
struct DeviceId {
    std::optional<PciAddress> address;  // a function's ID
    std::string uuid;                   // an mdev's ID; "" when the text is none
    std::string unknown;                // the text as received, when it is neither

    static DeviceId parse(const std::string& text);
    // The ID as the kubelet sent it (not yet made printable).
    std::string str() const { return address ? address->str() : uuid.empty() ? unknown : uuid; }
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
// sys/bus/pci/devices/<BDF>/vfio-dev/vfio<M>); the answer names host paths ("/dev/vfio/13")
// whatever the root. For a resource of mdevs: each mdev's nodes (mdev_device_nodes) and
// MDEV_PCI_RESOURCE_<NAME>; an mdev no longer served is refused, named, with why.
bool allocate(const Snapshot& snap, const std::string& resource,
              const std::vector<DeviceIds>& requests, const Holders& holders,
              const HostFs& host, std::vector<ContainerAllocation>* out, AllocateError* err);

// A preferred set of `size` IDs from `available` that contains `must_include`: whole groups
// first (the groups of must_include, then groups that fit whole), on as few NUMA nodes as
// possible, then single functions if nothing whole fits. Deterministic for equal inputs.
std::vector<PciAddress> preferred_allocation(const Snapshot& snap, const std::string& resource,
                                             const DeviceIds& available,
                                             const DeviceIds& must_include, int size);
// The same for a resource of mdevs, by UUID: must_include first, then mdevs of one NUMA node.
std::vector<std::string> preferred_mdevs(const Snapshot& snap, const std::string& resource,
                                         const DeviceIds& available,
                                         const DeviceIds& must_include, int size);

}  // namespace vfiod::plugin
