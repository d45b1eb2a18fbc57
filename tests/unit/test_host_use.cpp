#include "io/host_use.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>

#include "host_scan.hpp"

using namespace vfiod;
using test::A;
using test::FakeTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

void add(FakeTree& t, const char* address, const char* class_code, const char* driver,
         unsigned group, const char* parent = "") {
    FakeTree::Function f;
    f.address = address;
    f.class_code = class_code;
    f.driver = driver;
    f.group = group;
    f.parent = parent;
    t.add_function(f);
}

const char* kRouteHeader =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";

std::string route(const std::string& iface) {
    return iface + "\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
}

std::string ipv6_route(const std::string& dest, const std::string& iface) {
    const std::string z = "00000000000000000000000000000000";
    return dest + " 40 " + z + " 00 " + z + " 00000100 00000001 00000000 00000001 " + iface + "\n";
}

// A root port with an NVMe boot drive behind it.
void nvme_root(FakeTree& t) {
    t.enable_iommu();
    add(t, "0000:00:01.0", "060400", "pcieport", 1);
    add(t, "0000:01:00.0", "010802", "nvme", 2, "0000:00:01.0");
    t.add_block("0000:01:00.0", "nvme/nvme0", "nvme0n1", 259, 0);
    t.add_partition("nvme0n1", "nvme0n1p1", 259, 1);
    t.add_partition("nvme0n1", "nvme0n1p2", 259, 2);
}

class HostUseStorage : public test::HostScan {};
class HostileHost : public test::HostScan {};

}  // namespace

TEST_F(HostUseStorage, RootNvmeFoundByDeviceNumberNotByRootPort) {
    nvme_root(t);
    // The kernel names the root device /dev/root in proc/mounts; only major:minor finds it.
    t.write_file("proc/self/mountinfo",
                 "22 27 0:21 / /proc rw - proc proc rw\n"
                 "27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw\n");
    t.write_file("proc/mounts", "/dev/root / ext4 rw 0 0\nproc /proc proc rw 0 0\n");
    std::vector<std::string> warnings;
    HostUse use = scan(&warnings);
    EXPECT_THAT(use.storage[A("0000:01:00.0")], ElementsAre("nvme0n1p2 (259:2) is mounted on /"));
    EXPECT_EQ(use.storage.count(A("0000:00:01.0")), 0u);  // the root port is not in use
    EXPECT_TRUE(use.network.empty());
    EXPECT_THAT(warnings, IsEmpty());
}

TEST_F(HostUseStorage, UnmountedDiskIsNotInUse) {
    nvme_root(t);
    t.write_file("proc/self/mountinfo", "27 1 8:1 / / rw - ext4 /dev/sda1 rw\n");
    t.write_file("proc/mounts", "/dev/sda1 / ext4 rw 0 0\n");
    EXPECT_TRUE(scan().storage.empty());
}

// The unit's own table is a private copy: PID 1's is the host's, and wins when present.
TEST_F(HostUseStorage, Pid1TableWinsOverOurOwn) {
    nvme_root(t);
    // Ours still lists a disk the host has unmounted, and misses one it has mounted since.
    t.write_file("proc/self/mountinfo", "27 1 259:1 / /stale rw - vfat /dev/nvme0n1p1 rw\n");
    t.write_file("proc/mounts", "/dev/nvme0n1p1 /stale vfat rw 0 0\n");
    t.write_file("proc/1/mountinfo", "30 1 259:2 / /fresh rw shared:1 - ext4 /dev/nvme0n1p2 rw\n");
    t.write_file("proc/1/mounts", "/dev/nvme0n1p2 /fresh ext4 rw 0 0\n");
    HostUse use = scan();
    EXPECT_THAT(use.storage[A("0000:01:00.0")], ElementsAre("nvme0n1p2 (259:2) is mounted on /fresh"));
}

TEST_F(HostUseStorage, MountedBySourceWhenMountinfoIsMissing) {
    nvme_root(t);
    t.write_file("proc/mounts", "/dev/nvme0n1p1 /boot/efi\\040x vfat rw 0 0\n");
    HostUse use = scan();
    EXPECT_THAT(use.storage[A("0000:01:00.0")], ElementsAre("nvme0n1p1 is mounted on /boot/efi x"));
}

// The hibernation image's partition is in use although nothing mounts it (DESIGN §14: an
// initramfs that took it could not resume); "0:0" is the kernel's "none".
TEST_F(HostUseStorage, ResumeDeviceIsInUse) {
    nvme_root(t);
    t.write_file("sys/power/resume", "259:1\n");
    EXPECT_THAT(scan().storage[A("0000:01:00.0")],
                ElementsAre("nvme0n1p1 (259:1) is the resume device"));
    t.write_file("sys/power/resume", "0:0\n");
    EXPECT_TRUE(scan().storage.empty());
}

TEST_F(HostUseStorage, SwapAndDmHolder) {
    add(t, "0000:00:17.0", "010601", "ahci", 3);
    t.add_block("0000:00:17.0", "ata1/host0/target0:0:0/0:0:0:0", "sda", 8, 0);
    t.add_partition("sda", "sda2", 8, 2);
    add(t, "0000:00:18.0", "010601", "ahci", 4);
    t.add_block("0000:00:18.0", "ata2/host1/target1:0:0/1:0:0:0", "sdb", 8, 16);
    t.add_partition("sdb", "sdb1", 8, 17);
    t.add_holder("sdb1", "dm-0");
    t.write_file("proc/swaps",
                 "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                 "/dev/sda2                               partition\t8388604\t\t0\t\t-2\n");
    HostUse use = scan();
    EXPECT_THAT(use.storage[A("0000:00:17.0")], ElementsAre("sda2 is swap"));
    EXPECT_THAT(use.storage[A("0000:00:18.0")], ElementsAre("sdb1 is held by dm-0"));
    EXPECT_EQ(use.storage.size(), 2u);  // dm-0 itself is virtual and owned by no function
}

TEST_F(HostUseStorage, NvmeMultipathHeadCountsForEveryController) {
    add(t, "0000:02:00.0", "010802", "nvme", 5);
    add(t, "0000:03:00.0", "010802", "nvme", 6);
    add(t, "0000:04:00.0", "010802", "nvme", 7);  // a controller of another subsystem
    const std::string subsys = "sys/devices/virtual/nvme-subsystem/nvme-subsys0";
    for (auto [bdf, ctrl] : {std::pair{"0000:02:00.0", "nvme0"}, std::pair{"0000:03:00.0", "nvme1"}}) {
        t.write_file(t.devpath(bdf) + "/nvme/" + ctrl + "/uevent", "");
        t.symlink(subsys + "/" + ctrl, "../../../" + t.devpath(bdf).substr(12) + "/nvme/" + ctrl);
    }
    t.write_file(subsys + "/subsysnqn", "nqn.2014.08.org.nvmexpress:test\n");
    t.add_block("", subsys, "nvme0n1", 259, 0);
    t.write_file("proc/self/mountinfo", "27 1 259:0 / /var rw - xfs /dev/nvme0n1 rw\n");
    HostUse use = scan();
    EXPECT_THAT(use.storage[A("0000:02:00.0")], ElementsAre("nvme0n1 (259:0) is mounted on /var"));
    EXPECT_THAT(use.storage[A("0000:03:00.0")], ElementsAre("nvme0n1 (259:0) is mounted on /var"));
    EXPECT_EQ(use.storage.count(A("0000:04:00.0")), 0u);
}

TEST_F(HostUseStorage, MissingProcFilesFindNothing) {
    nvme_root(t);
    std::vector<std::string> warnings;
    HostUse use = scan(&warnings);
    EXPECT_TRUE(use.storage.empty());
    EXPECT_TRUE(use.network.empty());
    EXPECT_THAT(warnings, IsEmpty());
}

class HostUseNetwork : public test::HostScan {
protected:
    void SetUp() override {
        // Same vendor:device everywhere: only what the host does with each NIC tells them apart.
        const char* nics[] = {"0000:00:02.0", "0000:00:03.0", "0000:00:04.0", "0000:00:05.0",
                              "0000:00:06.0", "0000:00:07.0", "0000:00:08.0"};
        unsigned group = 10;
        for (const char* bdf : nics)
            add(t, bdf, "020000", "e1000e", group++);
        t.add_netdev("0000:00:02.0", "eth0");
        t.add_netdev("0000:00:03.0", "eth1");
        t.add_netdev("0000:00:04.0", "eth2");
        t.add_netdev("0000:00:05.0", "eth3");
        t.add_netdev("0000:00:06.0", "eth4", "virtio0");
        t.add_netdev("0000:00:07.0", "eth5");
        t.add_netdev("0000:00:08.0", "eth6");
        t.add_virtual_netdev("bond0");
        t.stack_netdev("eth2", "bond0", true);
        t.add_virtual_netdev("eth3.100");
        t.stack_netdev("eth3", "eth3.100", false);
        t.add_virtual_netdev("lo");
        t.write_file("proc/net/route", std::string(kRouteHeader) + route("eth0") + route("bond0") +
                                           route("eth3.100") + route("eth4") +
                                           "eth1\t0000A8C0\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n");
        t.write_file("proc/net/ipv6_route",
                     ipv6_route("fd000000000000000000000000000000", "eth5") +
                         ipv6_route("fe800000000000000000000000000000", "eth6") +
                         ipv6_route("fe800000000000000000000000000000", "eth1") +
                         ipv6_route("ff000000000000000000000000000000", "eth1") +
                         ipv6_route("00000000000000000000000000000001", "lo"));
    }
};

TEST_F(HostUseNetwork, RoutedVersusUnroutedNicOfTheSameId) {
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:02.0")], ElementsAre("eth0 carries a route"));
    // eth1 has a route entry that is not up, and only link-local/multicast IPv6 routes.
    EXPECT_EQ(use.network.count(A("0000:00:03.0")), 0u);
    EXPECT_TRUE(use.storage.empty());
}

TEST_F(HostUseNetwork, BondedNicWithRouteOnBond) {
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:04.0")],
                ElementsAre("eth2 is enslaved to bond0", "eth2 carries a route (via bond0)"));
}

TEST_F(HostUseNetwork, EnslavedWithoutRouteIsStillInUse) {
    t.write_file("proc/net/route", kRouteHeader);
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:04.0")], ElementsAre("eth2 is enslaved to bond0"));
}

TEST_F(HostUseNetwork, VlanCarryingTheRoute) {
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:05.0")], ElementsAre("eth3 carries a route (via eth3.100)"));
}

TEST_F(HostUseNetwork, StackedTwoLevelsUp) {
    // eth1 -> bond1 (master) -> br0 (master), route only on the bridge.
    t.add_virtual_netdev("bond1");
    t.add_virtual_netdev("br0");
    t.stack_netdev("eth1", "bond1", true);
    t.stack_netdev("bond1", "br0", true);
    t.write_file("proc/net/route", std::string(kRouteHeader) + route("br0"));
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:03.0")],
                ElementsAre("eth1 is enslaved to bond1", "eth1 carries a route (via br0)"));
}

TEST_F(HostUseNetwork, VirtioNetdevOneLevelDeeper) {
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:06.0")], ElementsAre("eth4 carries a route"));
}

TEST_F(HostUseNetwork, Ipv6OnlyRouteCounts) {
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:07.0")], ElementsAre("eth5 carries a route"));
}

TEST_F(HostUseNetwork, LinkLocalIpv6RouteAloneIsNotUse) {
    HostUse use = scan();
    EXPECT_EQ(use.network.count(A("0000:00:08.0")), 0u);
    EXPECT_EQ(use.network.size(), 5u);  // eth0, eth2, eth3, eth4, eth5
}

TEST_F(HostUseNetwork, MissingRouteFilesFindOnlyEnslavement) {
    t.remove("proc/net");
    HostUse use = scan();
    ASSERT_EQ(use.network.size(), 1u);
    EXPECT_THAT(use.network[A("0000:00:04.0")], ElementsAre("eth2 is enslaved to bond0"));
}

// Read-only: on the real host, the disk holding "/" (found here through /sys/dev/block, a
// different path than the detector's class/block walk) must be reported against its function.
TEST(HostUseRealHost, RootFilesystemDiskIsInUse) {
    namespace stdfs = std::filesystem;
    struct stat st;
    ASSERT_EQ(::stat("/", &st), 0);
    std::error_code ec;
    std::string link = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                       std::to_string(minor(st.st_dev));
    auto target = stdfs::canonical(link, ec);
    if (ec)
        GTEST_SKIP() << "/ is not on a block device (" << link << ")";
    std::optional<PciAddress> owner;
    for (const auto& part : target)
        if (auto a = PciAddress::parse(part.string()))
            owner = a;
    if (!owner)
        GTEST_SKIP() << "/ is on " << target << ", which has no PCI function";
    KernelHostFs fs("/");
    HostUse use = read_host_use(fs, Topology{}, nullptr);
    EXPECT_FALSE(use.storage[*owner].empty()) << owner->str();
}

// ---- hostile hosts (issue 10) -------------------------------------------------------------

// Row 5: mountinfo escapes a mount point's newline and space in octal; decoded, they reached the
// text plan, doctor and the journal raw ("mounted on /mnt/a⏎FAKE␛[2J…"). Findings quote the host
// through printable().
TEST_F(HostileHost, OctalEscapedMountPointCannotForgeALine) {
    nvme_root(t);
    t.write_file("proc/self/mountinfo",
                 "27 1 259:1 / /mnt/a\\012FAKE\\033[2Jb\\040c rw - vfat /dev/nvme0n1p1 rw\n");
    HostUse use = scan();
    EXPECT_THAT(use.storage[A("0000:01:00.0")],
                ElementsAre("nvme0n1p1 (259:1) is mounted on /mnt/a\\x0aFAKE\\x1b[2Jb c"));
}

TEST_F(HostileHost, NetdevAndBlockNamesAreShownEscaped) {
    add(t, "0000:00:02.0", "020000", "e1000e", 10);
    // The kernel refuses whitespace in netdev names, not escapes or bytes that are not UTF-8.
    const std::string nic = "eth\x1b[2J\xff", bridge = "br\x1b]0;x\x07";
    t.add_netdev("0000:00:02.0", nic);
    t.add_virtual_netdev(bridge);
    t.stack_netdev(nic, bridge, true);
    t.write_file("proc/net/route", std::string(kRouteHeader) + route(bridge));
    add(t, "0000:00:17.0", "010601", "ahci", 3);
    t.add_block("0000:00:17.0", "ata1", "sd\x1b" "a", 8, 0);
    t.add_holder("sd\x1b" "a", "dm\n0");
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:00:02.0")],
                ElementsAre("eth\\x1b[2J\\xff is enslaved to br\\x1b]0;x\\x07",
                            "eth\\x1b[2J\\xff carries a route (via br\\x1b]0;x\\x07)"));
    EXPECT_THAT(use.storage[A("0000:00:17.0")], ElementsAre("sd\\x1ba is held by dm\\x0a0"));
}

// Row 4 on a block device's dev: refused, and said (it was silently read as absent); the mount is
// still found by the device's name.
TEST_F(HostileHost, FifoBlockDevAttributeIsNamed) {
    nvme_root(t);
    t.write_file("proc/mounts", "/dev/nvme0n1p1 /boot vfat rw 0 0\n");
    const std::string dev = t.root() + "/" + *KernelHostFs(t.root()).resolve("sys/class/block/nvme0n1p1") + "/dev";
    std::filesystem::remove(dev);
    ASSERT_EQ(::mkfifo(dev.c_str(), 0644), 0);
    std::vector<std::string> warnings;
    HostUse use = scan(&warnings);
    EXPECT_THAT(warnings, ElementsAre("block device nvme0n1p1: dev is a FIFO, not a regular file"));
    EXPECT_THAT(use.storage[A("0000:01:00.0")], ElementsAre("nvme0n1p1 is mounted on /boot"));
}

// Row 4: a FIFO in place of a proc file hung open() forever. Refused with a warning; what it would
// have told is unknown, and the rest of the scan goes on.
TEST_F(HostileHost, FifoProcFilesAreRefusedWithAWarning) {
    nvme_root(t);
    t.write_file("proc/mounts", "/dev/nvme0n1p1 /boot vfat rw 0 0\n");
    for (const char* rel : {"proc/self/mountinfo", "proc/net/route"}) {
        t.write_file(rel, "");
        std::filesystem::remove(t.root() + "/" + rel);
        ASSERT_EQ(::mkfifo((t.root() + "/" + rel).c_str(), 0644), 0);
    }
    std::vector<std::string> warnings;
    HostUse use = scan(&warnings);
    EXPECT_THAT(warnings, ElementsAre("not reading proc/self/mountinfo: it is a FIFO, not a regular file",
                                      "not reading proc/net/route: it is a FIFO, not a regular file"));
    EXPECT_THAT(use.storage[A("0000:01:00.0")], ElementsAre("nvme0n1p1 is mounted on /boot"));
}
