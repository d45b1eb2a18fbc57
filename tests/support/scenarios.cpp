#include "scenarios.hpp"

#include <cstdio>

#include "core/mdev.hpp"
#include "fake_kernel.hpp"

namespace vfiod::test {

namespace {

using Fn = FakeTree::Function;

// The demo host's functions all sit on NUMA node 0.
Fn fn(const char* addr, const char* vendor, const char* device, const char* cls,
      const char* driver, unsigned group, const char* parent = "") {
    Fn f = FakeTree::pci(addr, vendor, device, cls, driver, group, parent);
    f.numa_node = 0;
    return f;
}

const char kGpuHostConfig[] = R"(# vfiod.toml for the bundled demo host
[daemon]
mode = "enforce"
companions = "bind"

[[device]]                        # the H100: KubeVirt pciHostDevices entry
selector = "10de:2331"
resource_name = "nvidia.com/GH100_H100_PCIE"

[[device]]                        # spare NICs for a DPDK VM
selector = "8086:1533"
resource_name = "intel.com/I210"

[[device]]                        # someone allowlisted the NVMe model: vfiod must refuse
selector = "144d:a808"
resource_name = "samsung.com/PM9A1"

[[protect]]                       # the boot iGPU, never
address = "0000:00:02.0"
)";

}  // namespace

void build_gpu_host(FakeTree& t) {
    t.enable_iommu();
    t.add_function(fn("0000:00:00.0", "8086", "3e30", "060000", "", 0));
    Fn igpu = fn("0000:00:02.0", "8086", "3e92", "030000", "i915", 1);
    igpu.boot_vga = 1;
    t.add_function(igpu);
    t.add_function(fn("0000:00:01.0", "8086", "1901", "060400", "pcieport", 2));
    t.add_function(fn("0000:01:00.0", "10de", "2331", "030200", "nvidia", 13, "0000:00:01.0"));
    t.add_function(fn("0000:01:00.1", "10de", "22a3", "040300", "snd_hda_intel", 13,
                      "0000:00:01.0"));
    t.add_function(fn("0000:00:1d.0", "8086", "a330", "060400", "pcieport", 10));
    t.add_function(fn("0000:02:00.0", "144d", "a808", "010802", "nvme", 14, "0000:00:1d.0"));
    t.add_block("0000:02:00.0", "nvme/nvme0", "nvme0n1", 259, 0);
    t.add_partition("nvme0n1", "nvme0n1p1", 259, 1);
    t.add_partition("nvme0n1", "nvme0n1p2", 259, 2);
    t.add_function(fn("0000:00:1f.6", "8086", "15bb", "020000", "e1000e", 9));
    t.add_netdev("0000:00:1f.6", "eno1");
    t.add_function(fn("0000:00:1c.0", "8086", "a33c", "060400", "pcieport", 11));
    t.add_function(fn("0000:03:00.0", "8086", "1533", "020000", "igb", 15, "0000:00:1c.0"));
    t.add_netdev("0000:03:00.0", "enp3s0");
    t.add_function(fn("0000:00:1c.1", "8086", "a33d", "060400", "pcieport", 12));
    t.add_function(fn("0000:04:00.0", "8086", "1533", "020000", "igb", 16, "0000:00:1c.1"));
    t.add_netdev("0000:04:00.0", "enp4s0");
    t.add_virtual_netdev("bond0");
    t.stack_netdev("enp4s0", "bond0", true);
    t.add_driver("vfio-pci");

    t.write_file("proc/self/mountinfo",
                 "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
                 "23 22 259:1 / /boot/efi rw,relatime shared:2 - vfat /dev/nvme0n1p1 rw\n"
                 "24 22 0:21 / /proc rw,nosuid shared:3 - proc proc rw\n");
    t.write_file("proc/mounts",
                 "/dev/root / ext4 rw,relatime 0 0\n"
                 "/dev/nvme0n1p1 /boot/efi vfat rw,relatime 0 0\n"
                 "proc /proc proc rw,nosuid 0 0\n");
    t.write_file("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
    t.write_file("proc/net/route",
                 "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
                 "eno1\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
                 "eno1\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"
                 "bond0\t000010AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n");
    t.write_file("proc/net/ipv6_route", "");
    t.write_file("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 intel_iommu=on iommu=pt\n");
    t.write_file("etc/vfiod/vfiod.toml", kGpuHostConfig);
}

// The demo host plus a free NIC on NUMA node 1 (group 17), for the device plugin's topology.
void build_k8s_host(FakeTree& t) {
    build_gpu_host(t);
    t.add_function(fn("0000:00:1c.2", "8086", "a33e", "060400", "pcieport", 18));
    Fn nic = fn("0000:05:00.0", "8086", "1533", "020000", "igb", 17, "0000:00:1c.2");
    nic.numa_node = 1;
    t.add_function(nic);
}

namespace {

// The T4's vGPU parent driver at kMdevPciParent: 16 GB of frame buffer, two types.
MdevParentSpec t4_parent() {
    MdevParentSpec vgpu;
    vgpu.name = kMdevPciParent;
    vgpu.mdev_driver = "nvidia-vgpu-vfio";
    vgpu.budget = 16;
    vgpu.types = {{"222", "GRID T4-1Q", 1, "num_heads=4, frl_config=60"},
                  {"223", "GRID T4-2Q", 2, "num_heads=4, frl_config=60"}};
    return vgpu;
}

}  // namespace

void build_mdev_host(FakeTree& t) {
    build_gpu_host(t);
    t.add_function(fn(kMdevPciParent, "10de", "1eb8", "030200", "nvidia", 18));
    FakeKernel kernel(t);
    kernel.register_mdev_parent(t4_parent(), false);
    kernel.register_mdev_parent(mtty_parent(), false);
    for (unsigned i = 0; i < 2; ++i)
        kernel.write(mdev_paths::create_file("mtty", "mtty-1"), mdev_uuid("mtty", "mtty-1", i));
}

// 256 free NICs (8086:1533), one IOMMU group each, on NUMA nodes 0 and 1: the device plugin's
// size benchmark.
void build_many_nics(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    for (unsigned i = 0; i < 256; ++i) {
        char bdf[16];
        std::snprintf(bdf, sizeof bdf, "0000:%02x:00.%u", 0x20 + i / 8, i % 8);
        Fn nic = fn(bdf, "8086", "1533", "020000", "igb", 100 + i);
        nic.numa_node = static_cast<int>(i % 2);
        t.add_function(nic);
    }
    t.write_file("proc/self/mountinfo", "");
    t.write_file("proc/mounts", "");
    t.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    t.write_file("proc/net/route", "Iface\tDestination\tGateway \tFlags\n");
    t.write_file("proc/net/ipv6_route", "");
}

void build_sriov_host(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(fn("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 2));
    t.add_netdev("0000:00:02.0", "eth0");
    t.add_function(fn("0000:00:04.0", "1b36", "000c", "060400", "pcieport", 4));
    Fn pf = fn(kSriovPf, "1b36", "0010", "010802", "nvme", 7, "0000:00:04.0");
    pf.sriov_totalvfs = 2;
    t.add_function(pf);
    t.write_file("proc/self/mountinfo", "");
    t.write_file("proc/mounts", "");
    t.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    t.write_file("proc/net/route",
                 "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\t"
                 "Window\tIRTT\n"
                 "eth0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n");
    t.write_file("proc/net/ipv6_route", "");
}

void build_sriov_routed_vf(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(fn("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 2));
    t.add_netdev("0000:00:02.0", "eth0");
    t.add_function(fn("0000:00:04.0", "1b36", "000c", "060400", "pcieport", 4));
    Fn pf = fn(kSriovPf, "8086", "1521", "020000", "igb", 7, "0000:00:04.0");
    pf.sriov_totalvfs = 2;
    pf.sriov_numvfs = 2;
    pf.sriov_vf_device = "1520";
    t.add_function(pf);
    t.add_netdev(kSriovPf, "enp2s0f0");
    for (unsigned i = 0; i < 2; ++i) {
        std::string bdf = std::string("0000:02:00.") + std::to_string(i + 1);
        Fn vf = fn(bdf.c_str(), "8086", "1520", "020000", "igbvf", 8 + i);
        vf.physfn = kSriovPf;
        t.add_function(vf);
        t.add_netdev(bdf, "enp2s0v" + std::to_string(i));
    }
    t.write_file("proc/self/mountinfo", "");
    t.write_file("proc/mounts", "");
    t.write_file("proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n");
    t.write_file("proc/net/route",
                 "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\t"
                 "Window\tIRTT\n"
                 "enp2s0v0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n");
    t.write_file("proc/net/ipv6_route", "");
}

namespace {

// k8s-host and a T4 behind its own root port, for its mdevs.
void build_k8s_mdev_host(FakeTree& t) {
    build_k8s_host(t);
    t.add_function(fn("0000:00:1c.3", "8086", "a33f", "060400", "pcieport", 20));
    t.add_function(fn(kMdevPciParent, "10de", "1eb8", "030200", "nvidia", 19, "0000:00:1c.3"));
}

}  // namespace

std::vector<MdevParentSpec> scenario_mdev_parents(const std::string& name) {
    std::vector<MdevParentSpec> out;
    if (name == "k8s-mdev-host") {
        out = {t4_parent(), mbochs_parent()};
    }
    // "<scenario>+mbochs", "<scenario>+vgpu": the scenario with mbochs, or 8 vGPU-like parents.
    if (name.ends_with("+mbochs"))
        out.push_back(mbochs_parent());
    for (unsigned i = 0; name.ends_with("+vgpu") && i < 8; ++i)
        out.push_back(vgpu_parent(i));
    return out;
}

std::vector<std::string> scenario_names() {
    return {"gpu-host",  "k8s-host",   "k8s-mdev-host",  "many-nics",
            "mdev-host", "sriov-host", "sriov-routed-vf"};
}

bool build_scenario(const std::string& full_name, FakeTree& t) {
    // The parents a "+mbochs" or "+vgpu" suffix adds are scenario_mdev_parents' business.
    std::string name = full_name;
    if (name.ends_with("+mbochs") || name.ends_with("+vgpu"))
        name.resize(name.rfind('+'));
    if (name == "gpu-host") {
        build_gpu_host(t);
        return true;
    }
    if (name == "k8s-host") {
        build_k8s_host(t);
        return true;
    }
    if (name == "mdev-host") {
        build_mdev_host(t);
        return true;
    }
    if (name == "k8s-mdev-host") {
        build_k8s_mdev_host(t);
        return true;
    }
    if (name == "many-nics") {
        build_many_nics(t);
        return true;
    }
    if (name == "sriov-host") {
        build_sriov_host(t);
        return true;
    }
    if (name == "sriov-routed-vf") {
        build_sriov_routed_vf(t);
        return true;
    }
    return false;
}

}  // namespace vfiod::test
