// Exclusive claims just before a bind (io/claims): sysfs evidence, then the O_EXCL probe, whose
// answer a HostFs subclass plays here as the kernel would give it.
#include "io/claims.hpp"

#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "core/config.hpp"
#include "fake_tree.hpp"
#include "io/snapshot.hpp"
#include "io/config_loader.hpp"

using namespace vfiod;
using test::FakeTree;

namespace {

// The kernel's answer to an O_EXCL open: EBUSY for the nodes listed, 0 for the rest.
class ClaimingSysfs : public KernelHostFs {
public:
    ClaimingSysfs(std::string root, std::set<std::string> busy)
        : KernelHostFs(std::move(root)), busy_(std::move(busy)) {}
    int probe_exclusive(std::string_view rel) const override {
        probed.insert(std::string(rel));
        return busy_.count(std::string(rel)) ? EBUSY : 0;
    }
    mutable std::set<std::string> probed;

private:
    std::set<std::string> busy_;
};

void nvme_host(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(FakeTree::pci("0000:02:00.0", "1b36", "0010", "010802", "nvme", 9));
    t.add_block("0000:02:00.0", "nvme/nvme0", "nvme0n1", 259, 0);
    t.add_partition("nvme0n1", "nvme0n1p1", 259, 1);
    t.write_file(t.devpath("0000:02:00.0") + "/nvme/nvme0/block/nvme0n1/uevent",
                 "MAJOR=259\nMINOR=0\nDEVNAME=nvme0n1\nDEVTYPE=disk\n");
    t.write_file(t.devpath("0000:02:00.0") + "/nvme/nvme0/block/nvme0n1/nvme0n1p1/uevent",
                 "MAJOR=259\nMINOR=1\nDEVNAME=nvme0n1p1\nDEVTYPE=partition\n");
}

GroupPlan bind_plan(const HostFs& fs) {
    ConfigResult cr = parse_config("[[device]]\nselector = \"1b36:0010\"\n", "t.toml");
    Snapshot s = read_snapshot(fs);
    Plan p = make_plan(s.topology, s.use, *cr.config);
    EXPECT_EQ(p.groups.size(), 1u);
    EXPECT_EQ(p.groups.at(0).action, Action::Bind);
    return p.groups.at(0);
}

}  // namespace

TEST(Claims, EbusyRefusesWithTheFilesystemTypeUdevSaw) {
    FakeTree t;
    nvme_host(t);
    t.write_file("run/udev/data/b259:1", "S:disk/by-id/x\nE:ID_FS_TYPE=zfs_member\nE:ID_FS_USAGE=raid\n");
    ClaimingSysfs fs(t.root(), {"proc/1/root/dev/nvme0n1p1"});
    GroupPlan g = bind_plan(fs);
    EXPECT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::InUseStorage);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{*PciAddress::parse("0000:02:00.0")});
    ASSERT_EQ(g.details.size(), 1u);
    EXPECT_EQ(g.details[0], "0000:02:00.0: nvme0n1p1 is claimed by the kernel (udev sees zfs_member on it)");
    EXPECT_TRUE(g.writes().empty());
    EXPECT_EQ(fs.probed, (std::set<std::string>{"proc/1/root/dev/nvme0n1", "proc/1/root/dev/nvme0n1p1"}));
}

TEST(Claims, EbusyWithoutUdevDataNamesTheUsualClaimants) {
    FakeTree t;
    nvme_host(t);
    ClaimingSysfs fs(t.root(), {"proc/1/root/dev/nvme0n1"});
    GroupPlan g = bind_plan(fs);
    EXPECT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.details.at(0), "0000:02:00.0: nvme0n1 is claimed by the kernel (ZFS, btrfs, LVM, "
                               "bcache, multipath…)");
}

TEST(Claims, NothingClaimedLeavesTheBind) {
    FakeTree t;
    nvme_host(t);
    ClaimingSysfs fs(t.root(), {});
    GroupPlan g = bind_plan(fs);
    auto writes = g.writes().size();
    EXPECT_FALSE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_EQ(g.writes().size(), writes);
}

TEST(Claims, SysfsEvidenceBeforeAnyProbe) {
    FakeTree t;
    nvme_host(t);
    t.write_file("sys/fs/btrfs/6f1e-uuid/devices/nvme0n1p1", "");
    ClaimingSysfs fs(t.root(), {});
    GroupPlan g = bind_plan(fs);
    EXPECT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.details.at(0), "0000:02:00.0: nvme0n1p1 is a member of a mounted btrfs filesystem");
    EXPECT_EQ(fs.probed, std::set<std::string>{"proc/1/root/dev/nvme0n1"});  // the other one
}

TEST(Claims, BcacheBackingDevice) {
    FakeTree t;
    nvme_host(t);
    t.write_file(t.devpath("0000:02:00.0") + "/nvme/nvme0/block/nvme0n1/bcache/state", "clean\n");
    ClaimingSysfs fs(t.root(), {});
    GroupPlan g = bind_plan(fs);
    EXPECT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.details.at(0), "0000:02:00.0: nvme0n1 is claimed by bcache");
}

// A captured tree cannot answer an O_EXCL open: the plain KernelHostFs never probes one.
TEST(Claims, ATreeIsNeverProbed) {
    FakeTree t;
    nvme_host(t);
    KernelHostFs fs(t.root());
    EXPECT_EQ(fs.probe_exclusive("proc/1/root/dev/nvme0n1"), EOPNOTSUPP);
    GroupPlan g = bind_plan(fs);
    EXPECT_FALSE(refuse_if_claimed(fs, &g));
}

// A broken or hostile udev database: what it says is quoted, bounded and never trusted to block.
TEST(Claims, OddUdevDataIsQuotedBoundedOrIgnored) {
    FakeTree t;
    nvme_host(t);
    ClaimingSysfs fs(t.root(), {"proc/1/root/dev/nvme0n1"});
    // An escape sequence and a newline-free flood: printable and cut short.
    t.write_file("run/udev/data/b259:0", "E:ID_FS_TYPE=\x1b[2Jzfs" + std::string(5000, 'x') + "\n");
    GroupPlan g = bind_plan(fs);
    ASSERT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.details.at(0).find('\x1b'), std::string::npos) << g.details.at(0);
    EXPECT_NE(g.details.at(0).find("(udev sees \\x1b[2Jzfsxxx"), std::string::npos) << g.details.at(0);
    EXPECT_LT(g.details.at(0).size(), 200u);
    // The key in the middle of a line, or empty, names nothing.
    for (const char* data : {"S:x E:ID_FS_TYPE=zfs_member\n", "E:ID_FS_TYPE=\n", ""}) {
        t.write_file("run/udev/data/b259:0", data);
        GroupPlan again = bind_plan(fs);
        ASSERT_TRUE(refuse_if_claimed(fs, &again));
        EXPECT_EQ(again.details.at(0), "0000:02:00.0: nvme0n1 is claimed by the kernel (ZFS, "
                                       "btrfs, LVM, bcache, multipath…)") << data;
    }
    // A FIFO where the file should be would block a reader: it is not read.
    t.remove("run/udev/data/b259:0");
    ASSERT_EQ(::mkfifo((t.root() + "/run/udev/data/b259:0").c_str(), 0600), 0);
    GroupPlan fifo = bind_plan(fs);
    ASSERT_TRUE(refuse_if_claimed(fs, &fifo));
    EXPECT_EQ(fifo.details.at(0), "0000:02:00.0: nvme0n1 is claimed by the kernel (ZFS, btrfs, "
                                  "LVM, bcache, multipath…)");
}

// A uevent whose DEVNAME leaves /dev, or a disk whose dev file is junk, is never probed.
TEST(Claims, DevnamesOutsideDevAreNotProbed) {
    FakeTree t;
    nvme_host(t);
    const std::string disk = t.devpath("0000:02:00.0") + "/nvme/nvme0/block/nvme0n1";
    t.write_file(disk + "/uevent", "MAJOR=259\nMINOR=0\nDEVNAME=../../etc/shadow\n");
    t.write_file(disk + "/nvme0n1p1/dev", "not a devnum\n");
    ClaimingSysfs fs(t.root(), {});
    GroupPlan g = bind_plan(fs);
    EXPECT_FALSE(refuse_if_claimed(fs, &g));
    EXPECT_TRUE(fs.probed.empty()) << *fs.probed.begin();
}

// The probe opens only a block device: a node of another kind (a tty, a watchdog) can act on
// being opened, so it is looked at first and left closed. Live root, read only: a FIFO in a
// temporary directory, watched for opens.
TEST(Claims, TheProbeNeverOpensAnythingButABlockDevice) {
    char dir[] = "/tmp/vfiod-probe-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::string fifo = std::string(dir) + "/node";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    ASSERT_GE(in, 0);
    ASSERT_GE(::inotify_add_watch(in, fifo.c_str(), IN_OPEN), 0);
    KernelHostFs live("/");
    EXPECT_EQ(live.probe_exclusive(fifo.substr(1)), ENOTBLK);
    char buf[4096];
    EXPECT_EQ(::read(in, buf, sizeof buf), -1) << "the probe opened " << fifo;
    ::close(in);
    ::unlink(fifo.c_str());
    ::rmdir(dir);
}

namespace {

// Dual-port NVMe under native multipath: the namespace nvme0n1 sits in the virtual subsystem
// directory, served by controllers nvme0 (0000:02:00.0, the one the config binds) and nvme1
// (0000:03:00.0, another model, not bound), and belongs to no PCI device's subtree.
void multipath_host(FakeTree& t) {
    t.enable_iommu();
    t.add_driver("vfio-pci");
    t.add_function(FakeTree::pci("0000:02:00.0", "1b36", "0010", "010802", "nvme", 9));
    t.add_function(FakeTree::pci("0000:03:00.0", "144d", "a80a", "010802", "nvme", 10));
    const std::string subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys0";
    for (auto [bdf, ctrl] : {std::pair{"0000:02:00.0", "nvme0"}, std::pair{"0000:03:00.0", "nvme1"}}) {
        t.write_file(t.devpath(bdf) + "/nvme/" + ctrl + "/uevent", "");
        t.symlink(subsys + "/" + ctrl, "../../../" + t.devpath(bdf).substr(12) + "/nvme/" + ctrl);
    }
    t.add_block("", subsys, "nvme0n1", 259, 0);
    t.write_file(subsys + "/nvme0n1/uevent", "MAJOR=259\nMINOR=0\nDEVNAME=nvme0n1\nDEVTYPE=disk\n");
}

}  // namespace

// The usual ZFS vdev on dual-port NVMe: held only by an O_EXCL open (no mount, no holder), its
// controller's Bind is refused, as for a namespace under the controller.
TEST(Claims, ANativeMultipathNamespaceRefusesItsControllersBind) {
    FakeTree t;
    multipath_host(t);
    ClaimingSysfs fs(t.root(), {"proc/1/root/dev/nvme0n1"});
    GroupPlan g = bind_plan(fs);
    EXPECT_TRUE(refuse_if_claimed(fs, &g));
    EXPECT_EQ(g.action, Action::Refuse);
    EXPECT_EQ(g.reason, Reason::InUseStorage);
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{*PciAddress::parse("0000:02:00.0")});
    EXPECT_EQ(g.details, std::vector<std::string>{"0000:02:00.0: nvme0n1 is claimed by the kernel "
                                                  "(ZFS, btrfs, LVM, bcache, multipath…)"});
    EXPECT_TRUE(g.writes().empty());
    EXPECT_EQ(fs.probed, std::set<std::string>{"proc/1/root/dev/nvme0n1"});
}

// The facts name every controller of the subsystem asked about; the functions not asked about
// are not probed for.
TEST(Claims, ClaimFactsNameEveryControllerOfTheSubsystemAskedAbout) {
    FakeTree t;
    multipath_host(t);
    ClaimingSysfs fs(t.root(), {"proc/1/root/dev/nvme0n1"});
    const auto a = *PciAddress::parse("0000:02:00.0"), b = *PciAddress::parse("0000:03:00.0");
    auto both = read_claims(fs, {a, b});
    ASSERT_EQ(both.size(), 2u);
    EXPECT_EQ(both[0].owner, a);
    EXPECT_EQ(both[1].owner, b);
    EXPECT_EQ(both[1].why, both[0].why);
    EXPECT_TRUE(read_claims(fs, {}).empty());
    EXPECT_TRUE(fs.probed.count("proc/1/root/dev/nvme0n1"));
}

// core's decision: only a Bind whose moving functions own a claim becomes a refusal.
TEST(Claims, RefuseClaimedTouchesOnlyABindWhoseMovingFunctionsAreClaimed) {
    FakeTree t;
    nvme_host(t);
    KernelHostFs fs(t.root());
    const GroupPlan bind = bind_plan(fs);
    const auto owner = *PciAddress::parse("0000:02:00.0");
    GroupPlan g = bind;
    EXPECT_FALSE(refuse_claimed(&g, {{*PciAddress::parse("0000:05:00.0"), "sdz is claimed"}}));
    EXPECT_EQ(g.action, Action::Bind);
    EXPECT_EQ(g.writes().size(), bind.writes().size());
    GroupPlan other = bind;
    other.action = Action::Bound;
    EXPECT_FALSE(refuse_claimed(&other, {{owner, "nvme0n1 is claimed"}}));
    EXPECT_EQ(other.action, Action::Bound);
    EXPECT_TRUE(refuse_claimed(&g, {{owner, "nvme0n1 is claimed"}, {owner, "nvme0n1p1 is too"}}));
    EXPECT_EQ(g.blockers, std::vector<PciAddress>{owner});
    EXPECT_EQ(g.details, (std::vector<std::string>{"0000:02:00.0: nvme0n1 is claimed",
                                                   "0000:02:00.0: nvme0n1p1 is too"}));
}
