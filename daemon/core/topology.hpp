// The host's PCI topology and what the host is using, as plain values: what the planner decides
// from. Filled by io/topology_reader and io/host_use; built by hand in unit tests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pci_address.hpp"

namespace vfiod {

// The facts about a function that travel with it past the planner: into the plan, onto D-Bus
// and into the client's decoded inventory (plan.hpp DeviceRecord). Declared once here, so a fact
// every consumer should see (an SR-IOV VF's physfn, say) is one field plus its D-Bus encoder and
// the client's decoder, not one copy per layer.
struct FunctionFacts {
    PciAddress address;
    uint16_t vendor = 0;
    uint16_t device = 0;
    uint32_t class_code = 0;          // 24 bits, e.g. 0x030200
    std::string driver;               // bound driver name; empty when none
    int numa_node = -1;

    bool operator==(const FunctionFacts&) const = default;
};

// A function as sysfs shows it: the facts above, and those only the planner needs.
struct PciFunction : FunctionFacts {
    uint16_t subsystem_vendor = 0;
    uint16_t subsystem_device = 0;
    std::string driver_override;      // empty when unset (sysfs shows "(null)")
    std::optional<unsigned> iommu_group;
    bool boot_vga = false;
    unsigned sriov_numvfs = 0;        // VFs currently enabled on this PF
    std::optional<unsigned> sriov_totalvfs;  // set on an SR-IOV PF only: the VFs it can have
    std::optional<PciAddress> physfn; // set on a VF
    std::string devpath;              // canonical sysfs dir relative to the root, e.g.
                                      // "sys/devices/pci0000:00/0000:00:03.0/0000:01:00.0"

    // PCI-to-PCI and CardBus bridges stay with the host (pcieport or no driver).
    bool is_bridge() const {
        uint32_t base_sub = class_code >> 8;
        return base_sub == 0x0604 || base_sub == 0x0609;
    }

    bool operator==(const PciFunction&) const = default;
};

struct Topology {
    bool iommu_enabled = false;
    std::map<PciAddress, PciFunction> functions;
    std::map<unsigned, std::vector<PciAddress>> groups;  // members sorted by address
    std::set<std::string> drivers;                       // names under sys/bus/pci/drivers

    const PciFunction* find(const PciAddress& a) const {
        auto it = functions.find(a);
        return it == functions.end() ? nullptr : &it->second;
    }

    bool operator==(const Topology&) const = default;
};

// Why the host needs a function, one human-readable line per finding
// ("nvme0n1p2 (259:2) is mounted on /"), keyed by the function that owns the device.
struct HostUse {
    std::map<PciAddress, std::vector<std::string>> storage;
    std::map<PciAddress, std::vector<std::string>> network;
    std::map<PciAddress, std::vector<std::string>> device;  // device nodes held open
    std::map<PciAddress, std::vector<std::string>> vfio;  // open by a user (release only)
    std::map<std::string, std::vector<std::string>> mdevs;  // mdevs open by a user, by UUID

    bool operator==(const HostUse&) const = default;
};

}  // namespace vfiod
