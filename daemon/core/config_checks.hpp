// The checks of a merged Config across its entries and files, after each file's own schema check
// (io/config_schema): colliding resource names (an error) and overlapping [[device]] entries (a
// warning). Pure: they read the Config and append "FILE:LINE:COLUMN: message" lines.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"

namespace vfiod {

// A user's text in a config message: in double quotes, unprintable bytes escaped.
std::string config_quote(std::string_view s);

// Overlaps among [[device]] entries matter because the first one's resource_name and driver
// win; among [[sriov]] entries, because the first one's num_vfs does. A [[protect]] entry always
// wins over the others, so that overlap is not news.
//
// Two entries can match one function unless their addresses differ or their selectors do (another
// vendor, or two different devices). Comparing every pair is quadratic: 4,000 copies of one
// entry took 25 s and 1.6 GB. Instead every entry is filed under the few keys a later entry can
// look it up by — its address or "no address" or "any address", crossed with its selector, its
// vendor or "any selector" — and each later entry asks only the keys that can overlap it. Those
// keys partition the earlier entries that can overlap, so their counts add up.
void warn_overlaps(const Config& c, std::vector<std::string>& warnings);

// Two different resource names that the device plugin would serve on one socket, or hand to a VM
// in one environment variable (DESIGN §9): the kubelet would list one resource's devices under
// the other's name. An error, naming both entries; one map lookup per entry, whatever their number.
// [[mdev]] resource names take part too: they share the sockets, have their own variables
// (MDEV_PCI_RESOURCE_), and one name is never both a [[device]] and an [[mdev]] resource.
void check_resource_names(const Config& c, std::vector<std::string>& errors);

// The [[mdev]] conflicts a config shows by itself (DESIGN §12), as errors: two entries for one
// (parents, type) — the same parent, the same selector, or a vendor's wildcard and one of its
// devices —, and a [[device]] entry that can only match parents an [[mdev]] entry names (its
// address is one, or its selector is within one's). Conflicts only a host can show (an address
// entry and a selector entry that meet on one GPU) are the planner's: the first entry wins,
// with a warning; a PCI parent that a [[device]] entry allowlists is refused mdev-parent.
// Map lookups, linear in the entries.
void check_mdev_entries(const Config& c, std::vector<std::string>& errors);

}  // namespace vfiod
