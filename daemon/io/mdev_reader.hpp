// Reads the host's mediated devices (DESIGN §12) through the host access layer: the parents of
// sys/class/mdev_bus with their mdev_supported_types, and the mdevs of sys/bus/mdev/devices.
// Every read is HostFs::read's (regular files only, non-blocking, bounded), so a FIFO or a huge
// file in an attribute's place costs a warning, never a wait.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/mdev.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// The longest type `name` kept; a longer one is dropped with a warning (the type's directory
// name stands in for it).
inline constexpr size_t kMaxMdevTypeName = 256;

// The whole mdev side of the host. Odd content is skipped with one warning line each: an entry
// of sys/bus/mdev/devices that is not a canonical lower-case UUID (left alone, never written),
// an mdev whose parent is not under sys/class/mdev_bus, an unreadable available_instances.
MdevHost read_mdev_host(const HostFs& fs, std::vector<std::string>* warnings);

// One parent as read_mdev_host reads it, for a caller that follows one parent's events; nullopt
// when sys/class/mdev_bus/<name> leads nowhere.
std::optional<MdevParent> read_mdev_parent(const HostFs& fs, const std::string& name,
                                           std::vector<std::string>* warnings);

// One type's available_instances as read_mdev_parent reads it, and nothing else of the parent:
// what a writer checks right before it creates. nullopt (and a warning) when it cannot be read
// or is not a number.
std::optional<unsigned> read_mdev_available(const HostFs& fs, const std::string& parent,
                                            const std::string& type,
                                            std::vector<std::string>* warnings);

// The named parents as read_mdev_parent reads them, with their mdevs (the children of each
// parent's device that the mdev bus lists): what a trigger naming a few parents costs, however
// many mdevs other parents hold. A name that leads nowhere is left out (its pairs: no-parent).
MdevHost read_mdev_parents(const HostFs& fs, const std::set<std::string>& names,
                           std::vector<std::string>* warnings);

}  // namespace vfiod
