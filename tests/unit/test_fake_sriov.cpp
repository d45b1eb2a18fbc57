// The fake kernel models SR-IOV as Linux 6.1 does (drivers/pci/iov.c; issue 24's QEMU NVMe on
// the real kernel shows the same): writing a PF's sriov_numvfs creates and removes VFs with
// their links, IOMMU groups, uevents and probes, and refuses bad writes with the kernel's errno.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cerrno>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "core/plan.hpp"
#include "fake_kernel.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

using namespace vfiod;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;
using vfiod::test::kSriovPf;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

const char* kVf0 = "0000:02:00.1";  // PF + offset 1
const char* kVf1 = "0000:02:00.2";  // PF + offset 1 + stride 1
const std::string kDevices = "sys/bus/pci/devices/";

// issue 24's guest: the PF on nvme, its uevents recorded as "action BDF".
struct SriovHost {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    std::mutex m;
    std::vector<std::string> events;

    SriovHost() {
        test::build_sriov_host(tree);
        start();
    }
    // A (re)started kernel over the same tree.
    void start() {
        kernel = std::make_unique<FakeKernel>(tree);
        kernel->on_uevent([this](const std::string& action, const std::string& bdf) {
            std::lock_guard lock(m);
            events.push_back(action + " " + bdf);
        });
    }
    std::vector<std::string> take_events() {
        std::lock_guard lock(m);
        return std::exchange(events, {});
    }
    int write(const std::string& attr, const std::string& value,
              const std::string& bdf = kSriovPf) {
        return kernel->write(kDevices + bdf + "/" + attr, value);
    }
    std::string read(const std::string& attr, const std::string& bdf = kSriovPf) const {
        return kernel->read(kDevices + bdf + "/" + attr).value_or("(absent)");
    }
    std::string link(const std::string& bdf, const std::string& name) const {
        return kernel->link_name(kDevices + bdf + "/" + name).value_or("");
    }
    std::string driver(const std::string& bdf) const { return link(bdf, "driver"); }
    std::string group(const std::string& bdf) const { return link(bdf, "iommu_group"); }
    bool exists(const std::string& bdf) const { return kernel->exists(kDevices + bdf); }
};

Plan plan_of(const HostFs& fs, const char* toml) {
    ConfigResult cr = parse_config(toml, "test.toml");
    EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
    Snapshot s = read_snapshot(fs);
    return make_plan(s.topology, s.use, cr.config ? *cr.config : Config{});
}

const GroupPlan* group_plan(const Plan& p, unsigned n) {
    for (const auto& g : p.groups)
        if (g.group == n)
            return &g;
    return nullptr;
}

}  // namespace

// With autoprobe 0 (what vfiod writes first), two VFs appear: the PF's vendor and the VF device
// ID, physfn and virtfn links, one new IOMMU group each, no driver; add and change uevents per
// VF, then a change on the PF.
TEST(FakeSriov, CreatesDriverlessVfsWithLinksGroupsAndUevents) {
    SriovHost h;
    EXPECT_EQ(h.read("sriov_totalvfs"), "2");
    EXPECT_EQ(h.read("sriov_numvfs"), "0");
    EXPECT_EQ(h.read("sriov_drivers_autoprobe"), "1");
    EXPECT_EQ(h.read("sriov_vf_device"), "10");  // printed with %x, as the kernel does
    ASSERT_EQ(h.write("sriov_drivers_autoprobe", "0"), 0);
    EXPECT_EQ(h.read("sriov_drivers_autoprobe"), "0");
    ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);

    EXPECT_EQ(h.read("sriov_numvfs"), "2");
    EXPECT_EQ(h.driver(kSriovPf), "nvme");
    for (const char* vf : {kVf0, kVf1}) {
        SCOPED_TRACE(vf);
        ASSERT_TRUE(h.exists(vf));
        EXPECT_EQ(h.read("vendor", vf), "0x1b36");
        EXPECT_EQ(h.read("device", vf), "0x0010");
        EXPECT_EQ(h.read("class", vf), "0x010802");
        EXPECT_EQ(h.link(vf, "physfn"), kSriovPf);
        EXPECT_EQ(h.driver(vf), "");
        EXPECT_EQ(h.read("sriov_numvfs", vf), "(absent)");  // a VF is no PF
    }
    EXPECT_EQ(h.link(kSriovPf, "virtfn0"), kVf0);
    EXPECT_EQ(h.link(kSriovPf, "virtfn1"), kVf1);
    // Beside the PF, under its root port, as the kernel parents VFs.
    EXPECT_EQ(h.kernel->resolve(kDevices + kVf0).value_or(""),
              "sys/devices/pci0000:00/0000:00:04.0/" + std::string(kVf0));
    EXPECT_EQ(h.group(kVf0), "8");
    EXPECT_EQ(h.group(kVf1), "9");
    EXPECT_EQ(h.kernel->list("sys/kernel/iommu_groups/8/devices"),
              std::vector<std::string>{kVf0});
    EXPECT_EQ(h.kernel->list("sys/kernel/iommu_groups/9/devices"),
              std::vector<std::string>{kVf1});
    EXPECT_THAT(h.take_events(),
                ElementsAre("add 0000:02:00.1", "change 0000:02:00.1", "add 0000:02:00.2",
                            "change 0000:02:00.2", "change 0000:02:00.0"));
}

// pci_device_can_probe: the VFs carry the PF's own ID, which nvme matches; they reach nvme on
// creation only while autoprobe is 1. With 0, only a driver_override lets a probe through, which
// is how vfiod moves them to vfio-pci.
TEST(FakeSriov, AutoprobeDecidesWhetherNewVfsReachTheirHostDriver) {
    SriovHost on;
    ASSERT_EQ(on.write("sriov_numvfs", "2"), 0);
    EXPECT_EQ(on.driver(kVf0), "nvme");
    EXPECT_EQ(on.driver(kVf1), "nvme");
    EXPECT_THAT(on.take_events(),
                ElementsAre("add 0000:02:00.1", "change 0000:02:00.1", "bind 0000:02:00.1",
                            "add 0000:02:00.2", "change 0000:02:00.2", "bind 0000:02:00.2",
                            "change 0000:02:00.0"));

    SriovHost off;
    ASSERT_EQ(off.write("sriov_drivers_autoprobe", "0"), 0);
    ASSERT_EQ(off.write("sriov_numvfs", "2"), 0);
    EXPECT_EQ(off.kernel->write("sys/bus/pci/drivers_probe", kVf0), 0);  // succeeds, binds nothing
    EXPECT_EQ(off.kernel->write("sys/bus/pci/drivers/nvme/bind", kVf0), ENODEV);
    EXPECT_EQ(off.driver(kVf0), "");
    // Turning autoprobe on later lets an explicit probe through (the kernel reads it per probe).
    ASSERT_EQ(off.write("sriov_drivers_autoprobe", "1"), 0);
    EXPECT_EQ(off.kernel->write("sys/bus/pci/drivers_probe", kVf1), 0);
    EXPECT_EQ(off.driver(kVf1), "nvme");
    ASSERT_EQ(off.write("sriov_drivers_autoprobe", "0"), 0);
    off.take_events();
    // vfiod's own order: override, probe; the VF's group node appears.
    ASSERT_EQ(off.write("driver_override", "vfio-pci", kVf0), 0);
    ASSERT_EQ(off.kernel->write("sys/bus/pci/drivers_probe", kVf0), 0);
    EXPECT_EQ(off.driver(kVf0), "vfio-pci");
    EXPECT_TRUE(off.kernel->exists("dev/vfio/8"));
    EXPECT_THAT(off.take_events(), ElementsAre("bind 0000:02:00.1"));
}

// The plan `vfioctl plan` makes of the new tree: the VFs are functions with physfn set, each the
// only member of its group; an allowlist naming the PF's own ID binds them, with an unbind of
// nvme first when autoprobe let it in, and refuses the PF (sriov-pf).
TEST(FakeSriov, PlanAndTopologySeeTheVfsWithTheirPf) {
    const char* toml = "[[device]]\nselector = \"1b36:0010\"\n";
    for (const char* autoprobe : {"0", "1"}) {
        SCOPED_TRACE(std::string("autoprobe ") + autoprobe);
        SriovHost h;
        ASSERT_EQ(h.write("sriov_drivers_autoprobe", autoprobe), 0);
        ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);
        Topology topo = read_snapshot(*h.kernel).topology;
        const PciFunction* pf = topo.find(*PciAddress::parse(kSriovPf));
        ASSERT_NE(pf, nullptr);
        EXPECT_EQ(pf->sriov_numvfs, 2u);
        EXPECT_FALSE(pf->physfn.has_value());
        for (const char* vf : {kVf0, kVf1}) {
            const PciFunction* f = topo.find(*PciAddress::parse(vf));
            ASSERT_NE(f, nullptr) << vf;
            EXPECT_EQ(f->physfn, PciAddress::parse(kSriovPf)) << vf;
            EXPECT_EQ(f->driver, autoprobe[0] == '1' ? "nvme" : "") << vf;
        }
        Plan p = plan_of(*h.kernel, toml);
        ASSERT_NE(group_plan(p, 7), nullptr);
        EXPECT_EQ(group_plan(p, 7)->reason, Reason::SriovPf);
        for (unsigned g : {8u, 9u}) {
            const GroupPlan* gp = group_plan(p, g);
            ASSERT_NE(gp, nullptr) << g;
            EXPECT_EQ(gp->action, Action::Bind) << g;
            bool unbinds = false;
            for (const auto& w : gp->writes())
                unbinds = unbinds || w.kind == Write::Kind::Unbind;
            EXPECT_EQ(unbinds, autoprobe[0] == '1') << g;
        }
    }
}

// Writing 0 removes the VFs as any device goes: driver unbound, then removed, VF 0 first; links,
// groups and /dev/vfio nodes go with them, and their group numbers come back on the next create.
TEST(FakeSriov, ZeroRemovesTheVfsAndGrowingGoesThroughIt) {
    SriovHost h;
    ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);  // autoprobe 1: both on nvme
    ASSERT_EQ(h.write("driver_override", "vfio-pci", kVf1), 0);
    ASSERT_EQ(h.write("driver/unbind", kVf1, kVf1), 0);
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers_probe", kVf1), 0);
    ASSERT_TRUE(h.kernel->exists("dev/vfio/9"));
    h.take_events();

    EXPECT_EQ(h.write("sriov_numvfs", "1"), EBUSY);  // "Disable before enabling"
    EXPECT_TRUE(h.exists(kVf1));
    ASSERT_EQ(h.write("sriov_numvfs", "0"), 0);
    EXPECT_THAT(h.take_events(), ElementsAre("unbind 0000:02:00.1", "remove 0000:02:00.1",
                                             "unbind 0000:02:00.2", "remove 0000:02:00.2"));
    EXPECT_EQ(h.read("sriov_numvfs"), "0");
    EXPECT_FALSE(h.exists(kVf0));
    EXPECT_FALSE(h.exists(kVf1));
    EXPECT_FALSE(h.kernel->exists("sys/devices/pci0000:00/0000:00:04.0/" + std::string(kVf0)));
    EXPECT_EQ(h.link(kSriovPf, "virtfn0"), "");
    EXPECT_EQ(h.link(kSriovPf, "virtfn1"), "");
    EXPECT_FALSE(h.kernel->exists("sys/kernel/iommu_groups/8"));
    EXPECT_FALSE(h.kernel->exists("sys/kernel/iommu_groups/9"));
    EXPECT_FALSE(h.kernel->exists("dev/vfio/9"));
    EXPECT_EQ(h.driver(kSriovPf), "nvme");

    ASSERT_EQ(h.write("sriov_numvfs", "1"), 0);
    EXPECT_TRUE(h.exists(kVf0));
    EXPECT_FALSE(h.exists(kVf1));
    EXPECT_EQ(h.group(kVf0), "8");
    EXPECT_EQ(h.read("driver_override", kVf0), "(null)");  // a new device, no old override
}

// sriov_numvfs_store's checks, in its order: the number (EINVAL), the total (ERANGE), an
// unchanged count (success, driver or not), the PF driver and its sriov_configure (ENOENT), a
// change between two non-zero counts (EBUSY). Read-only attributes refuse the open (EACCES). A
// refused write changes nothing and raises no uevent.
TEST(FakeSriov, RefusesBadWritesAsTheKernelDoes) {
    SriovHost h;
    for (const char* bad : {"abc", "-1", "2x", "70000", " 1", "1\n\n", "0x", "08"})
        EXPECT_EQ(h.write("sriov_numvfs", bad), EINVAL) << bad;
    EXPECT_EQ(h.write("sriov_numvfs", "3"), ERANGE);
    EXPECT_EQ(h.write("sriov_numvfs", "0"), 0);  // unchanged
    for (const char* ro : {"sriov_totalvfs", "sriov_offset", "sriov_stride", "sriov_vf_device"})
        EXPECT_EQ(h.write(ro, "4"), EACCES) << ro;
    EXPECT_EQ(h.read("sriov_totalvfs"), "2");
    EXPECT_EQ(h.write("sriov_drivers_autoprobe", "maybe"), EINVAL);
    EXPECT_EQ(h.read("sriov_drivers_autoprobe"), "1");
    EXPECT_EQ(h.write("sriov_numvfs", "1", "0000:00:02.0"), ENOENT);  // not a PF: no attribute

    // Without a PF driver: ENOENT, but the number is still checked first.
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers/nvme/unbind", kSriovPf), 0);
    h.take_events();
    EXPECT_EQ(h.write("sriov_numvfs", "1"), ENOENT);
    EXPECT_EQ(h.write("sriov_numvfs", "3"), ERANGE);
    EXPECT_EQ(h.write("sriov_numvfs", "0"), 0);
    // vfio-pci as the PF driver refuses too (no enable_sriov); so does a driver without
    // sriov_configure.
    ASSERT_EQ(h.write("driver_override", "vfio-pci"), 0);
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers_probe", kSriovPf), 0);
    ASSERT_EQ(h.driver(kSriovPf), "vfio-pci");
    EXPECT_EQ(h.write("sriov_numvfs", "1"), ENOENT);
    ASSERT_EQ(h.write("driver_override", "\n"), 0);
    ASSERT_EQ(h.write("driver/unbind", kSriovPf), 0);
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers_probe", kSriovPf), 0);
    ASSERT_EQ(h.driver(kSriovPf), "nvme");
    h.kernel->lacks_sriov_configure("nvme");
    EXPECT_EQ(h.write("sriov_numvfs", "1"), ENOENT);
    EXPECT_EQ(h.read("sriov_numvfs"), "0");
    EXPECT_FALSE(h.exists(kVf0));
    EXPECT_THAT(h.take_events(),
                ElementsAre("bind 0000:02:00.0", "unbind 0000:02:00.0", "bind 0000:02:00.0"));

    // kstrtou16's other spellings and kstrtobool's are accepted.
    SriovHost k;
    EXPECT_EQ(k.write("sriov_drivers_autoprobe", "off\n"), 0);
    EXPECT_EQ(k.read("sriov_drivers_autoprobe"), "0");
    EXPECT_EQ(k.write("sriov_numvfs", "0x2\n"), 0);
    EXPECT_EQ(k.read("sriov_numvfs"), "2");
    EXPECT_EQ(k.write("sriov_numvfs", "+02"), 0);  // octal 2: unchanged
    EXPECT_EQ(k.write("sriov_numvfs", "1"), EBUSY);
    EXPECT_EQ(k.read("sriov_numvfs"), "2");
}

// VF i's address is the PF's routing ID + offset + stride * i, spilling onto the next bus; the
// VF device ID comes from sriov_vf_device, and a VF ID of its own matches no PF driver unless
// the test names its driver (iavf for an i40e PF).
TEST(FakeSriov, VfAddressesAndDriversFollowThePf) {
    FakeTree t;
    t.enable_iommu();
    auto pf = FakeTree::pci("0000:05:00.0", "8086", "1572", "020000", "i40e", 20);
    pf.sriov_totalvfs = 3;
    pf.sriov_vf_device = "154c";
    pf.sriov_offset = 0xfe;
    pf.sriov_stride = 1;
    pf.numa_node = 1;
    t.add_function(pf);
    t.add_driver("iavf");
    FakeKernel k(t);
    ASSERT_EQ(k.write("sys/bus/pci/devices/0000:05:00.0/sriov_numvfs", "1"), 0);
    EXPECT_EQ(k.read("sys/bus/pci/devices/0000:05:1f.6/device").value_or(""), "0x154c");
    EXPECT_EQ(k.read("sys/bus/pci/devices/0000:05:1f.6/numa_node").value_or(""), "1");
    EXPECT_EQ(k.link_name("sys/bus/pci/devices/0000:05:1f.6/driver").value_or(""), "");
    ASSERT_EQ(k.write("sys/bus/pci/devices/0000:05:00.0/sriov_numvfs", "0"), 0);

    k.set_vf_driver("0000:05:00.0", "iavf");
    ASSERT_EQ(k.write("sys/bus/pci/devices/0000:05:00.0/sriov_numvfs", "3"), 0);
    for (const char* vf : {"0000:05:1f.6", "0000:05:1f.7", "0000:06:00.0"}) {
        EXPECT_EQ(k.link_name(std::string("sys/bus/pci/devices/") + vf + "/driver").value_or(""),
                  "iavf")
            << vf;
        EXPECT_EQ(k.link_name(std::string("sys/bus/pci/devices/") + vf + "/physfn").value_or(""),
                  "0000:05:00.0")
            << vf;
    }
    EXPECT_EQ(k.link_name("sys/bus/pci/devices/0000:05:00.0/virtfn2").value_or(""),
              "0000:06:00.0");
}

// A surprise-removed PF takes its VFs with it, VFs first; a hot-added PF is probed like any new
// device and can make VFs at once.
TEST(FakeSriov, HotPlugOfAPfCarriesItsVfs) {
    SriovHost h;
    ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);
    h.take_events();
    h.kernel->remove_function(kSriovPf);
    EXPECT_THAT(h.take_events(),
                ElementsAre("unbind 0000:02:00.2", "remove 0000:02:00.2", "unbind 0000:02:00.1",
                            "remove 0000:02:00.1", "unbind 0000:02:00.0", "remove 0000:02:00.0"));
    EXPECT_FALSE(h.exists(kVf0));
    EXPECT_FALSE(h.kernel->exists("sys/kernel/iommu_groups/7"));

    auto pf = FakeTree::pci(kSriovPf, "1b36", "0010", "010802", "nvme", 7, "0000:00:04.0");
    pf.sriov_totalvfs = 2;
    h.kernel->hot_add(pf);
    EXPECT_THAT(h.take_events(), ElementsAre("add 0000:02:00.0", "bind 0000:02:00.0"));
    EXPECT_EQ(h.driver(kSriovPf), "nvme");
    ASSERT_EQ(h.write("sriov_drivers_autoprobe", "0"), 0);
    ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);
    EXPECT_EQ(h.link(kVf1, "physfn"), kSriovPf);
    EXPECT_EQ(h.driver(kVf1), "");
}

// The PF's state is the tree: a restarted kernel (a daemon restarted over the same host) sees
// the VFs, still knows what they match, and removes them.
TEST(FakeSriov, ARestartedKernelKeepsTheVfs) {
    SriovHost h;
    ASSERT_EQ(h.write("sriov_drivers_autoprobe", "0"), 0);
    ASSERT_EQ(h.write("sriov_numvfs", "2"), 0);
    h.start();
    EXPECT_EQ(h.write("sriov_numvfs", "2"), 0);
    EXPECT_EQ(h.write("sriov_numvfs", "1"), EBUSY);
    ASSERT_EQ(h.write("sriov_drivers_autoprobe", "1"), 0);
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers_probe", kVf0), 0);
    EXPECT_EQ(h.driver(kVf0), "nvme");
    h.take_events();
    ASSERT_EQ(h.write("sriov_numvfs", "0"), 0);
    EXPECT_THAT(h.take_events(), ElementsAre("unbind 0000:02:00.1", "remove 0000:02:00.1",
                                             "remove 0000:02:00.2"));
}

// The fault injection every write has works on sriov_numvfs too: a failed write changes
// nothing; a blocked one holds the PF's attributes until it returns, then completes (some PF
// drivers take seconds per VF; a VF open by a VM holds its removal).
TEST(FakeSriov, FaultsInjectOnSriovWritesLikeAnyOther) {
    SriovHost h;
    const std::string numvfs = kDevices + kSriovPf + "/sriov_numvfs";
    h.kernel->fail_path(numvfs, EIO);
    EXPECT_EQ(h.write("sriov_numvfs", "2"), EIO);
    EXPECT_FALSE(h.exists(kVf0));
    EXPECT_THAT(h.take_events(), IsEmpty());

    h.kernel->block_path(numvfs);
    int result = -1;
    std::thread writer([&] { result = h.write("sriov_numvfs", "2"); });
    while (h.kernel->blocked_now() == 0)
        std::this_thread::yield();
    EXPECT_FALSE(h.exists(kVf0));
    h.kernel->unblock();
    writer.join();
    EXPECT_EQ(result, 0);
    EXPECT_EQ(h.read("sriov_numvfs"), "2");
    EXPECT_EQ(h.take_events().size(), 7u);  // add, change, bind per VF; change on the PF
}
