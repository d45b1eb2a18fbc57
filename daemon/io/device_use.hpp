// Device nodes of PCI functions and the processes holding them open: a sound server on the HDMI
// audio, a display server on DRM card*, a CUDA job on /dev/nvidia<N> (in-use-device, DESIGN §4).
// Unbinding a driver under an open node blocks in the kernel or breaks the holder.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/pci_address.hpp"
#include "core/topology.hpp"
#include "io/proc_fds.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

struct DeviceNode {
    std::pair<unsigned, unsigned> devnum;
    PciAddress owner;  // the deepest PCI function above it
    std::string dir;   // its sysfs directory ("sys/devices/…/sound/card0/controlC0"); "" for nvidia
    std::string node;  // "/dev/nvidia0" when known without sysfs; else see node_path()
};

// Every character device whose sysfs node sits under a PCI function (sys/dev/char), vfio's own
// nodes excepted (Release's business), plus /dev/nvidia<minor> of each NVIDIA GPU
// (proc/driver/nvidia/gpus/<BDF>/information; the proprietary driver's nodes have no sysfs entry).
// Costs one readlink per char device: names are read only for nodes somebody holds.
std::vector<DeviceNode> read_device_nodes(const HostFs& fs);

// "/dev/" + DEVNAME from the node's uevent ("/dev/snd/controlC0"); "" when it has none.
std::string node_path(const HostFs& fs, const DeviceNode& n);

// Fills use->device: "/dev/snd/controlC0 is open by pid 812 (pulseaudio)" per node and process.
// Live fds match by device number, a tree's by path (OpenNode::devnum).
void find_device_use(const HostFs& fs, const std::vector<DeviceNode>& nodes,
                     const std::vector<OpenNode>& open, HostUse* use);

}  // namespace vfiod
