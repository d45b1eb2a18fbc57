// The udev rule's helper (`vfiod --udev-match BDF`, run by IMPORT{program}): tells the rule
// whether a newly added function is allowlisted and whether to set its driver_override early.
#pragma once

#include <string>

#include "core/config.hpp"
#include "core/pci_address.hpp"

namespace vfiod {

class HostFs;

// The udev properties for one function, as "KEY=value\n" lines: VFIOD_ALLOWLISTED=1 for an
// allowlisted, unprotected function, plus VFIOD_EARLY_DRIVER=<driver> when its entry says
// early = true. Empty when neither applies (or the function cannot be read).
std::string udev_match(const HostFs& fs, const Config& config, const PciAddress& address);

// The whole helper: loads the config under root, prints udev_match(). Always exits 0, so a bad
// config never fails device processing (the daemon reports the config error).
int run_udev_match(const std::string& root, const std::string& address);

}  // namespace vfiod
