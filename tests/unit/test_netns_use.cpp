// Network namespaces from a fake /proc and /run/netns, and the network functions whose interface
// lives in one of them (io/netns_use).
#include "io/netns_use.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "host_scan.hpp"

using namespace vfiod;
using test::A;
using test::FakeTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

constexpr const char* kHostNs = "net:[4026531840]";

// /run/netns/<name> as ip-netns makes it: a file whose inode is the namespace's.
unsigned long named_netns(FakeTree& t, const std::string& name) {
    t.write_file("run/netns/" + name, "");
    struct stat st;
    EXPECT_EQ(::stat((t.root() + "/run/netns/" + name).c_str(), &st), 0);
    return st.st_ino;
}

void in_netns(FakeTree& t, unsigned pid, const std::string& comm, unsigned long inode) {
    t.write_file("proc/" + std::to_string(pid) + "/comm", comm + "\n");
    t.symlink("proc/" + std::to_string(pid) + "/ns/net", "net:[" + std::to_string(inode) + "]");
}

// A VF-like NIC whose netdev left the host's namespace: its `net` directory stays, empty.
void moved_nic(FakeTree& t) {
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:05:00.0", "8086", "10d3", "020000", "e1000e", 9));
    t.add_function(FakeTree::pci("0000:06:00.0", "8086", "10d3", "020000", "e1000e", 10));
    t.add_netdev("0000:06:00.0", "eth0");
    std::filesystem::create_directories(t.root() + "/" + t.devpath("0000:05:00.0") + "/net");
    t.write_file("proc/1/comm", "systemd\n");
    t.symlink("proc/1/ns/net", kHostNs);
}

class NetnsUse : public test::HostScan {};

}  // namespace

TEST_F(NetnsUse, NamedAndProcessHeldOnePerInodeHostLeftOut) {
    t.symlink("proc/1/ns/net", kHostNs);
    unsigned long blue = named_netns(t, "blue");
    in_netns(t, 200, "sleep", blue);
    in_netns(t, 300, "pause", 4026532999);
    in_netns(t, 301, "app", 4026532999);
    t.symlink("proc/400/ns/net", kHostNs);
    t.symlink("proc/401/ns/net", "mnt:[4026531841]");
    t.symlink("proc/self", "1");
    KernelHostFs fs(t.root());
    auto spaces = list_netns(fs);
    ASSERT_EQ(spaces.size(), 2u);
    EXPECT_EQ(spaces[0].inode, blue);
    EXPECT_THAT(spaces[0].names, ElementsAre("blue"));
    EXPECT_EQ(spaces[0].pid, "200");
    EXPECT_EQ(spaces[1].inode, 4026532999u);
    EXPECT_THAT(spaces[1].names, IsEmpty());
    EXPECT_EQ(spaces[1].pid, "300");
}

TEST_F(NetnsUse, MovedInterfaceNamedThroughTheSysfsOfAProcessInIt) {
    moved_nic(t);
    unsigned long blue = named_netns(t, "blue");
    in_netns(t, 200, "sleep", blue);
    t.symlink("proc/200/root/sys/class/net/eth7",
              "../../devices/pci0000:00/0000:05:00.0/net/eth7");
    t.symlink("proc/200/root/sys/class/net/lo", "../../devices/virtual/net/lo");
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:05:00.0")],
                ElementsAre("its interface eth7 is in network namespace blue, held by pid 200 (sleep)"));
    EXPECT_EQ(use.network.count(A("0000:06:00.0")), 0u);  // its eth0 is here, unused
}

TEST_F(NetnsUse, NoProcessInsideLeavesTheCandidates) {
    moved_nic(t);
    named_netns(t, "blue");
    in_netns(t, 300, "pause", 4026532999);
    HostUse use = scan();
    EXPECT_THAT(use.network[A("0000:05:00.0")],
                ElementsAre("its interface (e1000e) is in another network namespace; candidates: "
                            "network namespace blue, the network namespace of pid 300 (pause)"));
}

TEST_F(NetnsUse, OnlyNetworkDriversWithAnEmptyNetDirectoryInATree) {
    moved_nic(t);
    // On vfio-pci the interface is gone for good, not elsewhere; a tree without `net` says nothing.
    t.add_function(FakeTree::pci("0000:07:00.0", "8086", "10d3", "020000", "vfio-pci", 11));
    std::filesystem::create_directories(t.root() + "/" + t.devpath("0000:07:00.0") + "/net");
    t.add_function(FakeTree::pci("0000:08:00.0", "8086", "10d3", "020000", "e1000e", 12));
    // A display controller with an empty net directory is not a NIC.
    t.add_function(FakeTree::pci("0000:09:00.0", "10de", "2331", "030200", "nvidia", 13));
    std::filesystem::create_directories(t.root() + "/" + t.devpath("0000:09:00.0") + "/net");
    HostUse use = scan();
    EXPECT_EQ(use.network.size(), 1u);
    EXPECT_EQ(use.network.count(A("0000:05:00.0")), 1u);
}

TEST_F(NetnsUse, VirtioNetInterfacesLiveOneLevelDown) {
    t.enable_iommu();
    t.write_file("proc/1/comm", "systemd\n");
    t.symlink("proc/1/ns/net", kHostNs);
    // virtio-net's netdev sits under <fn>/virtio<N>/net: shown there, the function is not hidden.
    t.add_function(FakeTree::pci("0000:00:06.0", "1af4", "1041", "020000", "virtio-pci", 6));
    t.add_netdev("0000:00:06.0", "eth4", "virtio0");
    // Moved away: virtio1/net is left empty.
    t.add_function(FakeTree::pci("0000:00:07.0", "1af4", "1041", "020000", "virtio-pci", 7));
    std::filesystem::create_directories(t.root() + "/" + t.devpath("0000:00:07.0") +
                                        "/virtio1/net");
    HostUse use = scan();
    EXPECT_EQ(use.network.count(A("0000:00:06.0")), 0u);
    EXPECT_THAT(use.network[A("0000:00:07.0")],
                ElementsAre("its interface (virtio-pci) is in another network namespace"));
}

// A host whose /proc and /run/netns change under the scan, seen as the state the scan may meet:
// a process gone between the listing and its ns link (no ns, no comm), links that are not a
// network namespace's, a /run/netns entry that is a dangling link or a FIFO. Each is skipped;
// the namespaces still there are named.
TEST_F(NetnsUse, VanishedProcessesAndJunkLinksAreSkipped) {
    moved_nic(t);
    unsigned long blue = named_netns(t, "blue");
    t.symlink("run/netns/gone", "/run/netns/nothing-here");
    ASSERT_EQ(::mkfifo((t.root() + "/run/netns/fifo").c_str(), 0600), 0);
    t.write_file("proc/400/comm", "exited\n");                 // its ns/ already gone
    t.symlink("proc/401/ns/net", "net:[4026532111]");           // its comm already gone
    t.symlink("proc/402/ns/net", "mnt:[4026532112]");
    t.symlink("proc/403/ns/net", "net:[12x]");
    t.symlink("proc/404/ns/net", "net:[123456789012345678901234]");
    t.symlink("proc/405/ns/net", "net:[]");
    t.symlink("proc/self/ns/net", "net:[4026532113]");          // not a pid
    auto spaces = list_netns(KernelHostFs(t.root()));
    std::vector<unsigned long> inodes;
    for (const auto& ns : spaces)
        inodes.push_back(ns.inode);
    std::vector<unsigned long> want{blue, 4026532111ul};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(inodes, want);
    HostUse use = scan();
    ASSERT_EQ(use.network[A("0000:05:00.0")].size(), 1u);
    EXPECT_NE(use.network[A("0000:05:00.0")][0].find("network namespace blue"), std::string::npos);
    EXPECT_NE(use.network[A("0000:05:00.0")][0].find("pid 401 (?)"), std::string::npos)
        << use.network[A("0000:05:00.0")][0];
}
