// A device's health as vfiod publishes it on D-Bus (DESIGN §13), apart from the client so that
// what only decides on it (vfioctl doctor's diagnosis) needs no bus.
#pragma once

#include <string>

namespace vfiod::client {

// A function's health as vfiod publishes it (DESIGN §13): `state` is "ok", "unknown",
// "degraded" or "failed" (a newer daemon's word as it came), "" from a vfiod that publishes no
// Health (nothing known, never failed); `reason` is "" when ok, else "<code>: <text>".
struct Health {
    std::string state;
    std::string reason;
    bool operator==(const Health&) const = default;
};
inline bool health_failed(const std::string& state) { return state == "failed"; }
// Degraded or failed: what an operator should look at (unknown only says it is not watched).
inline bool health_troubled(const std::string& state) {
    return health_failed(state) || state == "degraded";
}

}  // namespace vfiod::client
