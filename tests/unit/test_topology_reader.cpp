#include "io/topology_reader.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/strings.hpp"
#include "fake_tree.hpp"
#include "io/host_fs.hpp"

using namespace vfiod;
using test::FakeTree;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

namespace {

PciAddress A(const char* s) { return *PciAddress::parse(s); }


// A root port with a GPU + HDMI audio pair behind it, and an SR-IOV NIC with one VF.
void build_host(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(FakeTree::pci("0000:00:01.0", "8086", "1901", "060400", "pcieport", 1));
    auto gpu = FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "nvidia", 2, "0000:00:01.0");
    gpu.boot_vga = 0;
    gpu.numa_node = 1;
    t.add_function(gpu);
    auto audio = FakeTree::pci("0000:01:00.1", "10de", "22a3", "040300", "", 2, "0000:00:01.0");
    audio.driver_override = "vfio-pci";
    t.add_function(audio);
    auto pf = FakeTree::pci("0000:00:03.0", "8086", "1521", "020000", "igb", 3);
    pf.sriov_totalvfs = 7;
    pf.sriov_numvfs = 1;
    t.add_function(pf);
    auto vf = FakeTree::pci("0000:00:03.4", "8086", "1520", "020000", "igbvf", 4);
    vf.physfn = "0000:00:03.0";
    t.add_function(vf);
    auto vga = FakeTree::pci("0000:00:02.0", "1234", "1111", "030000", "bochs-drm", 5);
    vga.boot_vga = 1;
    t.add_function(vga);
}

}  // namespace

TEST(TopologyReader, ReadsIdsClassDriverOverrideAndGroups) {
    FakeTree t;
    build_host(t);
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);

    EXPECT_THAT(warnings, IsEmpty());
    EXPECT_TRUE(topo.iommu_enabled);
    ASSERT_EQ(topo.functions.size(), 6u);

    const PciFunction* gpu = topo.find(A("0000:01:00.0"));
    ASSERT_NE(gpu, nullptr);
    EXPECT_EQ(gpu->vendor, 0x10de);
    EXPECT_EQ(gpu->device, 0x2331);
    EXPECT_EQ(gpu->subsystem_vendor, 0x10de);
    EXPECT_EQ(gpu->class_code, 0x030200u);
    EXPECT_EQ(gpu->driver, "nvidia");
    EXPECT_EQ(gpu->driver_override, "");  // "(null)" in sysfs
    EXPECT_EQ(gpu->iommu_group, 2u);
    EXPECT_EQ(gpu->numa_node, 1);
    EXPECT_FALSE(gpu->boot_vga);
    EXPECT_FALSE(gpu->is_bridge());
    EXPECT_EQ(gpu->devpath, "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    EXPECT_EQ(gpu->devpath, t.devpath("0000:01:00.0"));

    const PciFunction* audio = topo.find(A("0000:01:00.1"));
    ASSERT_NE(audio, nullptr);
    EXPECT_EQ(audio->driver, "");
    EXPECT_EQ(audio->driver_override, "vfio-pci");
    EXPECT_EQ(audio->numa_node, -1);

    const PciFunction* port = topo.find(A("0000:00:01.0"));
    ASSERT_NE(port, nullptr);
    EXPECT_TRUE(port->is_bridge());
    EXPECT_EQ(port->driver, "pcieport");

    EXPECT_TRUE(topo.find(A("0000:00:02.0"))->boot_vga);

    EXPECT_THAT(topo.groups[2], ElementsAre(A("0000:01:00.0"), A("0000:01:00.1")));
    EXPECT_THAT(topo.groups[1], ElementsAre(A("0000:00:01.0")));
    EXPECT_EQ(topo.groups.size(), 5u);
    EXPECT_TRUE(topo.drivers.count("vfio-pci"));
    EXPECT_TRUE(topo.drivers.count("igb"));
    EXPECT_FALSE(topo.drivers.count("e1000e"));
}

TEST(TopologyReader, SriovPfAndVf) {
    FakeTree t;
    build_host(t);
    KernelHostFs fs(t.root());
    Topology topo = read_topology(fs, nullptr);
    const PciFunction* pf = topo.find(A("0000:00:03.0"));
    const PciFunction* vf = topo.find(A("0000:00:03.4"));
    ASSERT_NE(pf, nullptr);
    ASSERT_NE(vf, nullptr);
    EXPECT_EQ(pf->sriov_numvfs, 1u);
    EXPECT_FALSE(pf->physfn.has_value());
    EXPECT_EQ(vf->physfn, A("0000:00:03.0"));
    EXPECT_EQ(vf->sriov_numvfs, 0u);
    EXPECT_EQ(vf->driver, "igbvf");
}

TEST(TopologyReader, NoIommu) {
    FakeTree t;
    t.add_function(FakeTree::pci("0000:00:02.0", "8086", "10d3", "020000", "e1000e", std::nullopt));
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_THAT(warnings, IsEmpty());
    EXPECT_FALSE(topo.iommu_enabled);
    EXPECT_TRUE(topo.groups.empty());
    ASSERT_NE(topo.find(A("0000:00:02.0")), nullptr);
    EXPECT_FALSE(topo.find(A("0000:00:02.0"))->iommu_group.has_value());
}

TEST(TopologyReader, GroupsAloneMeanIommuEnabled) {
    FakeTree t;
    t.add_function(FakeTree::pci("0000:00:02.0", "8086", "10d3", "020000", "e1000e", 7));
    KernelHostFs fs(t.root());
    EXPECT_TRUE(read_topology(fs, nullptr).iommu_enabled);
}

TEST(TopologyReader, GarbageVendorSkipsThatFunctionWithAWarning) {
    FakeTree t;
    build_host(t);
    t.write_file(t.devpath("0000:01:00.1") + "/vendor", "nvidia\x1b[2J\n");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.find(A("0000:01:00.1")), nullptr);
    EXPECT_NE(topo.find(A("0000:01:00.0")), nullptr);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("0000:01:00.1"));
    EXPECT_THAT(warnings[0], HasSubstr("vendor"));
    EXPECT_THAT(warnings[0], HasSubstr("\\x1b"));  // the escape byte is shown, not emitted
    // The group still lists the skipped member, so nobody can bind the group half.
    EXPECT_THAT(topo.groups[2], ElementsAre(A("0000:01:00.0"), A("0000:01:00.1")));
}

// An mdev's own IOMMU group lists its UUID, not a PCI address (DESIGN §12): no warning for it
// (a host with vGPUs would log one per mdev on every read), and a non-address that is no UUID
// still gets one.
TEST(TopologyReader, AnMdevsGroupMemberIsNoOddEntry) {
    FakeTree t;
    build_host(t);
    t.symlink("sys/kernel/iommu_groups/9/devices/6d966230-f3a1-5551-97f3-4aec0da0213a",
              "../../../../devices/virtual/mbochs/mbochs/6d966230-f3a1-5551-97f3-4aec0da0213a");
    t.symlink("sys/kernel/iommu_groups/9/devices/not-a-device", "../../../../devices/x");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    read_topology(fs, &warnings);
    ASSERT_EQ(warnings.size(), 1u) << testing::PrintToString(warnings);
    EXPECT_THAT(warnings[0], HasSubstr("not-a-device"));
}

TEST(TopologyReader, GarbageGroupLinkAndNumaSkip) {
    FakeTree t;
    build_host(t);
    t.symlink(t.devpath("0000:00:03.4") + "/iommu_group", "../../../kernel/iommu_groups/x1");
    t.write_file("sys/kernel/iommu_groups/x1/type", "DMA\n");
    t.write_file(t.devpath("0000:00:02.0") + "/numa_node", "one\n");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.find(A("0000:00:03.4")), nullptr);
    EXPECT_EQ(topo.find(A("0000:00:02.0")), nullptr);
    ASSERT_EQ(warnings.size(), 3u);  // both functions and the odd group directory
    EXPECT_THAT(warnings, ::testing::Contains(HasSubstr("0000:00:03.4: iommu_group")));
    EXPECT_THAT(warnings, ::testing::Contains(HasSubstr("0000:00:02.0: numa_node")));
}

TEST(TopologyReader, DanglingBusLinkIsSkippedWithAWarning) {
    FakeTree t;
    build_host(t);
    t.symlink("sys/bus/pci/devices/0000:05:00.0", "../../../devices/pci0000:00/0000:05:00.0");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.find(A("0000:05:00.0")), nullptr);
    EXPECT_EQ(topo.functions.size(), 6u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("0000:05:00.0"));
    EXPECT_THAT(warnings[0], HasSubstr("points nowhere"));
}

TEST(TopologyReader, LinkLeavingTheRootIsRejected) {
    FakeTree t;
    build_host(t);
    t.symlink("sys/bus/pci/devices/0000:05:00.0", "../../../../../../../../../../../../sys/devices");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.find(A("0000:05:00.0")), nullptr);
    EXPECT_THAT(warnings, ElementsAre(HasSubstr("0000:05:00.0")));
}

TEST(TopologyReader, BadBdfNamesNeverReachAPath) {
    FakeTree t;
    build_host(t);
    const std::string target = "../../../devices/pci0000:00/0000:00:01.0";
    t.symlink("sys/bus/pci/devices/0000:00:1F.0", target);    // upper case
    t.symlink("sys/bus/pci/devices/0000:00:01.0 ", target);   // trailing space
    t.symlink("sys/kernel/iommu_groups/2/devices/..x", target);
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.functions.size(), 6u);
    EXPECT_EQ(warnings.size(), 3u);
    EXPECT_THAT(warnings, ::testing::Contains(HasSubstr("0000:00:1F.0")));
    EXPECT_THAT(topo.groups[2], ElementsAre(A("0000:01:00.0"), A("0000:01:00.1")));
}

TEST(TopologyReader, VmdDomainAboveFfff) {
    FakeTree t;
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:00:0e.0", "8086", "467f", "010400", "vmd", 9));
    t.add_function(FakeTree::pci("10000:e0:1d.0", "8086", "a0b0", "060400", "pcieport", 9, "0000:00:0e.0"));
    t.add_function(FakeTree::pci("10000:e1:00.0", "144d", "a808", "010802", "nvme", 9, "10000:e0:1d.0"));
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_THAT(warnings, IsEmpty());
    const PciFunction* nvme = topo.find(A("10000:e1:00.0"));
    ASSERT_NE(nvme, nullptr);
    EXPECT_EQ(nvme->address.domain, 0x10000u);
    EXPECT_EQ(nvme->devpath,
              "sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0");
    EXPECT_EQ(topo.groups[9].size(), 3u);
}

TEST(TopologyReader, ReadFunctionFollowsBindAndRemoval) {
    FakeTree t;
    build_host(t);
    KernelHostFs fs(t.root());
    t.bind("0000:01:00.0", "vfio-pci");
    auto f = read_function(fs, A("0000:01:00.0"), nullptr);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->driver, "vfio-pci");
    t.unbind("0000:01:00.0");
    EXPECT_EQ(read_function(fs, A("0000:01:00.0"), nullptr)->driver, "");

    std::vector<std::string> warnings;
    t.remove_function("0000:01:00.0");
    EXPECT_FALSE(read_function(fs, A("0000:01:00.0"), &warnings).has_value());
    EXPECT_THAT(warnings, IsEmpty());  // gone is not odd
}

// A function removed while it is being read (hot-unplug, or a VF whose PF drops sriov_numvfs):
// whichever attribute it vanishes after, it is gone, not odd. The reader may hold the function's
// directory open meanwhile; the answer must be the same as for a removal before the read.
class VanishingHost : public KernelHostFs {
public:
    VanishingHost(FakeTree& t, std::string bdf, std::string after)
        : KernelHostFs(t.root()), tree_(t), bdf_(std::move(bdf)), after_(std::move(after)) {}
    std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                    std::string* why = nullptr,
                                    const Dir* in = nullptr) const override {
        auto v = KernelHostFs::read(rel, max_bytes, why, in);
        if (!removed_ && rel.size() > after_.size() + 1 &&
            rel.substr(rel.size() - after_.size() - 1) == "/" + after_) {
            removed_ = true;
            tree_.remove_function(bdf_);
        }
        return v;
    }

private:
    FakeTree& tree_;
    std::string bdf_, after_;
    mutable bool removed_ = false;
};

TEST(TopologyReader, AFunctionRemovedMidReadIsGoneNotOdd) {
    for (const char* bdf : {"0000:01:00.0", "0000:00:03.4"})
        for (const char* after : {"vendor", "class", "driver_override", "numa_node",
                                  "sriov_numvfs"}) {
            SCOPED_TRACE(std::string(bdf) + " after " + after);
            FakeTree t;
            build_host(t);
            VanishingHost fs(t, bdf, after);
            std::vector<std::string> warnings;
            EXPECT_FALSE(read_function(fs, A(bdf), &warnings).has_value());
            EXPECT_THAT(warnings, IsEmpty());
        }
    FakeTree t;
    build_host(t);
    VanishingHost fs(t, "0000:01:00.0", "device");
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_EQ(topo.find(A("0000:01:00.0")), nullptr);
    EXPECT_NE(topo.find(A("0000:01:00.1")), nullptr);
    EXPECT_THAT(warnings, IsEmpty());
}

// Read-only: the real host this runs on. Every entry `ls /sys/bus/pci/devices` shows must be read.
TEST(TopologyReader, RealHostSmoke) {
    namespace stdfs = std::filesystem;
    std::error_code ec;
    std::set<std::string> expected;
    for (const auto& e : stdfs::directory_iterator("/sys/bus/pci/devices", ec))
        expected.insert(e.path().filename().string());
    if (expected.empty())
        GTEST_SKIP() << "no PCI devices visible on this host";
    KernelHostFs fs("/");
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    std::set<std::string> found;
    for (const auto& [addr, f] : topo.functions) {
        found.insert(addr.str());
        EXPECT_NE(f.vendor, 0) << addr.str();
        EXPECT_EQ(f.devpath.rfind("sys/devices/", 0), 0u) << f.devpath;
    }
    EXPECT_EQ(found, expected);
    EXPECT_THAT(warnings, IsEmpty());
}

// The access layer the reader stands on: it must keep every path inside the root. Each check
// runs twice: with the kernel's openat2 and with the resolver a kernel without it falls back to.
void reads_lists_and_rejects_paths_outside_the_root() {
    FakeTree t;
    t.write_file("a/value", "0x10de\n\n").write_file("a/b", "x").write_file("outside", "secret");
    KernelHostFs fs(t.root() + "/a/");
    EXPECT_EQ(fs.root(), t.root() + "/a");
    EXPECT_EQ(fs.read("value"), "0x10de\n");  // exactly one newline removed
    EXPECT_EQ(fs.read("value", 3), "0x1");
    EXPECT_FALSE(fs.read("missing"));
    EXPECT_FALSE(fs.read("../outside"));
    EXPECT_FALSE(fs.read("b/../../outside"));
    EXPECT_FALSE(fs.read(t.root() + "/outside"));  // absolute
    EXPECT_THAT(fs.list(""), ElementsAre("b", "value"));
    EXPECT_THAT(fs.list("nope"), IsEmpty());
    EXPECT_THAT(fs.list(".."), IsEmpty());
    EXPECT_FALSE(fs.exists("../outside"));
    EXPECT_FALSE(fs.live());
    EXPECT_TRUE(KernelHostFs("/").live());
    EXPECT_EQ(KernelHostFs("/").path("sys/bus"), "/sys/bus");
}

void resolve_stays_inside_the_root() {
    FakeTree t;
    t.write_file("sys/devices/pci0000:00/0000:00:02.0/vendor", "0x8086\n");
    t.symlink("sys/bus/pci/devices/0000:00:02.0", "../../../devices/pci0000:00/0000:00:02.0");
    t.symlink("abs", "/sys/devices/pci0000:00");  // absolute: taken relative to the root
    t.symlink("escape", "../../../../../../../../etc");
    t.symlink("loop1", "loop2").symlink("loop2", "loop1");
    t.symlink("dangling", "sys/nothing");
    KernelHostFs fs(t.root());
    EXPECT_EQ(fs.resolve("sys/bus/pci/devices/0000:00:02.0"),
              "sys/devices/pci0000:00/0000:00:02.0");
    EXPECT_EQ(fs.resolve("abs/0000:00:02.0/vendor"), "sys/devices/pci0000:00/0000:00:02.0/vendor");
    EXPECT_EQ(fs.read("abs/0000:00:02.0/vendor"), "0x8086");
    EXPECT_FALSE(fs.resolve("escape"));
    EXPECT_FALSE(fs.resolve("loop1"));
    EXPECT_FALSE(fs.resolve("dangling"));
    EXPECT_TRUE(fs.exists("dangling"));  // the link itself is there
    EXPECT_FALSE(fs.resolve("sys/../sys"));
    // Reads, lists and writes through an absolute link stay in the tree, never the real host.
    t.symlink("hostproc", "/proc");
    EXPECT_FALSE(fs.read("hostproc/self/status"));
    EXPECT_THAT(fs.list("hostproc"), ElementsAre("net", "self"));
    EXPECT_EQ(fs.write("hostproc/self/status", "x"), ENOENT);
    EXPECT_TRUE(fs.exists("hostproc/self"));
    EXPECT_FALSE(fs.exists("hostproc/self/status"));
    EXPECT_EQ(fs.link_name("sys/bus/pci/devices/0000:00:02.0"), "0000:00:02.0");
    EXPECT_EQ(fs.readlink("abs"), "/sys/devices/pci0000:00");
    EXPECT_FALSE(fs.readlink("sys"));  // not a link
}

// ".." in a link target is applied as the kernel does on a real host: at the root it stays at
// the root. So it reaches the tree's own file, never the one beside the tree.
std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void dotdot_in_a_link_target_stops_at_the_root() {
    FakeTree t;
    t.write_file("secret", "outside the root");
    t.write_file("a/secret", "inside the root");
    t.write_file("a/sys/devices/d0/vendor", "0x8086\n");
    t.symlink("a/sys/up", "../../secret");
    t.symlink("a/sys/deep", "../../../../../../../../secret");
    t.symlink("a/sys/top", "../../..");
    t.symlink("a/sys/devices/d0/back", "../../up");   // a link to a link that climbs
    KernelHostFs fs(t.root() + "/a");
    EXPECT_EQ(fs.read("sys/up"), "inside the root");
    EXPECT_EQ(fs.read("sys/deep"), "inside the root");
    EXPECT_EQ(fs.read("sys/devices/d0/back"), "inside the root");
    EXPECT_EQ(fs.resolve("sys/up"), "secret");
    EXPECT_EQ(fs.resolve("sys/top"), "");
    EXPECT_EQ(fs.resolve("sys/top/sys/devices/d0/vendor"), "sys/devices/d0/vendor");
    EXPECT_THAT(fs.list("sys/top"), ElementsAre("secret", "sys"));
    EXPECT_EQ(fs.readlink("sys/top/sys/up"), "../../secret");
    EXPECT_TRUE(fs.exists("sys/top/secret"));
    EXPECT_FALSE(fs.exists("sys/top/a"));  // the tree's own name is not inside it
    EXPECT_EQ(fs.write("sys/deep", "x"), 0);
    EXPECT_EQ(slurp(t.root() + "/secret"), "outside the root");
    EXPECT_EQ(slurp(t.root() + "/a/secret"), "x");
}

// read_whole(), for config files: every byte as stored, a cap that refuses instead of cutting,
// and what went wrong; list() says why it is empty. Paths resolve inside the root as for read().
void read_whole_gives_exact_bytes_or_why_not() {
    using S = HostFs::WholeFile::Status;
    FakeTree t;
    t.write_file("etc/a.toml", "x = 1\n\n");
    t.write_file("etc/ten", std::string(10, 'x'));
    t.write_file("etc/eleven", std::string(11, 'x'));
    t.symlink("etc/abs", "/etc/a.toml");  // absolute: from the root
    t.symlink("etc/loop", "loop");
    ASSERT_EQ(::mkfifo((t.root() + "/etc/fifo").c_str(), 0600), 0);
    KernelHostFs fs(t.root());
    auto a = fs.read_whole("etc/a.toml", 100);
    EXPECT_EQ(a.status, S::Ok);
    EXPECT_EQ(a.bytes, "x = 1\n\n");  // read() would have dropped a newline
    EXPECT_EQ(fs.read_whole("etc/abs", 100).bytes, "x = 1\n\n");
    EXPECT_EQ(fs.read_whole("etc/ten", 10).bytes, std::string(10, 'x'));
    auto big = fs.read_whole("etc/eleven", 10);
    EXPECT_EQ(big.status, S::TooBig);
    EXPECT_TRUE(big.bytes.empty());
    EXPECT_EQ(fs.read_whole("etc/none", 10).status, S::Missing);
    EXPECT_EQ(fs.read_whole("etc/a.toml/x", 10).status, S::Missing);  // ENOTDIR on the way
    EXPECT_EQ(fs.read_whole("../etc/a.toml", 10).status, S::Missing);
    EXPECT_EQ(fs.read_whole("etc", 10).status, S::NotRegular);
    EXPECT_EQ(fs.read_whole("etc/fifo", 10).status, S::NotRegular);  // at once, no writer needed
    auto loop = fs.read_whole("etc/loop", 10);
    EXPECT_EQ(loop.status, S::Failed);
    EXPECT_EQ(loop.err, ELOOP);
    int err = -1;
    EXPECT_THAT(fs.list("etc", &err),
                ElementsAre("a.toml", "abs", "eleven", "fifo", "loop", "ten"));
    EXPECT_EQ(err, 0);
    EXPECT_THAT(fs.list("nothing", &err), IsEmpty());
    EXPECT_EQ(err, ENOENT);
    EXPECT_THAT(fs.list("etc/a.toml", &err), IsEmpty());
    EXPECT_EQ(err, ENOTDIR);
}

// A kernel without openat2: every answer comes from the user-space resolver, and the system
// call is asked once, not on every access.
int openat2_calls = 0;
long no_openat2(int, const char*, void*, size_t) {
    ++openat2_calls;
    errno = ENOSYS;
    return -1;
}

class SysfsWithoutOpenat2 : public ::testing::Test {
protected:
    void SetUp() override {
        openat2_calls = 0;
        sysfs_testing::set_openat2(no_openat2);
    }
    void TearDown() override {
        sysfs_testing::set_openat2(nullptr);
        EXPECT_EQ(openat2_calls, 1);
    }
};

TEST(HostFs, ReadsListsAndRejectsPathsOutsideTheRoot) {
    reads_lists_and_rejects_paths_outside_the_root();
}
TEST(HostFs, ResolveStaysInsideTheRoot) { resolve_stays_inside_the_root(); }
TEST(HostFs, DotDotInALinkTargetStopsAtTheRoot) { dotdot_in_a_link_target_stops_at_the_root(); }
TEST_F(SysfsWithoutOpenat2, ReadsListsAndRejectsPathsOutsideTheRoot) {
    reads_lists_and_rejects_paths_outside_the_root();
}
TEST_F(SysfsWithoutOpenat2, ResolveStaysInsideTheRoot) { resolve_stays_inside_the_root(); }
TEST_F(SysfsWithoutOpenat2, DotDotInALinkTargetStopsAtTheRoot) {
    dotdot_in_a_link_target_stops_at_the_root();
}
TEST(HostFs, ReadWholeGivesExactBytesOrWhyNot) { read_whole_gives_exact_bytes_or_why_not(); }
TEST_F(SysfsWithoutOpenat2, ReadWholeGivesExactBytesOrWhyNot) {
    read_whole_gives_exact_bytes_or_why_not();
}
TEST_F(SysfsWithoutOpenat2, TheWholeReaderGivesTheSameTopology) {
    FakeTree t;
    build_host(t);
    KernelHostFs fs(t.root());
    sysfs_testing::set_openat2(nullptr);
    std::vector<std::string> w1, w2;
    Topology with = read_topology(fs, &w1);
    sysfs_testing::set_openat2(no_openat2);
    Topology without = read_topology(fs, &w2);
    EXPECT_EQ(with.functions.size(), without.functions.size());
    for (const auto& [a, f] : with.functions) {
        const PciFunction* g = without.find(a);
        ASSERT_NE(g, nullptr) << a.str();
        EXPECT_EQ(g->devpath, f.devpath);
        EXPECT_EQ(g->driver, f.driver);
        EXPECT_EQ(g->iommu_group, f.iommu_group);
    }
    EXPECT_EQ(with.groups, without.groups);
    EXPECT_EQ(w1, w2);
}

// The live root takes the same *at() calls from its cached "/" fd (read-only checks only).
TEST(HostFs, LiveRootResolvesThroughTheKernel) {
    KernelHostFs fs("/");
    EXPECT_EQ(fs.resolve("proc/self"), fs.resolve("proc/" + std::to_string(::getpid())));
    EXPECT_EQ(fs.resolve(""), "");
    EXPECT_TRUE(fs.exists("proc/self"));
    EXPECT_EQ(fs.readlink("proc/self"), std::to_string(::getpid()));
    EXPECT_FALSE(fs.read("../etc/hostname"));
    EXPECT_FALSE(fs.list("proc").empty());
}

TEST(HostFs, WriteNeverCreatesAndReportsErrno) {
    FakeTree t;
    t.write_file("sys/bus/pci/drivers_probe", "");
    t.write_file("outside", "");
    KernelHostFs fs(t.root() + "/sys");
    EXPECT_EQ(fs.write("bus/pci/drivers_probe", "0000:01:00.0"), 0);
    EXPECT_EQ(fs.read("bus/pci/drivers_probe"), "0000:01:00.0");
    EXPECT_EQ(fs.write("bus/pci/new_file", "x"), ENOENT);
    EXPECT_FALSE(std::filesystem::exists(t.root() + "/sys/bus/pci/new_file"));
    EXPECT_EQ(fs.write("../outside", "x"), EINVAL);
    EXPECT_EQ(fs.write(t.root() + "/outside", "x"), EINVAL);
    EXPECT_EQ(fs.write("bus", "x"), EISDIR);
}

TEST(HostFs, AShorterWriteToACapturedTreeLeavesNoOldBytes) {
    FakeTree t;
    t.write_file("sys/x/driver_override", "vfio-pci\n");
    KernelHostFs fs(t.root());
    EXPECT_EQ(fs.write("sys/x/driver_override", "\n"), 0);
    EXPECT_EQ(fs.read("sys/x/driver_override"), "");
}

// Other suites (the fake kernel) build on these shapes; pin the kernel-like parts.
TEST(FakeTree, KernelShapedLinksAndVfioNodes) {
    FakeTree t;
    build_host(t);
    KernelHostFs fs(t.root());
    EXPECT_EQ(fs.readlink("sys/bus/pci/devices/0000:01:00.0"),
              "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0");
    const std::string gpu = t.devpath("0000:01:00.0");
    EXPECT_EQ(fs.readlink(gpu + "/driver"), "../../../../bus/pci/drivers/nvidia");
    EXPECT_EQ(fs.readlink(gpu + "/iommu_group"), "../../../../kernel/iommu_groups/2");
    EXPECT_EQ(fs.resolve("sys/bus/pci/drivers/nvidia/0000:01:00.0"), gpu);
    EXPECT_EQ(fs.read(gpu + "/enable"), "1");

    t.bind("0000:01:00.0", "vfio-pci");
    EXPECT_FALSE(fs.exists("sys/bus/pci/drivers/nvidia/0000:01:00.0"));
    EXPECT_EQ(fs.link_name(gpu + "/driver"), "vfio-pci");
    EXPECT_EQ(fs.read(gpu + "/enable"), "0");  // vfio-pci enables only when a user opens it
    EXPECT_TRUE(fs.exists("dev/vfio/2"));
    EXPECT_TRUE(fs.exists("sys/module/vfio_pci"));
    EXPECT_THAT(fs.read(gpu + "/uevent").value_or(""), HasSubstr("DRIVER=vfio-pci"));
    t.bind("0000:01:00.1", "vfio-pci");
    t.unbind("0000:01:00.0");
    EXPECT_TRUE(fs.exists("dev/vfio/2"));  // 01:00.1 still holds the group
    t.unbind("0000:01:00.1");
    EXPECT_FALSE(fs.exists("dev/vfio/2"));
    EXPECT_FALSE(fs.exists(gpu + "/driver"));

    t.add_netdev("0000:01:00.0", "eth9", "virtio3");
    t.remove_function("0000:01:00.0");
    EXPECT_FALSE(fs.exists("sys/bus/pci/devices/0000:01:00.0"));
    EXPECT_FALSE(fs.exists("sys/kernel/iommu_groups/2/devices/0000:01:00.0"));
    EXPECT_FALSE(fs.exists("sys/class/net/eth9"));
    EXPECT_TRUE(fs.exists("sys/kernel/iommu_groups/2/devices/0000:01:00.1"));
}

// ---- hostile trees (issue 10) -------------------------------------------------------------

namespace {

// Replaces the file at rel with a FIFO: open(O_RDONLY) on it waits for a writer forever.
void make_fifo(const FakeTree& t, const std::string& rel) {
    std::filesystem::remove(t.root() + "/" + rel);
    ASSERT_EQ(::mkfifo((t.root() + "/" + rel).c_str(), 0644), 0) << rel;
}

}  // namespace

// Row 4: a FIFO in place of an attribute hung open() forever (vfioctl plan, and vfiod before it
// became ready). Reads refuse anything but a regular file, say so, and return at once.
TEST(HostileTree, FifoAttributesAreRefusedNotWaitedOn) {
    for (const char* attr : {"vendor", "driver_override", "numa_node"}) {
        SCOPED_TRACE(attr);
        FakeTree t;
        build_host(t);
        make_fifo(t, t.devpath("0000:01:00.0") + "/" + attr);
        KernelHostFs fs(t.root());
        std::string why;
        EXPECT_EQ(fs.read(t.devpath("0000:01:00.0") + "/" + attr, 4096, &why), std::nullopt);
        EXPECT_EQ(why, "a FIFO, not a regular file");
        std::vector<std::string> warnings;
        Topology topo = read_topology(fs, &warnings);
        // Nothing read from it can be trusted: the function is skipped, its group still lists it.
        EXPECT_EQ(topo.find(A("0000:01:00.0")), nullptr);
        EXPECT_NE(topo.find(A("0000:01:00.1")), nullptr);
        EXPECT_THAT(topo.groups[2], ElementsAre(A("0000:01:00.0"), A("0000:01:00.1")));
        ASSERT_EQ(warnings.size(), 1u);
        EXPECT_EQ(warnings[0], std::string("skipping PCI function 0000:01:00.0: ") + attr +
                                   " is a FIFO, not a regular file");
    }
}

// The reader looks a function's attributes up in its directory, held open. An attribute that
// is a link (never one in sysfs) is still resolved inside the root, absolute or climbing with
// "..": its value comes from the tree, never from the file of the same path beside it.
void attribute_links_stay_inside_the_root() {
    FakeTree outside;
    outside.write_file("v", "0xdead\n");
    const std::string abs = outside.root() + "/v";
    for (const std::string& target : {abs, "../../../../../../../../../../.." + abs}) {
        SCOPED_TRACE(target);
        FakeTree t;
        build_host(t);
        t.write_file(abs.substr(1), "0xbeef\n");  // the same path, inside the tree
        const std::string vendor = t.devpath("0000:01:00.0") + "/vendor";
        std::filesystem::remove(t.root() + "/" + vendor);
        t.symlink(vendor, target);
        KernelHostFs fs(t.root());
        EXPECT_EQ(fs.read(vendor), "0xbeef");
        auto f = read_function(fs, A("0000:01:00.0"), nullptr);
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->vendor, 0xbeef);
    }
}

// A bus link that leads to a FIFO: the reader's O_PATH open of it waits for nobody, and the
// function is skipped with a warning, at once.
void bus_link_to_a_fifo_is_skipped() {
    FakeTree t;
    build_host(t);
    make_fifo(t, "fifo");
    t.symlink("sys/bus/pci/devices/0000:05:00.0", "../../../../fifo");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    EXPECT_FALSE(read_function(fs, A("0000:05:00.0"), &warnings).has_value());
    EXPECT_THAT(warnings, ElementsAre("skipping PCI function 0000:05:00.0: cannot read vendor"));
}

TEST(HostileTree, AttributeLinksStayInsideTheRoot) { attribute_links_stay_inside_the_root(); }
TEST(HostileTree, BusLinkToAFifoIsSkipped) { bus_link_to_a_fifo_is_skipped(); }
TEST_F(SysfsWithoutOpenat2, AttributeLinksStayInsideTheRoot) {
    attribute_links_stay_inside_the_root();
}
TEST_F(SysfsWithoutOpenat2, BusLinkToAFifoIsSkipped) { bus_link_to_a_fifo_is_skipped(); }

TEST(HostileTree, SocketsDirectoriesAndDevicesAreNotRead) {
    FakeTree t;
    t.write_file("sys/x/a", "1\n");
    KernelHostFs fs(t.root());
    std::string why;
    EXPECT_EQ(fs.read("sys/x", 4096, &why), std::nullopt);
    EXPECT_EQ(why, "a directory, not a regular file");
    std::filesystem::create_symlink("/dev/null", t.root() + "/sys/x/null");
    EXPECT_EQ(fs.read("sys/x/null", 4096, &why), std::nullopt);
    // A missing file is not news: no reason given.
    why.clear();
    EXPECT_EQ(fs.read("sys/x/missing", 4096, &why), std::nullopt);
    EXPECT_EQ(why, "");
    EXPECT_EQ(fs.read("sys/x/a", 4096, &why), "1");
}

// Row 6: 100,000 junk names in sys/bus/pci/devices gave 100,000 warning lines (16 MB).
TEST(HostileTree, JunkDeviceNamesGiveABoundedSummary) {
    FakeTree t;
    build_host(t);
    for (int i = 0; i < 5000; ++i)
        t.write_file("sys/bus/pci/devices/junk" + std::to_string(i), "");
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    EXPECT_NE(topo.find(A("0000:01:00.0")), nullptr);  // the real functions are all still read
    EXPECT_EQ(topo.functions.size(), 6u);
    ASSERT_EQ(warnings.size(), 21u);
    EXPECT_THAT(warnings[0], HasSubstr("skipping sys/bus/pci/devices entry: "));
    EXPECT_EQ(warnings[20], "... and 4980 more odd sysfs entries skipped");
}

// Rows 1 and 5: a driver directory whose name is not text. The reader keeps the real bytes (a
// release must find that driver again); everything that shows it escapes them.
TEST(HostileTree, DriverNamesThatAreNotTextAreKeptAsTheyAre) {
    FakeTree t;
    build_host(t);
    const std::string evil = "evil\xff\x1b[2J\nFAKE";
    t.add_driver(evil);
    t.bind("0000:01:00.1", evil);
    KernelHostFs fs(t.root());
    std::vector<std::string> warnings;
    Topology topo = read_topology(fs, &warnings);
    ASSERT_NE(topo.find(A("0000:01:00.1")), nullptr);
    EXPECT_EQ(topo.find(A("0000:01:00.1"))->driver, evil);
    EXPECT_THAT(warnings, IsEmpty());
    EXPECT_EQ(printable(evil), "evil\\xff\\x1b[2J\\x0aFAKE");
}
