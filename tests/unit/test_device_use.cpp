// Device nodes of PCI functions and who holds them open, read from fake trees shaped like sysfs
// and procfs (io/device_use, io/proc_fds), and the one proc/*/fd scan serving vfio's reader.
#include "io/device_use.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "host_scan.hpp"

using namespace vfiod;
using test::A;
using test::FakeTree;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

// A GPU with its HDMI audio in group 7, a NIC in group 8; char devices as the kernel lays them out.
void gpu_host(FakeTree& t) {
    t.enable_iommu();
    t.add_function(FakeTree::pci("0000:00:01.0", "8086", "1901", "060400", "pcieport", 1));
    t.add_function(FakeTree::pci("0000:01:00.0", "1002", "73bf", "030000", "amdgpu", 7, "0000:00:01.0"));
    t.add_function(FakeTree::pci("0000:01:00.1", "1002", "ab28", "040300", "snd_hda_intel", 7,
                                 "0000:00:01.0"));
    t.add_function(FakeTree::pci("0000:02:00.0", "8086", "10d3", "020000", "vfio-pci", 8));
    t.add_char_device("0000:01:00.0", "drm/card0", "dri/card0", 226, 0);
    t.add_char_device("0000:01:00.0", "drm/renderD128", "dri/renderD128", 226, 128);
    t.add_char_device("0000:01:00.1", "sound/card1/controlC1", "snd/controlC1", 116, 10);
    t.add_char_device("0000:01:00.1", "sound/card1/pcmC1D3p", "snd/pcmC1D3p", 116, 11);
    t.add_char_device("0000:02:00.0", "vfio-dev/vfio0", "vfio/devices/vfio0", 511, 0);
    // A char device of no PCI function.
    t.write_file("sys/devices/virtual/mem/null/uevent", "MAJOR=1\nMINOR=3\nDEVNAME=null\n");
    t.symlink("sys/dev/char/1:3", "../../devices/virtual/mem/null");
}

std::vector<std::string> names(const HostFs& fs, const std::vector<DeviceNode>& nodes) {
    std::vector<std::string> out;
    for (const auto& n : nodes)
        out.push_back(node_path(fs, n) + " " + std::to_string(n.devnum.first) + ":" +
                      std::to_string(n.devnum.second) + " " + n.owner.str());
    return out;
}

class DeviceNodes : public test::HostScan {};
class DeviceUse : public test::HostScan {};

}  // namespace

TEST_F(DeviceNodes, CharDevicesUnderFunctionsButNotVfiosOwn) {
    gpu_host(t);
    KernelHostFs fs(t.root());
    EXPECT_THAT(names(fs, read_device_nodes(fs)),
                ElementsAre("/dev/snd/controlC1 116:10 0000:01:00.1",
                            "/dev/snd/pcmC1D3p 116:11 0000:01:00.1",
                            "/dev/dri/card0 226:0 0000:01:00.0",
                            "/dev/dri/renderD128 226:128 0000:01:00.0"));
}

TEST_F(DeviceNodes, NvidiaNodeFromTheDriversProcInformation) {
    gpu_host(t);
    t.write_file("proc/devices", "Character devices:\n  1 mem\n195 nvidia-frontend\n\nBlock devices:\n");
    t.write_file("proc/driver/nvidia/gpus/0000:01:00.0/information",
                 "Model: \t\t NVIDIA H100 PCIe\nIRQ:   77\nDevice Minor: \t 2\n");
    t.write_file("proc/driver/nvidia/gpus/junk/information", "Device Minor: 5\n");
    t.write_file("proc/driver/nvidia/gpus/0000:03:00.0/information", "Device Minor: x\n");
    KernelHostFs fs(t.root());
    auto nodes = names(fs, read_device_nodes(fs));
    EXPECT_EQ(nodes.back(), "/dev/nvidia2 195:2 0000:01:00.0");
    EXPECT_EQ(nodes.size(), 5u);
}

TEST_F(DeviceNodes, NoNvidiaNodeWithoutItsMajor) {
    gpu_host(t);
    t.write_file("proc/driver/nvidia/gpus/0000:01:00.0/information", "Device Minor: 2\n");
    KernelHostFs fs(t.root());
    EXPECT_EQ(read_device_nodes(fs).size(), 4u);
}

TEST_F(DeviceUse, HoldersNamedByNodePidAndCommCompanionIncluded) {
    gpu_host(t);
    t.hold_open(812, "pipewire", 31, "/dev/snd/controlC1");
    t.hold_open(900, "Xorg", 12, "/dev/dri/card0");
    t.hold_open(900, "Xorg", 13, "/dev/dri/card0");  // two fds, one line
    t.hold_open(901, "bash", 0, "/dev/pts/0");
    t.hold_open(901, "bash", 3, "socket:[4242]");
    t.hold_open(902, "cat", 3, "/home/u/dev/snd/controlC1");  // a path, not the node
    HostUse use = scan();
    EXPECT_THAT(use.device[A("0000:01:00.1")],
                ElementsAre("/dev/snd/controlC1 is open by pid 812 (pipewire)"));
    EXPECT_THAT(use.device[A("0000:01:00.0")], ElementsAre("/dev/dri/card0 is open by pid 900 (Xorg)"));
    EXPECT_EQ(use.device.size(), 2u);
}

TEST_F(DeviceUse, NobodyHoldingMeansNoUse) {
    gpu_host(t);
    t.hold_open(901, "bash", 0, "/dev/null");
    EXPECT_THAT(scan().device, IsEmpty());
}

TEST_F(DeviceUse, CommIsPrintable) {
    gpu_host(t);
    t.hold_open(66, "evil\x1b[2J\nline", 4, "/dev/dri/renderD128");
    EXPECT_THAT(scan().device[A("0000:01:00.0")],
                ElementsAre("/dev/dri/renderD128 is open by pid 66 (evil\\x1b[2J\\x0aline)"));
}

// One scan of proc/*/fd serves both readers: vfio's users land in the same HostUse.
TEST_F(DeviceUse, TheSameScanFindsVfioUsersButVfioNodesAreNotDeviceUse) {
    gpu_host(t);
    t.hold_open(4242, "qemu-system-x86", 17, "/dev/vfio/8");
    t.hold_open(4243, "cloud-hyperviso", 5, "/dev/vfio/devices/vfio0");
    HostUse use = scan();
    EXPECT_THAT(use.vfio[A("0000:02:00.0")],
                ElementsAre("/dev/vfio/8 is open by pid 4242 (qemu-system-x86)",
                            "/dev/vfio/devices/vfio0 is open by pid 4243 (cloud-hyperviso)"));
    EXPECT_THAT(use.device, IsEmpty());
}

// A tree's fd links name the real host's nodes: they are matched by path, never stat()ed.
TEST(ProcFds, TreeFdsCarryNoDeviceNumber) {
    FakeTree t;
    t.hold_open(1, "init", 0, "/dev/null");
    KernelHostFs fs(t.root());
    auto open = scan_open_nodes(fs);
    ASSERT_EQ(open.size(), 1u);
    EXPECT_EQ(open[0].pid, "1");
    EXPECT_EQ(open[0].target, "/dev/null");
    EXPECT_FALSE(open[0].devnum);
}

// On the live host the scanner stats what the fd refers to: our own fd on /dev/null is 1:3.
TEST(ProcFds, LiveFdsCarryTheirDeviceNumber) {
    FILE* f = std::fopen("/dev/null", "r");
    ASSERT_NE(f, nullptr);
    KernelHostFs fs("/");
    const std::string self = std::to_string(getpid());
    bool found = false;
    for (const auto& o : scan_open_nodes(fs))
        if (o.pid == self && o.target == "/dev/null") {
            found = found || o.devnum == std::make_pair(1u, 3u);
        }
    std::fclose(f);
    EXPECT_TRUE(found);
}

// Processes that exit during the scan leave what the scan may meet: an fd directory without its
// comm, a pid directory without fds, an fd dir that is a file. And a process with 20,000 fds
// open on the same node is one line. The holders still there are named.
TEST_F(DeviceUse, ExitingProcessesAndFdFloodsAreHandled) {
    gpu_host(t);
    t.hold_open(700, "pipewire", 31, "/dev/snd/controlC1");
    t.remove("proc/700/comm");               // exited after its fds were read
    t.write_file("proc/701/comm", "gone\n");  // exited before: no fd directory
    t.write_file("proc/702/fd", "not a directory\n");
    t.symlink("proc/703/fd/0", "/dev/dri/nonexistent-node");
    for (unsigned fd = 0; fd < 20000; ++fd)
        t.symlink("proc/704/fd/" + std::to_string(fd), "/dev/dri/card0");
    t.write_file("proc/704/comm", "leaky\n");
    HostUse use = scan();
    EXPECT_THAT(use.device[A("0000:01:00.1")],
                ElementsAre("/dev/snd/controlC1 is open by pid 700 (?)"));
    EXPECT_THAT(use.device[A("0000:01:00.0")],
                ElementsAre("/dev/dri/card0 is open by pid 704 (leaky)"));
    EXPECT_EQ(use.device.size(), 2u);
}
