// How the service's log lines and answers name functions and groups; shared by the policy
// (Decider) and the status log (StatusStore).
#pragma once

#include <string>
#include <vector>

#include "core/plan.hpp"

namespace vfiod {

// "0000:01:00.0, 0000:01:00.1".
std::string addresses(const std::vector<PciAddress>& list);

// "0000:01:00.0 e1000e→vfio-pci, 0000:01:00.1 snd_hda_intel→vfio-pci": what a log reader needs
// to know which functions moved where. `moves` false names only the current drivers.
std::string describe_devices(const GroupPlan& gp, bool moves = true);

}  // namespace vfiod
