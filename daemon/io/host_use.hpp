// Finds what the host itself uses (mounted or held disks, routed or addressed netdevs) and
// attributes each finding to the nearest PCI function that owns the device (DESIGN §2/§4).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

class HostTables;

// The deepest PCI function on a device path ("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/
// nvme/nvme0/nvme0n1" → 0000:01:00.0): the one that owns the disk, netdev or node.
std::optional<PciAddress> nearest_function(std::string_view devpath);

// The PCI functions that own block device `devpath` (resolved, "sys/devices/…"): the nearest
// function, or for an NVMe namespace under native multipath
// (sys/devices/virtual/nvme-subsystem/nvme-subsys<N>/nvme<N>n<M>, away from any PCI device)
// every controller of its subsystem. host_use and claims both attribute disks by it.
std::set<PciAddress> block_owners(const HostFs& fs, std::string_view devpath);

// What the host uses, per PCI function. The planner looks up the functions of the groups it
// decides. Missing proc files mean "no use found from that source", never an error.
HostUse read_host_use(const HostFs& fs, const Topology& topo, std::vector<std::string>* warnings);

// The same findings for the functions in `only` alone (the members of the groups an event
// touched), as read_host_use would report them for those functions. Per-function work (a vfio
// function's enable count, the netns check, a class device's attributes) is done only for `only`,
// so the cost does not grow with the host's PCI functions. The host-wide tables come from
// `tables` (nullptr: read now), which re-reads them only when the kernel says they changed; the
// sys/class/block and sys/dev/char listings are read each time (a disk's holders, a new device
// node come without news); the proc/*/fd walk only when one of these functions owns a device
// node or is on a vfio driver, the only findings it can make.
HostUse read_host_use(const HostFs& fs, const Topology& topo, std::vector<std::string>* warnings,
                      const std::set<PciAddress>& only, HostTables* tables = nullptr);

// Replaces into's findings for the functions in `only` with fresh's.
void merge_host_use(HostUse* into, HostUse fresh, const std::set<PciAddress>& only);

}  // namespace vfiod
