// Reads the host's PCI functions and IOMMU groups from sysfs under a root into a Topology.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// Reads every PCI function and IOMMU group under fs.root(). Odd content (a vendor file that is
// not hex, a link that points nowhere) skips that function with a warning naming the device and
// file; a device that vanishes mid-scan is skipped silently. Never throws.
Topology read_topology(const HostFs& fs, std::vector<std::string>* warnings);

// Reads one function (read_topology's unit of work); nullopt if it is gone or unreadable.
std::optional<PciFunction> read_function(const HostFs& fs, const PciAddress& addr,
                                         std::vector<std::string>* warnings);

// The members of one IOMMU group, as the group itself lists them, sorted; names that are not
// PCI addresses are skipped and said in *warnings.
std::vector<PciAddress> read_group_members(const HostFs& fs, unsigned group,
                                           std::vector<std::string>* warnings);

// Brings `topo` up to date after udev named `touched`, reading only what can have changed with
// them: each touched function, the PF of a touched VF (its sriov_numvfs), every member of the
// IOMMU groups those belong or belonged to (and of groups a member moved to), the driver list and
// whether the IOMMU is on. Afterwards `topo` equals what read_topology would return, given that
// the kernel reports every function whose state changed (it does: bind, unbind, add, remove and
// group changes are uevents of the function). The cost depends on the groups touched, not on the
// size of the host. Returns every group whose members were re-read or that vanished.
std::set<unsigned> refresh_topology(const HostFs& fs, Topology* topo,
                                    const std::set<PciAddress>& touched,
                                    std::vector<std::string>* warnings);

}  // namespace vfiod
