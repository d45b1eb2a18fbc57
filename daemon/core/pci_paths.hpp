// Where the kernel keeps PCI state, relative to the root (DESIGN §2, §4): the one place these
// paths and the driver_override conventions are spelled. The planner emits them in its writes;
// the topology reader, the executor and vfioctl read through them.
#pragma once

#include <string>
#include <string_view>

#include "pci_address.hpp"

namespace vfiod::pci_paths {

inline constexpr const char* kDevices = "sys/bus/pci/devices";
inline constexpr const char* kDrivers = "sys/bus/pci/drivers";
inline constexpr const char* kDriversProbe = "sys/bus/pci/drivers_probe";
inline constexpr const char* kIommuGroups = "sys/kernel/iommu_groups";

// sys/bus/pci/devices/<BDF>, and with `leaf` that path + "/" + leaf.
std::string device(const PciAddress& a);
std::string device(const PciAddress& a, std::string_view leaf);
// sys/bus/pci/drivers/<name>: present while the driver is loaded.
std::string driver(std::string_view name);

// A function's driver_override attribute: its leaf under device(a), and the whole path.
inline constexpr const char* kOverride = "driver_override";
std::string override_file(const PciAddress& a);
// The link to the function's driver (absent when none), and that driver's unbind file.
std::string driver_link(const PciAddress& a);
std::string unbind_file(const PciAddress& a);

// An SR-IOV PF's attributes (DESIGN §11): the leaves under device(a), and the files vfiod
// writes. sriov_totalvfs is present only on a PF.
inline constexpr const char* kSriovTotalVfs = "sriov_totalvfs";
inline constexpr const char* kSriovNumVfs = "sriov_numvfs";
inline constexpr const char* kSriovAutoprobe = "sriov_drivers_autoprobe";
std::string sriov_numvfs_file(const PciAddress& a);
std::string sriov_autoprobe_file(const PciAddress& a);

// The VFIO device nodes, relative to the root like the rest ("dev/vfio/12"); a consumer that
// hands a node to a container or names it on D-Bus prefixes "/" (host_path), whatever the root.
inline constexpr const char* kVfioDir = "dev/vfio";
inline constexpr const char* kVfioContainer = "dev/vfio/vfio";
inline constexpr const char* kVfioCdevs = "dev/vfio/devices";  // iommufd: vfio<M>
std::string vfio_group(unsigned group);
std::string vfio_cdev(std::string_view name);
std::string host_path(std::string_view relative);

// driver_override as the kernel shows it ("(null)" when unset) to what vfiod means ("").
std::string override_value(std::string_view shown);
// What to write to driver_override to leave it as `wanted`: the kernel clears it on a lone "\n".
std::string override_write(std::string_view wanted);

}  // namespace vfiod::pci_paths
