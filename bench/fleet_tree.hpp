// The fleet host the benchmarks run on, in one place so every measurement sees the same shape:
// SR-IOV NICs with up to 255 VFs each (every VF its own IOMMU group, as with ACS), GPUs with their
// HDMI audio function, NVMe drives (some mounted), netdevs on the PFs (some routed), and one
// root port per card. Shaped after the 4,108-function host of issue 14 (16 PFs x 255 VFs, 8 GPUs).
#pragma once

#include <string>
#include <vector>

#include "fake_tree.hpp"

namespace vfiod::bench {

struct FleetTree {
    unsigned functions = 0;          // endpoint functions laid out (root ports not counted)
    unsigned root_ports = 0;
    unsigned vfs = 0;                // VFs (allowlisted: each one a group and a device object)
    unsigned gpus = 0;               // GPU + audio groups (allowlisted)
    std::vector<std::string> pfs;    // PF addresses, in order
    std::string spare_pf;            // a PF with sriov_numvfs = 0, for VF-creation bursts
    std::string config;              // vfiod.toml: allowlists the VFs and the GPUs
};

// The SR-IOV host of issue 25: `pfs` X710-like PFs (sriov_totalvfs 255, no VFs yet), each
// behind its own root port, its VFs' routing IDs at offset 128, stride 2 (VF i on the PF's bus or
// one of the next two: PFs are 4 buses apart), and a config that asks vfiod (enforce mode) for 255
// VFs on every PF and allowlists every VF. The tree is what a freshly booted host shows.
struct SriovFleet {
    std::vector<std::string> pfs;    // PF addresses, in order
    unsigned vfs_per_pf = 255;
    std::string config;              // vfiod.toml
};
SriovFleet build_sriov_fleet(test::FakeTree& t, unsigned pfs);
// PF number `index` of such a host (no VFs), in IOMMU group `group`. The tree lays out one root
// port more than it has PFs, so PF number `pfs` can be hot-plugged (FakeKernel::hot_add).
test::FakeTree::Function sriov_fleet_pf(unsigned index, unsigned group);

// Lays out `functions` endpoint functions (at least 32) under t's root, with proc/net/route and
// proc/self/mountinfo. The spare PF (one function of the total) has no VFs yet.
// vfs_bound: every VF already on vfio-pci, as vfiod in enforce mode leaves them (its steady
// state); otherwise on iavf, every VF still to bind (what observe mode plans and keeps).
FleetTree build_fleet_tree(test::FakeTree& t, unsigned functions, bool vfs_bound = false);

// The VF addresses of pf number `pf_index`'s bus, 1..count ("0000:BB:00.1" …): what
// creating `count` VFs on it yields.
std::vector<std::string> vf_addresses(const std::string& pf, unsigned count);

// Adds `count` VFs under pf (driver iavf, own group each, physfn/virtfnN links, sriov_numvfs).
// first_group: the group number of the first VF.
// `bound`: on vfio-pci with driver_override set, as vfiod leaves the VFs it bound.
void add_vfs(test::FakeTree& t, const std::string& pf, unsigned count, unsigned first_group,
             bool bound = false);

}  // namespace vfiod::bench
