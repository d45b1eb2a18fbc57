// The Group objects: one per published IOMMU group at /org/vfiod1/group/ID, org.vfiod1.Group
// with the properties of GroupInfo. They live in an ExportedSet (sd_bus_objects.hpp), which
// owns the published records; this file owns only what a group object is: its path, both ways,
// and its properties.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "service/inventory.hpp"

namespace vfiod {

template <typename Key, typename Info>
struct ObjectKind;

// A group's path (DESIGN §6), and the group a path's last element names. The parse takes any
// spelling from_chars does ("07"); the objects answer only the path group_object_path spells.
std::string group_object_path(unsigned id);
std::optional<unsigned> group_of_path_element(std::string_view element);

// Interface, path prefix, the two functions above and the properties, for an ExportedSet.
const ObjectKind<unsigned, GroupInfo>& group_objects();

}  // namespace vfiod
