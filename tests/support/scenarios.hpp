// Named host trees for end-to-end tests, the integration tests and the demo: each lays out a
// realistic host with FakeTree (sysfs, procfs and etc/vfiod/vfiod.toml).
#pragma once

#include <string>
#include <vector>

#include "fake_tree.hpp"

namespace vfiod::test {

// A GPU server: boot iGPU (protected), NVIDIA GPU + HDMI audio in one group behind a root port,
// the root NVMe (mounted as /dev/root), a routed onboard NIC and a spare NIC of another model.
void build_gpu_host(FakeTree& t);

// QEMU's SR-IOV NVMe as issue 24's guest has it (q35): the routed management NIC (e1000e,
// group 2), a root port (group 4) and behind it the PF kSriovPf (1b36:0010 on nvme, group 7,
// sriov_totalvfs 2, VFs 1b36:0010 at offset 1 and stride 1: 0000:02:00.1 and .2), no VFs yet
// and sriov_drivers_autoprobe 1; vfio-pci registered. No vfiod.toml: tests write their own.
void build_sriov_host(FakeTree& t);
inline constexpr char kSriovPf[] = "0000:02:00.0";

// The names build_scenario accepts, and the builder behind each.
std::vector<std::string> scenario_names();
bool build_scenario(const std::string& name, FakeTree& t);

}  // namespace vfiod::test
