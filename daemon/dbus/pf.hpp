// The PhysicalFunction objects: one per published SR-IOV PF (an [[sriov]] entry names it) at
// /org/vfiod1/pf/DDDD_BB_SS_F, org.vfiod1.PhysicalFunction with the properties of PfInfo
// (DESIGN §11). They live in an ExportedSet (sd_bus_objects.hpp), which owns the published
// records; this file owns only what a PF object is: its path, both ways, and its properties.
#pragma once

#include <string>

#include "core/pci_address.hpp"
#include "service/inventory.hpp"

namespace vfiod {

template <typename Key, typename Info>
struct ObjectKind;

// A PF's path: the address spelled as a device's (device.hpp), under its own prefix. The parse
// is device_of_path_element's.
std::string pf_object_path(const PciAddress& a);

// Interface, path prefix, the path both ways and the properties, for an ExportedSet.
const ObjectKind<PciAddress, PfInfo>& pf_objects();

}  // namespace vfiod
