// The daemon's configuration as values (DESIGN §3). Loading and validation live in
// io/config_loader; this header has no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pci_address.hpp"

namespace vfiod {

enum class Mode { Enforce, Observe };
enum class CompanionPolicy { Bind, Refuse };

// "vendor:device" in hex; device absent means "any device of this vendor" ("10de:*").
struct Selector {
    uint16_t vendor = 0;
    std::optional<uint16_t> device;

    bool matches(uint16_t v, uint16_t d) const { return v == vendor && (!device || *device == d); }
    std::string str() const;
    static std::optional<Selector> parse(std::string_view text, std::string* err = nullptr);
    bool operator==(const Selector&) const = default;
};

// Where an entry came from, for messages: "/etc/vfiod/vfiod.toml:12:1".
struct Origin {
    std::string file;
    unsigned line = 0;
    unsigned column = 0;
    std::string str() const;
};

struct DeviceEntry {
    std::optional<Selector> selector;    // at least one of selector/address is set
    std::optional<PciAddress> address;
    std::string resource_name;           // empty when not given
    std::string driver = "vfio-pci";     // vfio-pci or a vfio variant driver
    bool early = false;
    Origin origin;

    bool matches(const PciAddress& a, uint16_t vendor, uint16_t device) const {
        return (!selector || selector->matches(vendor, device)) && (!address || *address == a);
    }
};

struct ProtectEntry {
    std::optional<Selector> selector;
    std::optional<PciAddress> address;
    Origin origin;

    bool matches(const PciAddress& a, uint16_t vendor, uint16_t device) const {
        return (!selector || selector->matches(vendor, device)) && (!address || *address == a);
    }
};

// One [[sriov]] entry (DESIGN §11): the SR-IOV PFs it matches should have num_vfs VFs, and are
// never bound themselves. Which VFs are then bound is the [[device]] entries' business.
struct SriovEntry {
    std::optional<Selector> selector;    // at least one of selector/address is set
    std::optional<PciAddress> address;
    uint16_t num_vfs = 0;                // the kernel's sriov_numvfs takes a u16
    Origin origin;

    bool matches(const PciAddress& a, uint16_t vendor, uint16_t device) const {
        return (!selector || selector->matches(vendor, device)) && (!address || *address == a);
    }
};

struct Config {
    Mode mode = Mode::Enforce;
    unsigned write_timeout = 10;  // seconds
    CompanionPolicy companions = CompanionPolicy::Bind;
    bool allow_boot_vga = false;
    std::vector<DeviceEntry> devices;   // in precedence order: first match wins
    std::vector<ProtectEntry> protects;
    std::vector<SriovEntry> sriovs;     // in precedence order: first match wins
    std::vector<std::string> files;     // the files this config was read from, in order

    bool operator==(const Config&) const;
};

const char* to_string(Mode m);
const char* to_string(CompanionPolicy c);

}  // namespace vfiod
