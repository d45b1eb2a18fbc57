// Small string helpers shared by the engine, the daemon and vfioctl.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vfiod {

// s made safe to put in a log line or an error message: control characters, '"' and '\' are
// escaped ("\x1b", "\""), and it is cut to `max` bytes ("..." marks the cut). Untrusted text —
// config keys, sysfs content, D-Bus arguments — must never forge a line of its own.
std::string printable(std::string_view s, size_t max = 64);

std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ");

// The non-empty '/'-separated components of a path ("a//b/" -> {"a", "b"}).
std::vector<std::string_view> path_components(std::string_view path);

}  // namespace vfiod
