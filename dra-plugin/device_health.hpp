// What the DRA plugin tells Kubernetes of a device's health (DESIGN §13), as pure functions of
// vfiod's Health: the kubelet's DRAResourceHealth status and message, and the ResourceSlice
// taint's value. No I/O.
#pragma once

#include <string>

#include "dbus_client.hpp"  // client::Health

namespace vfiod::dra {

// The kubelet's HealthStatus (KEP-4680), numbered as its protos number it.
enum class KubeletHealth { Unknown = 0, Healthy = 1, Unhealthy = 2 };

struct HealthReport {
    KubeletHealth health = KubeletHealth::Unknown;
    std::string message;  // printable, at most kMaxHealthMessage bytes
    bool operator==(const HealthReport&) const = default;
};

// The kubelet cuts a longer message (to 1021 characters and "..."); we cut it first, as
// printable() does, so the kubelet never cuts inside a character.
constexpr size_t kMaxHealthMessage = 1024;

// ok: Healthy; degraded: Healthy with its reason (it works; the errors are for an operator);
// failed: Unhealthy; unknown: Unknown with its reason; nothing published ("", an older vfiod)
// or a state this build does not know: Unknown, saying so.
HealthReport kubelet_health(const client::Health& h);

// The taint a failed device carries in its ResourceSlice: the value of key kTaintKey, the
// reason's code ("aer-fatal"), made a label value (at most 63 characters of [A-Za-z0-9-_.],
// starting and ending with a letter or digit; "failed" when nothing of the code is left).
// "" for a device that is not failed: no taint.
constexpr const char* kTaintKey = "vfiod.io/unhealthy";
std::string taint_value(const client::Health& h);

}  // namespace vfiod::dra
