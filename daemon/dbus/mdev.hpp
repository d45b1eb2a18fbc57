// The MediatedDevice objects: one per published mdev (DESIGN §12: each one an [[mdev]] entry
// wants, present or not, and each foreign one) at /org/vfiod1/mdev/<uuid, - as _>,
// org.vfiod1.MediatedDevice with the properties of MdevInfo. They live in an ExportedSet
// (sd_bus_objects.hpp); this file owns only what an mdev object is: its path, both ways, and its
// properties.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "service/inventory.hpp"

namespace vfiod {

template <typename Key, typename Info>
struct ObjectKind;

// An mdev's path: its UUID with '-' as '_' (an object path element allows no '-').
std::string mdev_object_path(const std::string& uuid);
// The UUID a path element names: nullopt unless it spells a canonical lower-case UUID.
std::optional<std::string> mdev_of_path_element(std::string_view element);

// Interface, path prefix, the path both ways and the properties, for an ExportedSet.
const ObjectKind<std::string, MdevInfo>& mdev_objects();

}  // namespace vfiod
