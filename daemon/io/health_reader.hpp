// What one health check reads of a PCI function (DESIGN §13), through HostFs: its AER totals,
// its config space read live, and after a release whether a driver has it. Run on a worker:
// a config read sleeps while a reset blocks config access.
#pragma once

#include <string>

#include "core/health.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// `original`: after a release, the driver the function was to go back to ("" when none is
// known); null for any other check. A loaded original driver that does not have the function
// after the release (its probe failed, the release was rolled back) is a quarantine.
HealthReading read_health(const HostFs& fs, const PciAddress& a, const std::string* original);

}  // namespace vfiod
