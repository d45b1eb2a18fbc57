// vfioctl's side of the daemon's D-Bus API (DESIGN §6): the inventory as plan-shaped values, and
// Bind/Release calls with their errors mapped to vfioctl's exit codes.
#pragma once

#include <string>
#include <vector>

#include "core/plan.hpp"

namespace vfiod::cli {

struct DaemonGroup {
    GroupPlan plan;     // group, reason, blockers and devices as the daemon publishes them
    std::string state;  // the D-Bus State: bound, pending, refused, failed, released
};

struct DaemonView {
    std::string version;
    std::string mode;
    bool iommu = false;
    std::vector<DaemonGroup> groups;  // by group number
};

struct ClientResult {
    int exit_code = 0;    // a cli::ExitCode
    std::string message;  // why it failed, ready for the operator
};

// Reads the daemon's whole object tree in one GetManagedObjects call.
ClientResult fetch_view(DaemonView* view);

// Whether org.vfiod1 has an owner on the system bus (false when the bus cannot be reached).
bool daemon_running();

// Calls org.vfiod1.Manager.<method>(address): "Bind" or "Release".
ClientResult call_group_method(const std::string& method, const std::string& address);

}  // namespace vfiod::cli
