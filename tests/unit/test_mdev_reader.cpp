// The mdev reader (io/mdev_reader) on the fake kernel's mediated devices, and on hostile sysfs:
// a FIFO or a huge file where an attribute should be, a non-canonical UUID directory.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_kernel.hpp"
#include "mdev_test_host.hpp"
#include "io/mdev_reader.hpp"
#include "io/snapshot.hpp"

namespace vfiod {
namespace {

using test::FakeKernel;
using test::FakeTree;

const std::string kTypes = "sys/class/mdev_bus/mbochs/mdev_supported_types/";

std::string joined(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v)
        out += "\n  " + s;
    return out;
}

struct Host : test::FakeMdevHost {
    int create(const std::string& type, const std::string& uuid) {
        return kernel->write(kTypes + type + "/create", uuid);
    }
    MdevHost read(std::vector<std::string>* warnings) {
        KernelHostFs fs(tree.root());
        return read_mdev_host(fs, warnings);
    }
};

TEST(MdevReader, NoMdevSupportIsAnEmptyHostWithoutWarnings) {
    Host h;
    std::vector<std::string> w;
    EXPECT_EQ(h.read(&w), MdevHost{});
    EXPECT_TRUE(w.empty()) << joined(w);
}

// Parents with their types, names and available_instances; mdevs with parent, type, group and
// driver, as the kernel shows them after the probe.
TEST(MdevReader, ReadsParentsTypesAndMdevs) {
    Host h;
    h.kernel->register_mdev_parent(test::mbochs_parent());
    h.kernel->register_mdev_parent(test::mtty_parent());
    const std::string u0 = mdev_uuid("mbochs", "mbochs-small", 0);
    const std::string u1 = mdev_uuid("mbochs", "mbochs-large", 0);
    ASSERT_EQ(h.create("mbochs-small", u0), 0);
    ASSERT_EQ(h.create("mbochs-large", u1), 0);
    std::vector<std::string> w;
    MdevHost m = h.read(&w);
    EXPECT_TRUE(w.empty()) << joined(w);
    ASSERT_EQ(m.parents.size(), 2u);
    const MdevParent& p = m.parents.at("mbochs");
    EXPECT_EQ(p.devpath, "sys/devices/virtual/mbochs/mbochs");
    EXPECT_FALSE(p.address);
    ASSERT_EQ(p.types.size(), 3u);
    // 256 MB shared: small 4, medium 16, large 64; 68 taken.
    EXPECT_EQ(p.types.at("mbochs-small").available, (256u - 68) / 4);
    EXPECT_EQ(p.types.at("mbochs-large").available, (256u - 68) / 64);
    EXPECT_EQ(p.types.at("mbochs-small").name, "mbochs-small");
    EXPECT_EQ(m.parents.at("mtty").types.at("mtty-2").name, "Dual port serial");
    ASSERT_EQ(m.mdevs.size(), 2u);
    const Mdev& a = m.mdevs.at(u0);
    EXPECT_EQ(a.parent, "mbochs");
    EXPECT_EQ(a.type, "mbochs-small");
    EXPECT_EQ(a.driver, "mbochs");
    ASSERT_TRUE(a.iommu_group);
    EXPECT_EQ(m.mdevs.at(u1).type, "mbochs-large");
    EXPECT_NE(m.mdevs.at(u1).iommu_group, a.iommu_group);
    EXPECT_EQ(read_mdev_parent(KernelHostFs(h.tree.root()), "mbochs", nullptr), p);
    EXPECT_FALSE(read_mdev_parent(KernelHostFs(h.tree.root()), "mdpy", nullptr));
}

TEST(MdevReader, APciParentIsNamedByItsAddress) {
    Host h;
    test::MdevParentSpec gpu;
    gpu.name = "0000:00:03.0";
    gpu.mdev_driver = "nvidia-vgpu-vfio";
    gpu.budget = 16;
    gpu.types = {{"222", "GRID T4-1Q", 1, ""}};
    h.kernel->register_mdev_parent(gpu);
    std::vector<std::string> w;
    MdevHost m = h.read(&w);
    EXPECT_TRUE(w.empty()) << joined(w);
    const MdevParent& p = m.parents.at("0000:00:03.0");
    ASSERT_TRUE(p.address);
    EXPECT_EQ(p.address->str(), "0000:00:03.0");
    EXPECT_EQ(p.types.at("nvidia-222").name, "GRID T4-1Q");
    EXPECT_EQ(p.types.at("nvidia-222").available, 16u);
}

// Hostile sysfs: each oddity is one clear warning and the rest is still read; nothing blocks
// (a FIFO opened for reading would wait for a writer forever if the reader opened it so).
TEST(MdevReader, HostileEntriesAreWarnedAboutAndSkipped) {
    Host h;
    h.kernel->register_mdev_parent(test::mbochs_parent());
    const std::string u0 = mdev_uuid("mbochs", "mbochs-small", 0);
    ASSERT_EQ(h.create("mbochs-small", u0), 0);
    const std::string avail = kTypes + "mbochs-medium/available_instances";
    h.tree.remove(avail);
    ASSERT_EQ(::mkfifo((h.tree.root() + "/" + avail).c_str(), 0600), 0);
    h.tree.write_file(kTypes + "mbochs-large/name", std::string(1 << 20, 'x'));
    h.tree.write_file(kTypes + "mbochs-small/available_instances", "lots\n");
    // A directory the kernel would never name so: upper case, linking to a real mdev.
    const std::string upper = "6D966230-F3A1-5551-97F3-4AEC0DA0213A";
    h.tree.link("sys/bus/mdev/devices/" + upper, "sys/devices/virtual/mbochs/mbochs/" + u0);
    std::vector<std::string> w;
    MdevHost m = h.read(&w);
    const std::string root = h.tree.root() + "/";
    const std::string dir = root + "sys/devices/virtual/mbochs/mbochs/mdev_supported_types/";
    ASSERT_EQ(w.size(), 4u) << joined(w);
    EXPECT_EQ(w[0], dir + "mbochs-large/name: longer than 256 bytes; the type's directory "
                          "name is used");
    EXPECT_EQ(w[1], dir + "mbochs-medium/available_instances: a FIFO, not a regular file; no "
                          "mdev of this type is created");
    EXPECT_EQ(w[2], dir + "mbochs-small/available_instances: not a number: \"lots\"; no mdev "
                          "of this type is created");
    EXPECT_EQ(w[3], root + "sys/bus/mdev/devices/" + upper +
                        ": not a canonical lower-case UUID; left alone");
    const MdevParent& p = m.parents.at("mbochs");
    EXPECT_EQ(p.types.at("mbochs-large").name, "");
    EXPECT_TRUE(p.types.at("mbochs-large").available);
    EXPECT_FALSE(p.types.at("mbochs-medium").available);
    EXPECT_FALSE(p.types.at("mbochs-small").available);
    ASSERT_EQ(m.mdevs.size(), 1u);
    EXPECT_TRUE(m.mdevs.count(u0));
}

// An mdev whose link leads outside every parent (a planted entry) is left alone, with a warning.
TEST(MdevReader, AnMdevOutsideEveryParentIsLeftAlone) {
    Host h;
    h.kernel->register_mdev_parent(test::mbochs_parent());
    const std::string u = mdev_uuid("mbochs", "mbochs-small", 7);
    h.tree.write_file("sys/devices/virtual/elsewhere/" + u + "/uevent", "");
    h.tree.link("sys/bus/mdev/devices/" + u, "sys/devices/virtual/elsewhere/" + u);
    std::vector<std::string> w;
    MdevHost m = h.read(&w);
    ASSERT_EQ(w.size(), 1u) << joined(w);
    EXPECT_EQ(w[0], h.tree.root() + "/sys/bus/mdev/devices/" + u + ": its parent is not under " +
                        h.tree.root() + "/sys/class/mdev_bus; left alone");
    EXPECT_TRUE(m.mdevs.empty());
}

// Who holds an mdev open, by its group node or its iommufd node: what refuses its removal
// (in-use-mdev). The snapshot every front end plans from has it.
TEST(MdevReader, TheSnapshotNamesWhoHoldsAnMdevOpen) {
    Host h;
    h.kernel->register_mdev_parent(test::mbochs_parent());
    const std::string u0 = mdev_uuid("mbochs", "mbochs-small", 0);
    const std::string u1 = mdev_uuid("mbochs", "mbochs-small", 1);
    const std::string u2 = mdev_uuid("mbochs", "mbochs-small", 2);
    for (const auto& u : {u0, u1, u2})
        ASSERT_EQ(h.create("mbochs-small", u), 0);
    KernelHostFs fs(h.tree.root());
    const std::string group = *fs.link_name("sys/bus/mdev/devices/" + u0 + "/iommu_group");
    const auto cdevs = fs.list("sys/bus/mdev/devices/" + u1 + "/vfio-dev");
    ASSERT_EQ(cdevs.size(), 1u);
    h.tree.hold_open(4242, "qemu-system-x86", 20, "/dev/vfio/" + group);
    h.tree.hold_open(4243, "qemu-kvm", 21, "/dev/vfio/devices/" + cdevs[0]);
    Snapshot s = read_snapshot(fs);
    EXPECT_EQ(s.mdevs.mdevs.size(), 3u);
    ASSERT_EQ(s.use.mdevs.size(), 2u);
    ASSERT_EQ(s.use.mdevs.at(u0).size(), 1u);
    EXPECT_EQ(s.use.mdevs.at(u0)[0].find("/dev/vfio/" + group + " is open by "), 0u);
    EXPECT_NE(s.use.mdevs.at(u0)[0].find("4242"), std::string::npos) << s.use.mdevs.at(u0)[0];
    EXPECT_EQ(s.use.mdevs.at(u1).at(0).find("/dev/vfio/devices/" + cdevs[0] + " is open by "),
              0u);
    EXPECT_FALSE(s.use.mdevs.count(u2));
}

}  // namespace
}  // namespace vfiod
