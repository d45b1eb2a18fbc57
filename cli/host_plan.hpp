// The common start of vfioctl's offline verbs (plan, apply, doctor, status --offline): the
// configuration checked, the host read and planned, with every warning and error on stderr.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "core/plan.hpp"
#include "io/snapshot.hpp"

namespace vfiod::cli {

// Each line as "vfioctl: <prefix><line>" on stderr.
void print_lines(const std::vector<std::string>& lines, const char* prefix);

// The configuration of --root/--config. Invalid: its errors are printed with `consequence`
// ("no plan was made") and nullopt is returned; the verb then exits kExitUsage.
std::optional<Config> checked_config(const Args& args, const char* consequence);

struct HostPlan {
    Snapshot snapshot;
    Plan plan;
};
// Reads the host under fs and plans it with config; odd sysfs content and overlapping entries
// are warned about on stderr.
HostPlan plan_host(const HostFs& fs, const Config& config);

// One line on what the host-use check covered: the O_EXCL probe never runs from plan, doctor or
// status, and a tree cannot show addresses, other network namespaces or live claims.
const char* host_use_scope(const HostFs& fs);

}  // namespace vfiod::cli
