// Reads the host's PCI functions and IOMMU groups from sysfs under a root into a Topology.
#pragma once

#include <optional>
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

}  // namespace vfiod
