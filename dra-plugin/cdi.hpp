// The CDI spec of a prepared claim (DESIGN §10): one file per claim in the CDI directory, kind
// vfiod.io/vfio, one CDI device per allocated function named "<claim uid>-<device>", whose
// container edits are its whole IOMMU group's device nodes (model.hpp's group_device_nodes,
// which the device plugin's Allocate answers too) and the read-only bind mounts of its
// requests' device-metadata files (metadata.hpp). The container runtime reads it; the kubelet
// is answered with the CDI device IDs.
#pragma once

#include <string>
#include <vector>

#include "model.hpp"

namespace vfiod::dra {

// The host path of a claim's CDI spec.
std::string cdi_spec_path(const std::string& cdi_dir, const std::string& claim_uid);
// "vfiod.io/vfio=<claim uid>-<device>": what Prepare answers for the device.
std::string cdi_device_id(const std::string& claim_uid, const std::string& device);

// One CDI device: its nodes, and the metadata files bound into the container.
struct CdiDevice {
    struct Mount {
        std::string host_path, container_path;
    };
    std::string claim_uid;
    std::string device;  // "pci-0000-01-00-0"
    std::vector<plugin::DeviceNode> nodes;
    std::vector<Mount> mounts;
};

// The spec's file content (CDI 0.5.0, JSON).
std::string cdi_spec(const std::vector<CdiDevice>& devices);

}  // namespace vfiod::dra
