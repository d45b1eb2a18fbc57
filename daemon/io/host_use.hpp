// Finds what the host itself uses (mounted or held disks, routed or addressed netdevs) and
// attributes each finding to the nearest PCI function that owns the device (DESIGN §2/§4).
#pragma once

#include <string>
#include <vector>

#include "core/topology.hpp"
#include "io/sysfs.hpp"

namespace vfiod {

// What the host uses, per PCI function. The planner looks up the functions of the groups it
// decides. Missing proc files mean "no use found from that source", never an error.
HostUse read_host_use(const Sysfs& fs, const Topology& topo, std::vector<std::string>* warnings);

}  // namespace vfiod
