// Mediated devices (DESIGN §12) as plain values: the parents, types and mdevs sysfs shows
// (filled by io/mdev_reader, built by hand in unit tests), and vfiod's own stable UUIDs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pci_address.hpp"

namespace vfiod {

// One directory of a parent's mdev_supported_types.
struct MdevType {
    std::string name;                   // its `name` file; "" when it has none or it is unusable
    std::optional<unsigned> available;  // available_instances; nullopt when unreadable

    bool operator==(const MdevType&) const = default;
};

// A parent: an entry of sys/class/mdev_bus.
struct MdevParent {
    std::string devpath;                  // the device's canonical dir, relative to the root
    std::optional<PciAddress> address;    // a PCI parent's address (its name is the address)
    std::map<std::string, MdevType> types;  // by directory name ("mbochs-small")

    bool operator==(const MdevParent&) const = default;
};

// An mdev: an entry of sys/bus/mdev/devices.
struct Mdev {
    std::string parent;                 // its parent's name under sys/class/mdev_bus
    std::string type;                   // from its mdev_type link; "" before the probe made it
    std::optional<unsigned> iommu_group;
    std::string driver;                 // "" while unbound

    bool operator==(const Mdev&) const = default;
};

struct MdevHost {
    std::map<std::string, MdevParent> parents;  // by name under sys/class/mdev_bus
    std::map<std::string, Mdev> mdevs;          // by UUID, canonical lower case

    bool operator==(const MdevHost&) const = default;
};

// Where the kernel keeps mdev state, relative to the root: the one place these paths are spelled.
namespace mdev_paths {
inline constexpr const char* kParents = "sys/class/mdev_bus";    // <parent> -> its device dir
inline constexpr const char* kDevices = "sys/bus/mdev/devices";  // <uuid> -> its device dir
inline constexpr const char* kTypes = "mdev_supported_types";    // under a parent's dir
// sys/class/mdev_bus/<parent>/mdev_supported_types/<type>: the type's files.
std::string type_dir(std::string_view parent, std::string_view type);
// <type_dir>/create: a UUID written makes an mdev.
std::string create_file(std::string_view parent, std::string_view type);
// sys/bus/mdev/devices/<uuid>/remove: "1" written removes it.
std::string remove_file(std::string_view uuid);
}  // namespace mdev_paths

// The namespace of vfiod's mdev UUIDs: the version-5 UUID of the DNS name "vfiod.io".
inline constexpr std::string_view kMdevUuidNamespace = "1b43b7e8-c006-5684-afc9-e3ea22dae29c";

// The UUID of the i-th mdev (from 0) of `type` on `parent` (DESIGN §12): name-based, version 5
// (SHA-1), of the text "<parent>/<type>/<index>" in kMdevUuidNamespace; canonical lower case.
std::string mdev_uuid(std::string_view parent, std::string_view type, unsigned index);

// Whether s is a UUID as the kernel names an mdev ("%pUl"): 36 characters, lower-case hex
// digits with '-' at 8, 13, 18 and 23.
bool is_canonical_uuid(std::string_view s);

// Which index below kMaxMdevCount (config.hpp) a UUID is vfiod's own for, per (parent, type):
// the 4096 UUIDs of a pair are made once, on its first question, and kept (16 bytes and an
// index each, 72 KiB a pair) for at most kMaxPairs pairs, the least recently asked going first,
// so telling an mdev vfiod's or foreign costs a lookup after that. Any thread.
class OwnMdevUuids {
public:
    // The process's table: the planner's passes and the journal's settling share it, so a pass
    // makes no UUID of a pair an earlier one met (they depend on the pair alone).
    static OwnMdevUuids& shared();

    // A pair is a parent's type; a host has few of both, and a parent's types are asked about
    // all at once only while one of its mdevs is being probed (DESIGN §12).
    static constexpr size_t kMaxPairs = 64;

    std::optional<unsigned> index_of(const std::string& parent, const std::string& type,
                                     const std::string& uuid);
    // The pairs whose UUIDs were made so far, and those kept now: for tests.
    size_t pairs_made() const;
    size_t pairs_kept() const;

private:
    struct Own {
        std::array<unsigned char, 16> uuid;
        uint16_t index;
    };
    struct Pair {
        std::vector<Own> own;  // by uuid
        uint64_t asked = 0;    // when last asked, for eviction
    };
    mutable std::mutex mu_;
    std::map<std::pair<std::string, std::string>, Pair> pairs_;
    uint64_t clock_ = 0;
    size_t made_ = 0;
};

}  // namespace vfiod
