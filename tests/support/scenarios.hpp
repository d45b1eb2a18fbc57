// Named host trees for end-to-end tests, the integration tests and the demo: each lays out a
// realistic host with FakeTree (sysfs, procfs and etc/vfiod/vfiod.toml).
#pragma once

#include <string>
#include <vector>

#include "fake_mdev.hpp"
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

// The sriov-host's layout with an SR-IOV NIC at kSriovPf instead of the NVMe (8086:1521 on igb,
// group 7, netdev enp2s0f0) that already has its 2 VFs (8086:1520 on igbvf: 0000:02:00.1 in
// group 8 with enp2s0v0, which carries the host's default route, and .2 in group 9 with
// enp2s0v1): what a journal entry or a count change must never destroy (issue 37). No
// vfiod.toml.
void build_sriov_routed_vf(FakeTree& t);

// The demo host (and its vfiod.toml) with two mdev parents (DESIGN §12): a T4 at kMdevPciParent
// (10de:1eb8 on nvidia, group 18) with types nvidia-222 "GRID T4-1Q" and nvidia-223 "GRID T4-2Q"
// (16 units, costs 1 and 2), and the kernel's mtty sample, which already holds vfiod's mdevs 0
// and 1 of mtty-1 ("Single port serial"), bound and ready.
void build_mdev_host(FakeTree& t);
inline constexpr char kMdevPciParent[] = "0000:06:00.0";

// The vfiod.toml both kubelet plugins' scenarios (test_device_plugin, test_dra_scenarios) run
// vfiod with on "k8s-host" (the demo host plus a free NIC on NUMA node 1, group 17): enforce
// mode, companions by default. Bound are the GPU and its audio function (group 13, NUMA 0), the
// NICs 03:00.0 (group 15, NUMA 0) and 05:00.0 (group 17, NUMA 1); the bonded NIC 04:00.0 and
// the root NVMe are refused, the iGPU protected, the rest not allowlisted.
inline constexpr char kK8sHostConfig[] = R"([daemon]
mode = "enforce"
[[device]]
selector = "10de:*"
resource_name = "nvidia.com/GH100"
[[device]]
selector = "8086:1533"
resource_name = "intel.com/I210"
[[device]]
selector = "144d:a808"
resource_name = "samsung.com/PM9A1"
[[protect]]
address = "0000:00:02.0"
)";

// "k8s-mdev-host": k8s-host plus a T4 (10de:1eb8 on nvidia, group 19) at kMdevPciParent, whose
// parent driver offers nvidia-222 and -223 (16 units), and the mbochs sample parent;
// no mdev yet; its parents are registered before vfiod starts (scenario_mdev_parents). No
// vfiod.toml: tests write their own. Any scenario's name + "+mbochs" is that scenario with mbochs
// registered, + "+vgpu" with 8 virtual parents vgpu0..vgpu7 of 64 units (types vgpu-1q, 1 unit,
// and vgpu-2q, 2; fake_mdev's vgpu_parent).

// The names build_scenario accepts (each also with a "+mbochs" or "+vgpu" suffix), and the
// builder behind each.
std::vector<std::string> scenario_names();
bool build_scenario(const std::string& name, FakeTree& t);
// The mdev parent drivers loaded on the scenario's host; none on most.
std::vector<MdevParentSpec> scenario_mdev_parents(const std::string& name);

}  // namespace vfiod::test
