// A device as vfiod-dra-plugin publishes it, made by hand for the plugin's unit and integration
// tests (test_dra_devices, test_dra_prepare, test_dra_publisher).
#pragma once

#include <string>

#include "devices.hpp"

namespace vfiod::test {

// An H100 function (10de:2331, class 030200, resource "nvidia.com/GH100") on vfio-pci under the
// root complex pci0000:00, NUMA node unknown.
inline dra::DraDevice dra_device(const std::string& address, unsigned group) {
    dra::DraDevice d;
    d.address = *PciAddress::parse(address);
    d.name = dra::device_name(d.address);
    d.group = group;
    d.resource_name = "nvidia.com/GH100";
    d.ids = {0x10de, 0x2331, 0x030200};
    d.driver = "vfio-pci";
    d.pcie_root = "pci0000:00";
    return d;
}

// A T4 vGPU (type nvidia-222, "GRID T4-1Q", resource "nvidia.com/GRID_T4-1Q") with its own IOMMU
// group, on a PCI parent under the root complex pci0000:00, NUMA node unknown.
inline dra::DraDevice dra_mdev(const std::string& uuid, unsigned group) {
    dra::DraDevice d;
    d.name = dra::mdev_device_name(uuid);
    d.group = group;
    d.resource_name = "nvidia.com/GRID_T4-1Q";
    d.pcie_root = "pci0000:00";
    d.mdev = {uuid, "nvidia-222", "GRID T4-1Q"};
    return d;
}

}  // namespace vfiod::test
