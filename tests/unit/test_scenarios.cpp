// End to end on kernel-shaped trees: FakeTree -> the same reader, host-use detector, config
// parser and planner that `vfioctl plan` uses -> the plan JSON object. One test per host shape
// the planner must get right (DESIGN §4).
#include <gtest/gtest.h>

#include <set>

#include "core/plan.hpp"
#include "core/plan_json.hpp"
#include "fake_tree.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

using namespace vfiod;
using vfiod::test::FakeTree;

namespace {


const char kRoute[] =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

std::string route_line(const char* iface) {
    return std::string(iface) + "\t00000000\t0102A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";
}

Plan plan_of(const FakeTree& t, const char* toml) {
    ConfigResult cr = parse_config(toml, "test.toml");
    EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
    KernelHostFs fs(t.root());
    Snapshot s = read_snapshot(fs);
    return make_plan(s.topology, s.use, cr.config ? *cr.config : Config{});
}

const GroupPlan& group(const Plan& p, unsigned n) {
    for (const auto& g : p.groups)
        if (g.group == n)
            return g;
    throw std::runtime_error("no group " + std::to_string(n));
}

std::vector<std::string> blockers(const GroupPlan& g) {
    std::vector<std::string> out;
    for (const auto& b : g.blockers)
        out.push_back(b.str());
    return out;
}

// A q35-like host: root ports, the GPU pair in group 6, routed management NIC in group 2.
void base_host(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(FakeTree::pci("0000:00:03.0", "1b36", "000c", "060400", "pcieport", 3));
    t.add_function(FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "nvidia", 6, "0000:00:03.0"));
    t.add_function(FakeTree::pci("0000:01:00.1", "10de", "22a3", "040300", "snd_hda_intel", 6,
                     "0000:00:03.0"));
    t.write_file("proc/self/mountinfo", "");
    t.write_file("proc/net/route", kRoute);
}

}  // namespace

TEST(Scenario, SingleGpuOnNvidia) {
    FakeTree t;
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:00:03.0", "1b36", "000c", "060400", "pcieport", 3));
    t.add_function(FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "nvidia", 6, "0000:00:03.0"));
    Plan p = plan_of(t, "[[device]]\nselector = \"10de:2331\"\nresource_name = \"nvidia.com/H100\"\n");
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].action, Action::Bind);
    EXPECT_EQ(p.groups[0].writes().size(), 3u);
}

TEST(Scenario, GpuWithAudioCompanionBindsBothOrRefuses) {
    FakeTree t;
    base_host(t);
    Plan p = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n");
    const GroupPlan& g = group(p, 6);
    EXPECT_EQ(g.action, Action::Bind);
    ASSERT_EQ(g.devices.size(), 2u);
    EXPECT_EQ(g.devices[1].role, Role::Companion);
    EXPECT_EQ(g.writes().size(), 6u);

    Plan r = plan_of(t, "[daemon]\ncompanions = \"refuse\"\n[[device]]\nselector = \"10de:2331\"\n");
    EXPECT_EQ(group(r, 6).reason, Reason::Companion);
    EXPECT_EQ(blockers(group(r, 6)), std::vector<std::string>{"0000:01:00.1"});
}

TEST(Scenario, GroupSharedWithTheRootNvmeSeenAsDevRoot) {
    FakeTree t;
    base_host(t);
    // No ACS: the NVMe landed in the GPU's group. / is mounted from "/dev/root", so only the
    // major:minor in mountinfo ties it to nvme0n1p2.
    t.add_function(FakeTree::pci("0000:01:00.2", "144d", "a808", "010802", "nvme", 6, "0000:00:03.0"));
    t.add_block("0000:01:00.2", "nvme/nvme0", "nvme0n1", 259, 0);
    t.add_partition("nvme0n1", "nvme0n1p2", 259, 2);
    t.write_file("proc/self/mountinfo", "22 1 259:2 / / rw,relatime - ext4 /dev/root rw\n");
    t.write_file("proc/mounts", "/dev/root / ext4 rw,relatime 0 0\n");
    Plan p = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n");
    const GroupPlan& g = group(p, 6);
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::InUseStorage);
    EXPECT_EQ(blockers(g), std::vector<std::string>{"0000:01:00.2"});
    EXPECT_TRUE(g.writes().empty());
    // The disk is the NVMe's alone: the root port above it does not inherit it.
    KernelHostFs fs(t.root());
    HostUse use = read_snapshot(fs).use;
    EXPECT_TRUE(use.storage.count(*PciAddress::parse("0000:01:00.2")));
    EXPECT_FALSE(use.storage.count(*PciAddress::parse("0000:00:03.0")));
}

TEST(Scenario, TwoNicsOfOneIdOnlyTheRoutedOneIsRefused) {
    FakeTree t;
    base_host(t);
    t.add_function(FakeTree::pci("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 2));
    t.add_netdev("0000:00:02.0", "enp0s2");
    t.add_function(FakeTree::pci("0000:00:04.0", "8086", "10d3", "020000", "e1000e", 4));
    t.add_netdev("0000:00:04.0", "enp0s4");
    t.write_file("proc/net/route", std::string(kRoute) + route_line("enp0s2"));
    Plan p = plan_of(t, "[[device]]\nselector = \"8086:10d3\"\n");
    EXPECT_EQ(group(p, 2).reason, Reason::InUseNetwork);
    EXPECT_EQ(group(p, 4).action, Action::Bind);
}

TEST(Scenario, BondedNicIsInUseEvenWithoutItsOwnRoute) {
    FakeTree t;
    base_host(t);
    t.add_function(FakeTree::pci("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 2));
    t.add_netdev("0000:00:02.0", "enp0s2");
    t.add_virtual_netdev("bond0");
    t.stack_netdev("enp0s2", "bond0", true);
    Plan p = plan_of(t, "[[device]]\nselector = \"8086:10d3\"\n");
    EXPECT_EQ(group(p, 2).reason, Reason::InUseNetwork);
}

TEST(Scenario, VlanOnANicCarryingTheRoute) {
    FakeTree t;
    base_host(t);
    t.add_function(FakeTree::pci("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 2));
    t.add_netdev("0000:00:02.0", "enp0s2");
    t.add_virtual_netdev("enp0s2.100");
    t.stack_netdev("enp0s2", "enp0s2.100", false);
    t.write_file("proc/net/route", std::string(kRoute) + route_line("enp0s2.100"));
    Plan p = plan_of(t, "[[device]]\nselector = \"8086:10d3\"\n");
    EXPECT_EQ(group(p, 2).reason, Reason::InUseNetwork);
    // Without the route the VLAN alone does not make the NIC busy.
    t.write_file("proc/net/route", kRoute);
    EXPECT_EQ(group(plan_of(t, "[[device]]\nselector = \"8086:10d3\"\n"), 2).action, Action::Bind);
}

TEST(Scenario, VirtioNetdevOneLevelDeeper) {
    FakeTree t;
    base_host(t);
    t.add_function(FakeTree::pci("0000:00:05.0", "1af4", "1041", "020000", "virtio-pci", 5));
    t.add_netdev("0000:00:05.0", "eth0", "virtio2");
    t.write_file("proc/net/route", std::string(kRoute) + route_line("eth0"));
    Plan p = plan_of(t, "[[device]]\nselector = \"1af4:*\"\n");
    EXPECT_EQ(group(p, 5).reason, Reason::InUseNetwork);
}

TEST(Scenario, AlreadyBoundAndHalfBound) {
    FakeTree t;
    base_host(t);
    t.bind("0000:01:00.0", "vfio-pci");
    Plan half = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n");
    EXPECT_EQ(group(half, 6).action, Action::Bind);
    EXPECT_EQ(group(half, 6).writes().size(), 3u);
    EXPECT_EQ(group(half, 6).writes()[0].path(), "sys/bus/pci/devices/0000:01:00.1/driver_override");
    t.bind("0000:01:00.1", "vfio-pci");
    EXPECT_EQ(group(plan_of(t, "[[device]]\nselector = \"10de:2331\"\n"), 6).action, Action::Bound);
}

TEST(Scenario, IommuOff) {
    FakeTree t;
    t.add_function(FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "nvidia", std::nullopt));
    Plan p = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n");
    EXPECT_FALSE(p.iommu);
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_FALSE(p.groups[0].group);
    EXPECT_EQ(p.groups[0].reason, Reason::NoIommu);
    EXPECT_NE(plan_to_json(p, false).find(R"("group":null,"action":"refuse","reason":"no-iommu")"),
              std::string::npos);
}

TEST(Scenario, BootVgaRefusedThenAllowed) {
    FakeTree t;
    t.enable_iommu();
    auto f = FakeTree::pci("0000:00:02.0", "8086", "3e92", "030000", "i915", 1);
    f.boot_vga = 1;
    t.add_function(f);
    EXPECT_EQ(plan_of(t, "[[device]]\nselector = \"8086:3e92\"\n").groups.at(0).reason,
              Reason::BootVga);
    EXPECT_EQ(plan_of(t, "[daemon]\nallow_boot_vga = true\n[[device]]\nselector = \"8086:3e92\"\n")
                  .groups.at(0)
                  .action,
              Action::Bind);
}

TEST(Scenario, BridgeInsideTheGroupIsNeverWritten) {
    FakeTree t;
    t.enable_iommu();
    // A conventional PCI bridge without ACS shares its group with the devices behind it.
    t.add_function(FakeTree::pci("0000:00:1e.0", "8086", "244e", "060401", "", 7));
    t.add_function(FakeTree::pci("0000:05:00.0", "10de", "2331", "030200", "nvidia", 7, "0000:00:1e.0"));
    const GroupPlan g = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n").groups.at(0);
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_EQ(g.devices[0].role, Role::Bridge);
    for (const auto& w : g.writes()) {
        EXPECT_EQ(w.path().find("0000:00:1e.0"), std::string::npos);
        EXPECT_NE(w.value, "0000:00:1e.0");
    }
}

TEST(Scenario, ProtectedDeviceBlocksItsGroup) {
    FakeTree t;
    base_host(t);
    Plan p = plan_of(t, "[[device]]\nselector = \"10de:2331\"\n[[protect]]\nselector = \"10de:22a3\"\n");
    EXPECT_EQ(group(p, 6).reason, Reason::Protected);
    EXPECT_EQ(blockers(group(p, 6)), std::vector<std::string>{"0000:01:00.1"});
    EXPECT_TRUE(group(p, 6).writes().empty());
}

TEST(Scenario, SriovVfsBindWhileThePfStays) {
    FakeTree t;
    t.enable_iommu();
    auto pf = FakeTree::pci("0000:05:00.0", "15b3", "1017", "020000", "mlx5_core", 20);
    pf.sriov_totalvfs = 8;
    pf.sriov_numvfs = 2;
    t.add_function(pf);
    for (const char* vf : {"0000:05:00.2", "0000:05:00.3"}) {
        auto f = FakeTree::pci(vf, "15b3", "1018", "020000", "mlx5_core", vf[11] == '2' ? 21u : 22u);
        f.physfn = "0000:05:00.0";
        t.add_function(f);
    }
    Plan p = plan_of(t, "[[device]]\nselector = \"15b3:1018\"\n");
    ASSERT_EQ(p.groups.size(), 2u);
    const char* vfs[] = {"0000:05:00.2", "0000:05:00.3"};
    for (size_t i = 0; i < 2; ++i) {
        const GroupPlan& g = p.groups[i];
        EXPECT_EQ(g.action, Action::Bind);
        ASSERT_EQ(g.devices.size(), 1u);  // the PF is in none of the planned groups
        EXPECT_EQ(g.devices[0].address.str(), vfs[i]);
        EXPECT_EQ(g.writes().back().value, vfs[i]);
    }
    // Allowlisting the PF itself is refused: unbinding it would destroy the VFs.
    Plan pfp = plan_of(t, "[[device]]\nselector = \"15b3:1017\"\n");
    EXPECT_EQ(group(pfp, 20).reason, Reason::SriovPf);
}

TEST(Scenario, VendorWildcardWithAddressAndVariantDriver) {
    FakeTree t;
    base_host(t);
    t.add_function(FakeTree::pci("0000:00:04.0", "1b36", "000c", "060400", "pcieport", 4));
    t.add_function(FakeTree::pci("0000:02:00.0", "10de", "2342", "030200", "nvidia", 8, "0000:00:04.0"));
    Plan p = plan_of(t,
                     "[[device]]\nselector = \"10de:*\"\naddress = \"0000:02:00.0\"\n"
                     "driver = \"nvgrace_gpu_vfio_pci\"\n");
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].group, 8u);
    EXPECT_EQ(p.groups[0].devices[0].target, "nvgrace_gpu_vfio_pci");
    EXPECT_EQ(p.groups[0].writes()[0].value, "nvgrace_gpu_vfio_pci");
}

TEST(Scenario, GpuHostDemoTree) {
    FakeTree t;
    vfiod::test::build_gpu_host(t);
    ConfigResult cr = load_config(t.root(), std::nullopt);
    ASSERT_TRUE(cr.config);
    KernelHostFs fs(t.root());
    Snapshot s = read_snapshot(fs);
    EXPECT_TRUE(s.warnings.empty()) << s.warnings[0];
    Plan p = make_plan(s.topology, s.use, *cr.config);
    ASSERT_EQ(p.groups.size(), 4u);
    EXPECT_EQ(group(p, 13).action, Action::Bind);
    EXPECT_EQ(group(p, 14).reason, Reason::InUseStorage);
    EXPECT_EQ(group(p, 15).action, Action::Bind);
    EXPECT_EQ(group(p, 16).reason, Reason::InUseNetwork);
    // Exactly the functions of the two bindable groups are written, and nothing else: not the
    // protected boot iGPU, not a root port, not a refused group's function.
    std::set<std::string> written;
    for (const auto& g : p.groups)
        for (const auto& w : g.writes())
            written.insert(w.path().find("drivers_probe") != std::string::npos
                               ? w.value
                               : w.path().substr(std::string("sys/bus/pci/devices/").size(), 12));
    EXPECT_EQ(written, (std::set<std::string>{"0000:01:00.0", "0000:01:00.1", "0000:03:00.0"}));
}
