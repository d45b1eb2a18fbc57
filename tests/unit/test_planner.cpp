// The planner is pure: these tests build topologies as values and check DESIGN §4 decisions.
#include <gtest/gtest.h>

#include "core/plan.hpp"
#include "core/plan_json.hpp"

using namespace vfiod;

namespace {

PciAddress A(const char* s) { return *PciAddress::parse(s); }

struct Host {
    Topology topo;
    HostUse use;
    Config config;

    Host() { topo.iommu_enabled = true; }

    PciFunction& fn(const char* addr, uint16_t vendor, uint16_t device, uint32_t cls,
                    const char* driver, std::optional<unsigned> group) {
        PciFunction f;
        f.address = A(addr);
        f.vendor = vendor;
        f.device = device;
        f.class_code = cls;
        f.driver = driver;
        f.iommu_group = group;
        if (group)
            topo.groups[*group].push_back(f.address);
        return topo.functions[f.address] = f;
    }
    DeviceEntry& allow(uint16_t vendor, std::optional<uint16_t> device,
                       const char* resource = "example.com/dev") {
        DeviceEntry e;
        e.selector = Selector{vendor, device};
        e.resource_name = resource;
        e.origin = {"vfiod.toml", static_cast<unsigned>(config.devices.size() + 1), 1};
        config.devices.push_back(e);
        return config.devices.back();
    }
    Plan plan() {
        for (auto& [n, members] : topo.groups)
            std::sort(members.begin(), members.end());
        return make_plan(topo, use, config);
    }
};

const PlannedDevice& dev(const GroupPlan& g, const char* addr) {
    for (const auto& d : g.devices)
        if (d.address == A(addr))
            return d;
    throw std::runtime_error(std::string("no device ") + addr);
}

std::vector<std::string> paths(const GroupPlan& g) {
    std::vector<std::string> p;
    for (const auto& w : g.writes())
        p.push_back(w.path() + "=" + w.value);
    return p;
}

}  // namespace

TEST(Planner, SingleGpuOnNvidiaIsBoundInLibvirtOrder) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 1);
    h.allow(0x10de, 0x2331, "nvidia.com/GH100");
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 1u);
    const GroupPlan& g = p.groups[0];
    EXPECT_EQ(g.group, 1u);
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_EQ(g.reason, Reason::None);
    EXPECT_EQ(paths(g), (std::vector<std::string>{
                            "sys/bus/pci/devices/0000:01:00.0/driver_override=vfio-pci",
                            "sys/bus/pci/devices/0000:01:00.0/driver/unbind=0000:01:00.0",
                            "sys/bus/pci/drivers_probe=0000:01:00.0",
                        }));
    EXPECT_EQ(dev(g, "0000:01:00.0").role, Role::Allowlisted);
    EXPECT_EQ(dev(g, "0000:01:00.0").resource_name, "nvidia.com/GH100");
}

TEST(Planner, CompanionAudioIsBoundWithTheGpu) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel", 6);
    h.allow(0x10de, 0x2331);
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 1u);
    const GroupPlan& g = p.groups[0];
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_EQ(dev(g, "0000:01:00.1").role, Role::Companion);
    EXPECT_EQ(dev(g, "0000:01:00.1").target, "vfio-pci");
    EXPECT_FALSE(dev(g, "0000:01:00.1").resource_name);
    EXPECT_EQ(g.writes().size(), 6u);
    EXPECT_EQ(g.writes()[3].path(), "sys/bus/pci/devices/0000:01:00.1/driver_override");
}

TEST(Planner, CompanionRefusedWhenConfigured) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel", 6);
    h.allow(0x10de, 0x2331);
    h.config.companions = CompanionPolicy::Refuse;
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::Companion);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:01:00.1")});
    EXPECT_TRUE(g.writes().empty());
}

TEST(Planner, GroupSharedWithTheRootNvmeIsRefused) {
    Host h;
    h.fn("0000:03:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 9);
    h.fn("0000:03:00.1", 0x144d, 0xa808, 0x010802, "nvme", 9);
    h.use.storage[A("0000:03:00.1")] = {"nvme0n1p2 (259:2) is mounted on /"};
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::InUseStorage);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:03:00.1")});
    EXPECT_TRUE(g.writes().empty());
    ASSERT_EQ(g.details.size(), 1u);
    EXPECT_EQ(g.details[0], "0000:03:00.1: nvme0n1p2 (259:2) is mounted on /");
}

TEST(Planner, RoutedNicRefusedUnroutedTwinBound) {
    Host h;
    h.fn("0000:00:02.0", 0x8086, 0x10d3, 0x020000, "e1000e", 2);
    h.fn("0000:01:00.0", 0x8086, 0x10d3, 0x020000, "e1000e", 6);
    h.use.network[A("0000:00:02.0")] = {"eth0 carries a route"};
    h.allow(0x8086, 0x10d3);
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 2u);
    EXPECT_EQ(p.groups[0].group, 2u);
    EXPECT_EQ(p.groups[0].reason, Reason::InUseNetwork);
    EXPECT_EQ(p.groups[1].group, 6u);
    EXPECT_EQ(p.groups[1].action, Action::Bind);
}

TEST(Planner, AlreadyBoundGroupNeedsNoWrites) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "vfio-pci", 6);
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "vfio-pci", 6);
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Bound);
    EXPECT_TRUE(g.writes().empty());
}

TEST(Planner, HalfBoundGroupBindsOnlyTheRest) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "vfio-pci", 6);
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel", 6);
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_TRUE(dev(g, "0000:01:00.0").writes.empty());
    EXPECT_EQ(dev(g, "0000:01:00.1").writes.size(), 3u);
}

TEST(Planner, OverrideAlreadySetOnDriverlessFunctionNeedsOnlyTheProbe) {
    Host h;
    auto& f = h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "", 6);
    f.driver_override = "vfio-pci";
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(paths(g), std::vector<std::string>{"sys/bus/pci/drivers_probe=0000:01:00.0"});
}

TEST(Planner, StaleOverrideOnBoundFunctionSkipsTheOverrideWrite) {
    Host h;
    auto& f = h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    f.driver_override = "vfio-pci";
    h.allow(0x10de, 0x2331);
    EXPECT_EQ(paths(h.plan().groups.at(0)),
              (std::vector<std::string>{
                  "sys/bus/pci/devices/0000:01:00.0/driver/unbind=0000:01:00.0",
                  "sys/bus/pci/drivers_probe=0000:01:00.0"}));
}

TEST(Planner, IommuOffGivesUngroupedNoIommuEntries) {
    Host h;
    h.topo.iommu_enabled = false;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", std::nullopt);
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "nvidia", std::nullopt);
    h.fn("0000:03:00.0", 0x8086, 0x10d3, 0x020000, "e1000e", std::nullopt);
    h.allow(0x10de, 0x2331);
    Plan p = h.plan();
    EXPECT_FALSE(p.iommu);
    ASSERT_EQ(p.groups.size(), 2u);
    for (const auto& g : p.groups) {
        EXPECT_FALSE(g.group);
        EXPECT_EQ(g.action, Action::Refuse);
        EXPECT_EQ(g.reason, Reason::NoIommu);
        ASSERT_EQ(g.devices.size(), 1u);
        EXPECT_EQ(g.blockers, std::vector<PciAddress>{g.devices[0].address});
    }
}

TEST(Planner, UngroupedFunctionOnIommuHostSortsLast) {
    Host h;
    h.fn("0000:00:05.0", 0x10de, 0x2331, 0x030200, "nvidia", std::nullopt);
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 12);
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 3);
    h.allow(0x10de, 0x2331);
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 3u);
    EXPECT_EQ(p.groups[0].group, 3u);
    EXPECT_EQ(p.groups[1].group, 12u);
    EXPECT_FALSE(p.groups[2].group);
    EXPECT_EQ(p.groups[2].reason, Reason::NoIommu);
}

TEST(Planner, BootVgaRefusedUnlessAllowed) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2204, 0x030000, "nouveau", 4).boot_vga = true;
    h.allow(0x10de, std::nullopt);
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::BootVga);
    h.config.allow_boot_vga = true;
    EXPECT_EQ(h.plan().groups.at(0).action, Action::Bind);
}

TEST(Planner, BridgeInGroupIsNeverWritten) {
    Host h;
    h.fn("0000:00:1c.0", 0x8086, 0xa110, 0x060400, "pcieport", 8);
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 8);
    h.allow(0x8086, std::nullopt);  // would match the bridge: bridges are never allowlisted
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Bind);
    const auto& bridge = dev(g, "0000:00:1c.0");
    EXPECT_EQ(bridge.role, Role::Bridge);
    EXPECT_FALSE(bridge.target);
    for (const auto& w : g.writes())
        EXPECT_EQ(w.path().find("0000:00:1c.0"), std::string::npos) << w.path();
    for (const auto& w : g.writes())
        EXPECT_EQ(w.value.find("0000:00:1c.0"), std::string::npos) << w.value;
}

// Every planned device is the function's facts as read (core/topology.hpp FunctionFacts), NUMA
// node included: the daemon publishes this record and no second lookup of the topology.
TEST(Planner, EveryPlannedDeviceCarriesItsFunctionsFacts) {
    Host h;
    h.fn("0000:00:1c.0", 0x8086, 0xa110, 0x060400, "pcieport", 8).numa_node = 1;
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 8).numa_node = 1;
    h.fn("0000:02:00.1", 0x10de, 0x22a3, 0x040300, "", 8).numa_node = 1;
    h.fn("0000:05:00.0", 0x10de, 0x2331, 0x030200, "nvidia", std::nullopt).numa_node = 3;
    h.allow(0x10de, 0x2331);
    std::vector<GroupPlan> plans = h.plan().groups;
    plans.push_back(plan_release(h.topo, h.use, 8, {{A("0000:02:00.0"), "nvidia"}}));
    size_t seen = 0;
    for (const auto& g : plans)
        for (const auto& d : g.devices) {
            EXPECT_EQ(static_cast<const FunctionFacts&>(d),
                      static_cast<const FunctionFacts&>(h.topo.functions.at(d.address)))
                << d.address.str();
            ++seen;
        }
    EXPECT_EQ(seen, 7u);  // the group's three, the ungrouped one, and the release's three
    EXPECT_EQ(dev(plans.at(1), "0000:05:00.0").numa_node, 3);
}

TEST(Planner, GroupHoldingOnlyAMatchingBridgeIsNotPlanned) {
    Host h;
    h.fn("0000:00:1c.0", 0x8086, 0xa110, 0x060400, "pcieport", 8);
    h.allow(0x8086, std::nullopt);
    EXPECT_TRUE(h.plan().groups.empty());
}

TEST(Planner, ProtectWinsOverEverythingButNoIommu) {
    Host h;
    h.fn("0000:03:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 9);
    h.fn("0000:03:00.1", 0x144d, 0xa808, 0x010802, "nvme", 9);
    h.use.storage[A("0000:03:00.1")] = {"nvme0n1 is mounted on /"};
    h.allow(0x10de, 0x2331);
    h.config.companions = CompanionPolicy::Refuse;
    ProtectEntry pe;
    pe.address = A("0000:03:00.0");
    h.config.protects.push_back(pe);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.reason, Reason::Protected);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:03:00.0")});
}

TEST(Planner, ProtectBySelectorMatchesCompanion) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel", 6);
    h.allow(0x10de, 0x2331);
    ProtectEntry pe;
    pe.selector = Selector{0x10de, 0x22a3};
    h.config.protects.push_back(pe);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.reason, Reason::Protected);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:01:00.1")});
}

TEST(Planner, StorageBeatsNetworkBeatsSriovBeatsBootVgaBeatsCompanion) {
    Host h;
    h.fn("0000:05:00.0", 0x15b3, 0x1017, 0x020000, "mlx5_core", 5).sriov_numvfs = 4;
    h.fn("0000:05:00.1", 0x15b3, 0x1017, 0x020000, "mlx5_core", 5);
    h.fn("0000:05:00.2", 0x1234, 0x1111, 0x030000, "bochs", 5).boot_vga = true;
    h.fn("0000:05:00.3", 0x144d, 0xa808, 0x010802, "nvme", 5);
    h.allow(0x15b3, 0x1017);
    h.config.companions = CompanionPolicy::Refuse;
    h.use.storage[A("0000:05:00.3")] = {"nvme0n1 is swap"};
    h.use.network[A("0000:05:00.1")] = {"eth1 carries a route"};
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::InUseStorage);
    h.use.storage.clear();
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::InUseNetwork);
    h.use.network.clear();
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::SriovPf);
    EXPECT_EQ(h.plan().groups.at(0).blockers, std::vector<PciAddress>{A("0000:05:00.0")});
    h.topo.functions[A("0000:05:00.0")].sriov_numvfs = 0;
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::BootVga);
    h.config.allow_boot_vga = true;
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.reason, Reason::Companion);
    EXPECT_EQ(g.blockers, (std::vector<PciAddress>{A("0000:05:00.2"), A("0000:05:00.3")}));
}

TEST(Planner, SriovVfBindsWhilePfStays) {
    Host h;
    h.fn("0000:05:00.0", 0x15b3, 0x1017, 0x020000, "mlx5_core", 20).sriov_numvfs = 2;
    h.fn("0000:05:00.2", 0x15b3, 0x1018, 0x020000, "mlx5_core", 21).physfn = A("0000:05:00.0");
    h.fn("0000:05:00.3", 0x15b3, 0x1018, 0x020000, "mlx5_core", 22).physfn = A("0000:05:00.0");
    h.allow(0x15b3, 0x1018);
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 2u);
    const char* vfs[] = {"0000:05:00.2", "0000:05:00.3"};
    for (size_t i = 0; i < 2; ++i) {
        const GroupPlan& g = p.groups[i];
        EXPECT_EQ(g.action, Action::Bind);
        ASSERT_EQ(g.devices.size(), 1u);  // the PF is in none of the planned groups
        EXPECT_EQ(g.devices[0].address, A(vfs[i]));
        EXPECT_EQ(g.writes().back().value, vfs[i]);
    }
}

TEST(Planner, VendorWildcardWithAddressMatchesOnlyThatSlot) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 7);
    h.allow(0x10de, std::nullopt).address = A("0000:02:00.0");
    Plan p = h.plan();
    ASSERT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups[0].group, 7u);
}

TEST(Planner, VariantDriverIsTheTargetOfTheAllowlistedFunctionOnly) {
    Host h;
    h.fn("0009:01:00.0", 0x10de, 0x2342, 0x030200, "nvidia", 30);
    h.fn("0009:01:00.1", 0x10de, 0x22a3, 0x040300, "snd_hda_intel", 30);
    h.allow(0x10de, 0x2342).driver = "nvgrace_gpu_vfio_pci";
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(dev(g, "0009:01:00.0").target, "nvgrace_gpu_vfio_pci");
    EXPECT_EQ(dev(g, "0009:01:00.1").target, "vfio-pci");
    EXPECT_EQ(g.writes()[0].value, "nvgrace_gpu_vfio_pci");
}

TEST(Planner, FunctionOnVfioPciButWantingAVariantIsMoved) {
    Host h;
    h.fn("0009:01:00.0", 0x10de, 0x2342, 0x030200, "vfio-pci", 30);
    h.allow(0x10de, 0x2342).driver = "nvgrace_gpu_vfio_pci";
    EXPECT_EQ(h.plan().groups.at(0).action, Action::Bind);
}

TEST(Planner, FirstMatchingEntryWinsAndTheOverlapIsWarned) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.allow(0x10de, std::nullopt, "example.com/any-nvidia");
    h.allow(0x10de, 0x2331, "nvidia.com/GH100");
    Plan p = h.plan();
    EXPECT_EQ(dev(p.groups.at(0), "0000:01:00.0").resource_name, "example.com/any-nvidia");
    ASSERT_EQ(p.warnings.size(), 1u);
    EXPECT_NE(p.warnings[0].find("0000:01:00.0"), std::string::npos);
    EXPECT_NE(p.warnings[0].find("vfiod.toml:1:1"), std::string::npos);
    EXPECT_NE(p.warnings[0].find("vfiod.toml:2:1"), std::string::npos);
}

TEST(Planner, UnreadableGroupMemberBlocksTheGroup) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    h.topo.groups[6].push_back(A("0000:01:00.1"));  // listed by the kernel, not readable
    h.allow(0x10de, 0x2331);
    const GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:01:00.1")});
    EXPECT_TRUE(g.writes().empty());
}

TEST(Planner, NoAllowlistNoGroups) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    Plan p = h.plan();
    EXPECT_TRUE(p.iommu);
    EXPECT_TRUE(p.groups.empty());
}

TEST(Release, RestoresOriginalDriversAndClearsOverrides) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "vfio-pci", 6).driver_override = "vfio-pci";
    h.fn("0000:01:00.1", 0x10de, 0x22a3, 0x040300, "vfio-pci", 6).driver_override = "vfio-pci";
    h.topo.groups[6] = {A("0000:01:00.0"), A("0000:01:00.1")};
    GroupPlan g = plan_release(h.topo, h.use, 6,
                               {{A("0000:01:00.0"), "nvidia"}, {A("0000:01:00.1"), "snd_hda_intel"}});
    EXPECT_EQ(g.action, Action::Release);
    EXPECT_EQ(dev(g, "0000:01:00.1").target, "snd_hda_intel");
    EXPECT_EQ(paths(g), (std::vector<std::string>{
                            "sys/bus/pci/devices/0000:01:00.0/driver_override=\n",
                            "sys/bus/pci/devices/0000:01:00.0/driver/unbind=0000:01:00.0",
                            "sys/bus/pci/drivers_probe=0000:01:00.0",
                            "sys/bus/pci/devices/0000:01:00.1/driver_override=\n",
                            "sys/bus/pci/devices/0000:01:00.1/driver/unbind=0000:01:00.1",
                            "sys/bus/pci/drivers_probe=0000:01:00.1",
                        }));
}

TEST(Release, RefusedWhileAUserHoldsTheGroup) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "vfio-pci", 6);
    h.use.vfio[A("0000:01:00.0")] = {"/dev/vfio/6 is open by qemu-system-x86 (pid 4242)"};
    GroupPlan g = plan_release(h.topo, h.use, 6, {});
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::InUseVfio);
    EXPECT_TRUE(g.writes().empty());
}

TEST(Release, FunctionsAlreadyHomeNeedNothing) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 6);
    GroupPlan g = plan_release(h.topo, h.use, 6, {{A("0000:01:00.0"), "nvidia"}});
    EXPECT_EQ(g.action, Action::Released);
    EXPECT_TRUE(g.writes().empty());
}

TEST(PlanJson, HasExactlyTheDesignShape) {
    Host h;
    h.fn("0000:00:1c.0", 0x8086, 0xa110, 0x060400, "pcieport", 8);
    h.fn("0000:02:00.0", 0x10de, 0x2331, 0x030200, "", 8);
    h.allow(0x10de, 0x2331, "nvidia.com/GH100");
    std::string json = plan_to_json(h.plan(), false);
    EXPECT_EQ(json,
              R"({"iommu":true,"groups":[{"group":8,"action":"bind","reason":null,"blockers":[],)"
              R"("devices":[{"address":"0000:00:1c.0","vendor":"8086","device":"a110","class":"060400",)"
              R"("driver":"pcieport","target":null,"role":"bridge","resource_name":null},)"
              R"({"address":"0000:02:00.0","vendor":"10de","device":"2331","class":"030200",)"
              R"("driver":null,"target":"vfio-pci","role":"allowlisted","resource_name":"nvidia.com/GH100"}],)"
              R"("writes":[{"path":"sys/bus/pci/devices/0000:02:00.0/driver_override","value":"vfio-pci"},)"
              R"({"path":"sys/bus/pci/drivers_probe","value":"0000:02:00.0"}]}]})");
}

TEST(PlanJson, QuotesHostileBytes) {
    EXPECT_EQ(json_quote("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
    EXPECT_EQ(json_quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
    EXPECT_EQ(json_quote("\xff\xc3"), R"("\ufffd\ufffd")");
}

// The state model (core/state.hpp): one closed set of reasons that clients read back exactly,
// and one mapping from each plan action and each execution outcome to the published state.
TEST(StateModel, EveryReasonRoundTripsAndNothingElseParses) {
    for (int i = 0; i <= static_cast<int>(Reason::Drift); ++i) {
        auto r = static_cast<Reason>(i);
        EXPECT_EQ(parse_reason(to_string(r)), r) << to_string(r);
    }
    EXPECT_EQ(parse_reason("write-failed"), Reason::WriteFailed);
    EXPECT_EQ(parse_reason("Drift"), std::nullopt);
    EXPECT_EQ(parse_reason("in-use-vfio: group 3"), std::nullopt);
}

TEST(StateModel, ActionsAndOutcomesMapToTheirPublishedStates) {
    EXPECT_EQ(planned_state(Action::Bind), GroupState::Pending);
    EXPECT_EQ(planned_state(Action::Bound), GroupState::Bound);
    EXPECT_EQ(planned_state(Action::Refuse), GroupState::Refused);
    EXPECT_EQ(planned_state(Action::Released), GroupState::Released);
    EXPECT_EQ(published_state(Outcome::Stuck), GroupState::Failed);
    EXPECT_EQ(published_state(Outcome::RolledBack), GroupState::Pending);
    EXPECT_STREQ(to_string(Outcome::RolledBack), "rolled-back");  // vfioctl apply prints it
}

// One rule decides which [[device]] entry governs a function, for the planner, the service's
// reload comparison and the udev helper alike.
TEST(GoverningEntry, FirstMatchWinsAndLaterMatchesOnlyWarn) {
    Config c;
    DeviceEntry vendor_wide;
    vendor_wide.selector = Selector{0x10de, std::nullopt};
    vendor_wide.driver = "nvgrace_gpu_vfio_pci";
    DeviceEntry exact;
    exact.selector = Selector{0x10de, 0x2331};
    c.devices = {vendor_wide, exact};
    PciFunction fn;
    fn.address = A("0000:01:00.0");
    fn.vendor = 0x10de;
    fn.device = 0x2331;
    std::vector<std::string> warnings;
    const DeviceEntry* e = governing_entry(c, fn, &warnings);
    ASSERT_EQ(e, &c.devices[0]);
    EXPECT_EQ(warnings.size(), 1u);
    EXPECT_EQ(governing_entry(c, fn), &c.devices[0]);
    fn.vendor = 0x8086;
    EXPECT_EQ(governing_entry(c, fn), nullptr);
    EXPECT_FALSE(protected_by(c, fn));
    ProtectEntry p;
    p.address = fn.address;
    c.protects.push_back(p);
    EXPECT_TRUE(protected_by(c, fn));
}

// DESIGN §4's order: in-use-device after in-use-network, before sriov-pf; a companion counts.
TEST(Planner, HeldCompanionNodeRefusesTheGroupAfterNetworkBeforeSriov) {
    Host h;
    h.fn("0000:01:00.0", 0x10de, 0x2331, 0x030200, "nvidia", 7);
    h.fn("0000:01:00.1", 0x10de, 0x22ba, 0x040300, "snd_hda_intel", 7);
    h.allow(0x10de, 0x2331);
    h.use.device[A("0000:01:00.1")] = {"/dev/snd/controlC1 is open by pid 812 (pipewire)"};
    GroupPlan g = h.plan().groups.at(0);
    EXPECT_EQ(g.reason, Reason::InUseDevice);
    EXPECT_STREQ(to_string(g.reason), "in-use-device");
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{A("0000:01:00.1")});
    EXPECT_EQ(g.details.at(0), "0000:01:00.1: /dev/snd/controlC1 is open by pid 812 (pipewire)");
    EXPECT_TRUE(g.writes().empty());

    h.use.network[A("0000:01:00.0")] = {"eth0 carries a route"};
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::InUseNetwork);
    h.use.network.clear();
    h.topo.functions[A("0000:01:00.0")].sriov_numvfs = 4;
    EXPECT_EQ(h.plan().groups.at(0).reason, Reason::InUseDevice);
}

// The published names of the closed sets read back to the same value, and nothing else reads
// as one of them: the client and the plugin decode through these, never through literals.
TEST(PublishedNames, RoleAndStateRoundTripAndRejectTheUnknown) {
    for (Role r : {Role::Allowlisted, Role::Companion, Role::Bridge})
        EXPECT_EQ(parse_role(to_string(r)), r);
    for (GroupState s : {GroupState::Bound, GroupState::Pending, GroupState::Refused,
                         GroupState::Failed, GroupState::Released})
        EXPECT_EQ(parse_group_state(to_string(s)), s);
    for (const char* odd : {"", "Allowlisted", "bridge ", "?", "companion\n"}) {
        EXPECT_EQ(parse_role(odd), std::nullopt) << odd;
        EXPECT_EQ(parse_group_state(odd), std::nullopt) << odd;
    }
}
