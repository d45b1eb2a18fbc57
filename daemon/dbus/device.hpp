// The Device objects: one per published PCI function at /org/vfiod1/device/DDDD_BB_SS_F,
// org.vfiod1.Device with the properties of DeviceInfo. They live in an ExportedSet
// (sd_bus_objects.hpp), which owns the published records; this file owns only what a device
// object is: its path, both ways, and its properties.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/pci_address.hpp"
#include "service/inventory.hpp"

namespace vfiod {

template <typename Key, typename Info>
struct ObjectKind;

// A function's path (DESIGN §6: the address with ':' and '.' as '_', which a path element cannot
// hold), and the function a path's last element names. The parse takes what PciAddress::parse
// does; the objects answer only the path device_object_path spells.
std::string device_object_path(const PciAddress& a);
std::optional<PciAddress> device_of_path_element(std::string_view element);

// Interface, path prefix, the two functions above and the properties, for an ExportedSet.
const ObjectKind<PciAddress, DeviceInfo>& device_objects();

}  // namespace vfiod
