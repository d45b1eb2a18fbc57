#include "core/pci_paths.hpp"

namespace vfiod::pci_paths {

std::string device(const PciAddress& a) { return std::string(kDevices) + "/" + a.str(); }

std::string device(const PciAddress& a, std::string_view leaf) {
    return device(a) + "/" + std::string(leaf);
}

std::string driver(std::string_view name) { return std::string(kDrivers) + "/" + std::string(name); }

std::string override_file(const PciAddress& a) { return device(a, kOverride); }

std::string driver_link(const PciAddress& a) { return device(a, "driver"); }

std::string unbind_file(const PciAddress& a) { return device(a, "driver/unbind"); }

std::string sriov_numvfs_file(const PciAddress& a) { return device(a, kSriovNumVfs); }

std::string sriov_autoprobe_file(const PciAddress& a) { return device(a, kSriovAutoprobe); }

std::string override_value(std::string_view shown) {
    return shown == "(null)" ? std::string() : std::string(shown);
}

std::string override_write(std::string_view wanted) {
    return wanted.empty() ? std::string("\n") : std::string(wanted);
}

std::string vfio_group(unsigned group) { return std::string(kVfioDir) + "/" + std::to_string(group); }

std::string vfio_cdev(std::string_view name) { return std::string(kVfioCdevs) + "/" + std::string(name); }

std::string host_path(std::string_view relative) { return "/" + std::string(relative); }

}  // namespace vfiod::pci_paths
