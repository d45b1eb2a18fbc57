// What an initramfs carries for early binding (DESIGN §14): the functions whose driver_override
// its init-top script (or dracut hook) writes before udev starts, each matched by address AND
// vendor:device, and the early entries left out, with why. Pure: the caller reads the host and
// plans it; vfioctl initramfs writes the list and the record, plan and doctor compare them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "pci_address.hpp"
#include "plan.hpp"

namespace vfiod {

// One function the initramfs overrides.
struct EarlyFunction {
    PciAddress address;
    uint16_t vendor = 0;
    uint16_t device = 0;
    std::string driver;  // what driver_override gets: the entry's driver, or vfio-pci
    std::string entry;   // the early entry that brought it in ("/etc/vfiod/vfiod.toml:3:1")

    bool operator==(const EarlyFunction&) const = default;
};

// An early entry, or one function it matches, that the initramfs does not carry.
struct EarlyLeftOut {
    std::optional<PciAddress> address;  // the function, when the entry matched one
    std::string entry;                  // the entry's origin
    std::string why;                    // for humans: "nvme0n1p2 (259:2) is mounted on /"

    bool operator==(const EarlyLeftOut&) const = default;
};

struct EarlySet {
    bool host_checked = false;           // false: an image build, matched by address and ID only
    std::vector<EarlyFunction> carried;  // by address
    std::vector<EarlyLeftOut> left_out;  // in config order
};

// Whether any [[device]] entry asks for early binding.
bool has_early_entries(const Config& config);

// A live host: the groups of `plan` that hold a function an early [[device]] entry governs. A
// group the plan binds (or has bound) is carried whole (every non-bridge function, with its
// target); a refused one is left out with the plan's reason and details, for each early function
// in it. An early entry that matches no function is left out too. Observe mode carries nothing.
EarlySet early_from_plan(const Config& config, const Plan& plan);

// An image build or a chroot, where the running host's devices are not the target's: each early
// entry that names both an address and a vendor:device (no wildcard) is carried as it stands; the
// others are left out (a selector alone would take every device of that ID).
EarlySet early_from_config(const Config& config);

// The list the initramfs reads: a comment line, then "ADDRESS VENDOR DEVICE DRIVER" per
// function ("0000:01:00.0 10de 2204 vfio-pci"), nothing else.
std::string early_list_text(const EarlySet& set, const std::string& kernel);

// A digest of what decides an early set (mode, companions, boot VGA, every [[device]] entry's
// selector, address, driver and early flag, every [[protect]] entry): "fnv1a64:<16 hex>". Two
// configurations with the same digest carry the same functions on the same host.
std::string early_config_digest(const Config& config);

}  // namespace vfiod
