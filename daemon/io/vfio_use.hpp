// Finds IOMMU groups and functions a user (a VM) holds open, so Release can refuse with
// in-use-vfio instead of silently breaking the holder (DESIGN §4).
#pragma once

#include "core/mdev.hpp"
#include "core/topology.hpp"
#include "io/proc_fds.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// Whether group's /dev/vfio/<N> exists on the host. The live daemon runs with a private /dev
// (PrivateDevices=yes) that has no vfio nodes: the host's are read through PID 1's root
// (proc/1/root/dev/vfio/<N>); a test or captured tree, where magic links are refused, has them
// at dev/vfio/<N>.
bool vfio_node_exists(const HostFs& fs, unsigned group);

// Fills use->vfio, one line per finding, for every function of a group whose /dev/vfio/<N> is
// open, every function whose iommufd node dev/vfio/devices/vfio<M> is open, and every function
// on a vfio driver whose `enable` count is above 0.
//
// Why a /proc scan and not a probe open() of the node: the legacy group node admits one opener,
// so a probe that wins the race against a VM that is starting makes that VM fail, and it still
// answers nothing about the iommufd cdev or a device fd whose group fd was closed. Reading
// proc/*/fd links changes nothing on the host; it needs CAP_SYS_PTRACE for other users'
// processes (the unit grants it), and its own race (a VM opening right after the scan) is
// narrowed by the `enable` count, which vfio-pci raises while any user has the device open.
void read_vfio_use(const HostFs& fs, const Topology& topo, const std::vector<OpenNode>& open,
                   HostUse* use);
// Fills use->mdevs the same way for the host's mdevs: one line per holder of an mdev's
// /dev/vfio/<N> or its iommufd node, keyed by its UUID (DESIGN §12: none is removed while open).
void read_mdev_use(const HostFs& fs, const MdevHost& host, const std::vector<OpenNode>& open,
                   HostUse* use);
// The same after its own scan of proc/*/fd.
void read_vfio_use(const HostFs& fs, const Topology& topo, HostUse* use);

}  // namespace vfiod
