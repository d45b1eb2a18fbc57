// Pure parsers for the procfs and sysfs text vfiod reads: any bytes in, no throws, linear time,
// malformed lines skipped (they are fuzz targets, and a host can show anything).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vfiod {

struct MountInfoEntry {
    unsigned major = 0;
    unsigned minor = 0;
    std::string mount_point;  // octal escapes (\040 …) undone
    std::string source;       // the mount source after " - fstype "
};
// proc/self/mountinfo.
std::vector<MountInfoEntry> parse_mountinfo(std::string_view text);

struct MountEntry {
    std::string source;
    std::string mount_point;
};
// proc/mounts.
std::vector<MountEntry> parse_mounts(std::string_view text);

// proc/swaps: the Filename column (header skipped, escapes undone).
std::vector<std::string> parse_swaps(std::string_view text);

// proc/net/route: interfaces with at least one RTF_UP route.
std::set<std::string> parse_route_ifaces(std::string_view text);

// proc/net/ipv6_route: interfaces with a route whose destination is neither link-local
// (fe80::/10) nor multicast (ff00::/8); "lo" is never reported. A link-local route exists on
// every interface that is merely up, so it says nothing about the host depending on it.
std::set<std::string> parse_ipv6_route_ifaces(std::string_view text);

// The value of the first line that starts with `key`, surrounding blanks removed: uevent files
// ("DEVNAME=" → "snd/controlC0"), udev's database ("E:ID_FS_TYPE=" → "zfs_member"), NVIDIA's
// gpus/<BDF>/information ("Device Minor:" → "0"). nullopt when no line has the key.
std::optional<std::string> line_value(std::string_view text, std::string_view key);

// proc/devices: the major number of the character driver `name` ("195 nvidia-frontend").
std::optional<unsigned> char_major(std::string_view text, std::string_view name);

// A sysfs `dev` attribute or a sys/dev/char entry name: "MAJOR:MINOR", each at most 20 bits.
std::optional<std::pair<unsigned, unsigned>> parse_devnum(std::string_view s);

// HostFs hex attributes ("0x10de"): exactly "0x" then 1..max_digits hex digits (max_digits is
// capped at 8); anything else, including whitespace, is nullopt.
std::optional<uint32_t> parse_hex_attr(std::string_view text, unsigned max_digits);

// HostFs decimal attributes ("-1", "3"): an optional '-' then digits, within long's range.
std::optional<long> parse_int_attr(std::string_view text);

}  // namespace vfiod
