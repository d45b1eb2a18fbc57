// The daemon's configuration as values (DESIGN §3). Loading and validation live in
// io/config_loader; this header has no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

// The highest `count` of an [[mdev]] entry (DESIGN §12): vfiod recognises its own mdevs by the
// UUIDs of indices below it, so a count above it would make mdevs vfiod could not tell from
// foreign ones.
inline constexpr unsigned kMaxMdevCount = 4096;

// One [[mdev]] entry (DESIGN §12): `count` mediated devices of `type` on each parent it names.
// The parent is named by exactly one of `parent` (a PCI address, or a virtual parent's name under
// sys/class/mdev_bus) and `selector` (the vendor:device of PCI parents).
struct MdevEntry {
    std::string parent;                 // as written; "" when a selector names the parents
    std::optional<PciAddress> address;  // `parent` parsed, when it is a PCI address
    std::optional<Selector> selector;
    std::string type;                   // a directory of the parent's mdev_supported_types
    unsigned count = 0;                 // 0..kMaxMdevCount
    std::string resource_name;          // as given, or the default "vfiod.io/<type>"
    Origin origin;

    // Whether the PCI function is a parent this entry names (a virtual parent is no function).
    bool matches(const PciAddress& a, uint16_t vendor, uint16_t device) const {
        return address ? *address == a : selector && selector->matches(vendor, device);
    }
};

// Why `type` cannot be an [[mdev]] type, or "": it is a directory name under the parent's
// mdev_supported_types and a part of vfiod's UUID text "<parent>/<type>/<i>", so it is printable
// ASCII without '/', spaces or "..", 1..255 bytes.
std::string mdev_type_problem(std::string_view type);
// Why `name` cannot be a virtual mdev parent's name (under sys/class/mdev_bus), or "": letters,
// digits, '.', '_', '+' and '-', 1..255 bytes, not "." and no "..". A name with ':' is read as a
// PCI address instead (PciAddress::parse says what is wrong with it).
std::string mdev_parent_problem(std::string_view name);

struct Config {
    Mode mode = Mode::Enforce;
    unsigned write_timeout = 10;  // seconds
    CompanionPolicy companions = CompanionPolicy::Bind;
    bool allow_boot_vga = false;
    std::vector<DeviceEntry> devices;   // in precedence order: first match wins
    std::vector<ProtectEntry> protects;
    std::vector<SriovEntry> sriovs;     // in precedence order: first match wins
    std::vector<MdevEntry> mdevs;       // in config order: the order pairs are planned in
    std::vector<std::string> files;     // the files this config was read from, in order

    bool operator==(const Config&) const;
};

const char* to_string(Mode m);
const char* to_string(CompanionPolicy c);

}  // namespace vfiod
