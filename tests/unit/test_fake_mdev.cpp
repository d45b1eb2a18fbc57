// The fake kernel's mediated devices (fake_mdev) held to the facts the real 6.1 kernel showed with
// its sample parents (tests/vm/scenarios/mdev-kernel.sh, in vm-daemon-host-truth's boot). Each
// test names the scenario's checks it mirrors, so one list of facts stands behind both: what the
// fake says here is what the kernel did there.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <utility>

#include "eventually.hpp"
#include "fake_kernel.hpp"

using namespace vfiod;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;
using vfiod::test::MdevParentSpec;
using vfiod::test::Uevent;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

namespace {

using namespace std::chrono_literals;

const std::string B = "sys/class/mdev_bus/";
const std::string T = "sys/class/mdev_bus/mbochs/mdev_supported_types/";
const std::string kBus = "sys/bus/mdev/devices/";
const std::string kMbochs = "sys/devices/virtual/mbochs/mbochs";
const std::string kDevMbochs = "/devices/virtual/mbochs/mbochs";
const std::string U1 = "8a6b2a65-1b1f-4e7e-a1c4-000000000001";
const std::string U2 = "8a6b2a65-1b1f-4e7e-a1c4-000000000002";
const std::string U3 = "8a6b2a65-1b1f-4e7e-a1c4-000000000003";
const std::string U4 = "8a6b2a65-1b1f-4e7e-a1c4-000000000004";
const std::string UX = "8a6b2a65-1b1f-4e7e-a1c4-0000000000ff";

// The errno of a result as the scenario's write_errno prints it.
std::string name_of(int err) {
    switch (err) {
    case 0: return "ok";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case ENOSPC: return "ENOSPC";
    case EUSERS: return "EUSERS";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case EIO: return "EIO";
    default: return std::strerror(err);
    }
}

// The guest's host: PCI functions in IOMMU groups 0-2 (so the first mdev's group is 3), its
// uevents recorded as Uevent::str() lines.
struct MdevHost {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    std::mutex m;
    std::vector<std::string> events;
    std::vector<std::string> pci_events;

    MdevHost() {
        tree.enable_iommu();
        tree.add_function(FakeTree::pci("0000:00:01.0", "8086", "29c0", "060000", "", 0));
        tree.add_function(FakeTree::pci("0000:00:02.0", "1af4", "1041", "020000", "virtio-pci", 1));
        tree.add_function(FakeTree::pci("0000:00:03.0", "10de", "1eb8", "030200", "nvidia", 2));
        start();
    }
    void start() {
        kernel = std::make_unique<FakeKernel>(tree);
        kernel->on_device_uevent([this](const Uevent& ev) {
            std::lock_guard lock(m);
            events.push_back(ev.str());
        });
        kernel->on_uevent([this](const std::string& action, const std::string& bdf) {
            std::lock_guard lock(m);
            pci_events.push_back(action + " " + bdf);
        });
    }
    std::vector<std::string> take_events() {
        std::lock_guard lock(m);
        return std::exchange(events, {});
    }
    std::string write(const std::string& rel, const std::string& value) {
        return name_of(kernel->write(rel, value));
    }
    std::string create(const std::string& type, const std::string& uuid,
                       const std::string& parent = "mbochs") {
        return write(B + parent + "/mdev_supported_types/" + type + "/create", uuid + "\n");
    }
    std::string remove(const std::string& uuid, const std::string& value = "1\n") {
        return write(kBus + uuid + "/remove", value);
    }
    std::string read(const std::string& rel) const { return kernel->read(rel).value_or("(absent)"); }
    std::string resolved(const std::string& rel) const { return kernel->resolve(rel).value_or(""); }
    std::string link(const std::string& rel) const { return kernel->link_name(rel).value_or(""); }
    bool exists(const std::string& rel) const { return kernel->exists(rel); }
    // "type=N ..." for every type of the parent, as the scenario's avail prints it.
    std::string avail(const std::string& parent) const {
        std::string out;
        for (const auto& t : kernel->list(B + parent + "/mdev_supported_types"))
            out += (out.empty() ? "" : " ") + t + "=" +
                   read(B + parent + "/mdev_supported_types/" + t + "/available_instances");
        return out;
    }
    std::string group(const std::string& uuid) const { return link(kBus + uuid + "/iommu_group"); }
};

// The uevents of an mdev's removal, in the kernel's order: its vfio device, its vfio group, the
// unbind, the mdev.
std::vector<std::string> removal(const std::string& parent, const std::string& uuid,
                                 const std::string& vfio, const std::string& group) {
    const std::string dir = parent + "/" + uuid;
    return {"remove " + dir + "/vfio-dev/" + vfio + " vfio-dev",
            "remove /devices/virtual/vfio/" + group + " vfio DEVNAME=/dev/vfio/" + group,
            "unbind " + dir + " mdev", "remove " + dir + " mdev"};
}

// A host with the three sample parents loaded, their load events taken.
struct Loaded : MdevHost {
    Loaded() {
        kernel->register_mdev_parent(test::mbochs_parent());
        kernel->register_mdev_parent(test::mtty_parent());
        kernel->register_mdev_parent(test::mdpy_parent());
        take_events();
    }
};

}  // namespace

// parents-load parent-class-links parent-virtual-dirs parent-subsystem-class mbochs-types
// mtty-types type-files device-api type-names available-at-load registered-event
// registered-after-parent-add: a virtual parent's class device is added, its types appear, then
// change with MDEV_STATE=registered.
TEST(FakeMdev, ParentsRegisterTheirTypesThenSayRegistered) {
    MdevHost h;
    h.kernel->register_mdev_parent(test::mbochs_parent());
    h.kernel->register_mdev_parent(test::mtty_parent());
    h.kernel->register_mdev_parent(test::mdpy_parent());

    EXPECT_EQ(h.kernel->readlink(B + "mbochs").value_or(""), "../../devices/virtual/mbochs/mbochs");
    EXPECT_EQ(h.resolved(B + "mbochs"), kMbochs);
    EXPECT_EQ(h.resolved(B + "mtty"), "sys/devices/virtual/mtty/mtty");
    EXPECT_EQ(h.resolved(B + "mdpy"), "sys/devices/virtual/mdpy/mdpy");
    EXPECT_EQ(h.resolved(B + "mbochs/subsystem"), "sys/class/mbochs");
    EXPECT_EQ(h.resolved("sys/class/mtty/mtty"), "sys/devices/virtual/mtty/mtty");
    EXPECT_THAT(h.kernel->list(T), ElementsAre("mbochs-large", "mbochs-medium", "mbochs-small"));
    EXPECT_THAT(h.kernel->list(B + "mtty/mdev_supported_types"), ElementsAre("mtty-1", "mtty-2"));
    EXPECT_THAT(h.kernel->list(T + "mbochs-small"),
                ElementsAre("available_instances", "create", "description", "device_api",
                            "devices", "name"));
    EXPECT_THAT(h.kernel->list(B + "mtty/mdev_supported_types/mtty-1"),
                ElementsAre("available_instances", "create", "device_api", "devices", "name"));
    EXPECT_EQ(h.read(T + "mbochs-small/device_api"), "vfio-pci");
    EXPECT_EQ(h.read(T + "mbochs-small/name"), "mbochs-small");
    EXPECT_EQ(h.read(B + "mtty/mdev_supported_types/mtty-2/name"), "Dual port serial");
    EXPECT_EQ(h.read(B + "mdpy/mdev_supported_types/mdpy-vga/name"), "mdpy-vga");
    EXPECT_EQ(h.read(T + "mbochs-small/description"), "virtual display, 4 MB video memory");
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=4 mbochs-medium=16 mbochs-small=64");
    EXPECT_EQ(h.avail("mtty"), "mtty-1=24 mtty-2=12");
    EXPECT_EQ(h.avail("mdpy"), "mdpy-hd=4 mdpy-vga=4 mdpy-xga=4");
    EXPECT_THAT(h.take_events(),
                ElementsAre("add /devices/virtual/mbochs/mbochs mbochs",
                            "change /devices/virtual/mbochs/mbochs mbochs MDEV_STATE=registered",
                            "add /devices/virtual/mtty/mtty mtty",
                            "change /devices/virtual/mtty/mtty mtty MDEV_STATE=registered",
                            "add /devices/virtual/mdpy/mdpy mdpy",
                            "change /devices/virtual/mdpy/mdpy mdpy MDEV_STATE=registered"));
    EXPECT_THAT(h.pci_events, IsEmpty());  // a virtual parent's events are not PCI's
}

// create-ok mdev-bus-link mdev-under-parent mdev-driver driver-lists-mdev mdev-type-link
// type-devices-link mdev-iommu-group group-only-mdev group-name group-type vfio-node
// vfio-class-device mdev-add-event mdev-add-no-driver vfio-group-add-event vfio-dev-add-event
// mdev-bind-event add-group-bind-order mdev-no-extra-properties mdev-files budget-shared.
TEST(FakeMdev, CreateMakesABoundMdevWithItsOwnGroupAndNode) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U1), "ok");

    const std::string d = kBus + U1;
    EXPECT_EQ(h.kernel->readlink(d).value_or(""),
              "../../../devices/virtual/mbochs/mbochs/" + U1);
    EXPECT_EQ(h.resolved(d), kMbochs + "/" + U1);
    EXPECT_EQ(h.link(d + "/driver"), "mbochs");
    EXPECT_EQ(h.resolved(d + "/driver"), "sys/bus/mdev/drivers/mbochs");
    EXPECT_TRUE(h.exists("sys/bus/mdev/drivers/mbochs/" + U1));
    EXPECT_EQ(h.kernel->readlink(d + "/mdev_type").value_or(""),
              "../mdev_supported_types/mbochs-small");
    EXPECT_EQ(h.resolved(T + "mbochs-small/devices/" + U1), kMbochs + "/" + U1);
    const std::string g = h.group(U1);
    EXPECT_EQ(g, "3");
    EXPECT_THAT(h.kernel->list("sys/kernel/iommu_groups/3/devices"), ElementsAre(U1));
    EXPECT_EQ(h.read("sys/kernel/iommu_groups/3/name"), "vfio-noiommu");
    EXPECT_EQ(h.read("sys/kernel/iommu_groups/3/type"), "unknown");
    EXPECT_TRUE(h.exists("dev/vfio/3"));
    EXPECT_EQ(h.resolved("sys/class/vfio/3"), "sys/devices/virtual/vfio/3");
    EXPECT_TRUE(h.exists(d + "/remove"));
    EXPECT_TRUE(h.exists(d + "/uevent"));
    EXPECT_EQ(h.read(d + "/uevent"), "DRIVER=mbochs");
    EXPECT_EQ(h.resolved(d + "/subsystem"), "sys/bus/mdev");
    EXPECT_THAT(h.kernel->list(d + "/vfio-dev"), ElementsAre("vfio0"));
    EXPECT_THAT(h.take_events(),
                ElementsAre("add " + kDevMbochs + "/" + U1 + " mdev",
                            "add /devices/virtual/vfio/3 vfio DEVNAME=/dev/vfio/3",
                            "add " + kDevMbochs + "/" + U1 + "/vfio-dev/vfio0 vfio-dev",
                            "bind " + kDevMbochs + "/" + U1 + " mdev DRIVER=mbochs"));
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=3 mbochs-medium=15 mbochs-small=63");
    // create and remove have no show().
    EXPECT_EQ(h.read(T + "mbochs-small/create"), "(absent)");
    EXPECT_EQ(h.read(d + "/remove"), "(absent)");
    // The type's other attributes have no store().
    EXPECT_EQ(h.write(T + "mbochs-small/available_instances", "9\n"), "EACCES");
    EXPECT_EQ(h.read(T + "mbochs-small/available_instances"), "63");
}

// eexist eexist-other-case eexist-other-parent uuid-upper-made-lower einval-short
// einval-no-hyphens einval-bad-digit einval-long accepts-no-newline.
TEST(FakeMdev, CreateTakesOneUuidOnceInAnyCase) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U1), "ok");
    h.take_events();
    std::string upper = U1;
    for (auto& c : upper)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(h.create("mbochs-small", U1), "EEXIST");
    EXPECT_EQ(h.create("mbochs-medium", upper), "EEXIST");
    EXPECT_EQ(h.create("mtty-1", U1, "mtty"), "EEXIST");
    EXPECT_THAT(h.take_events(), IsEmpty());

    EXPECT_EQ(h.create("mbochs-small", "8A6B2A65-1B1F-4E7E-A1C4-0000000000AB"), "ok");
    EXPECT_EQ(h.resolved(kBus + "8a6b2a65-1b1f-4e7e-a1c4-0000000000ab"),
              kMbochs + "/8a6b2a65-1b1f-4e7e-a1c4-0000000000ab");
    EXPECT_EQ(h.create("mbochs-small", "8a6b2a65-1b1f-4e7e-a1c4"), "EINVAL");
    EXPECT_EQ(h.create("mbochs-small", "8a6b2a651b1f4e7ea1c4000000000002"), "EINVAL");
    EXPECT_EQ(h.create("mbochs-small", "8a6b2a65-1b1f-4e7e-a1c4-00000000000g"), "EINVAL");
    EXPECT_EQ(h.write(T + "mbochs-small/create", U2 + "\n\n"), "EINVAL");
    EXPECT_EQ(h.write(T + "mbochs-small/create", U2), "ok");
    EXPECT_EQ(h.write(T + "mbochs-small/create", U3 + "x"), "ok");
    EXPECT_THAT(h.kernel->list("sys/bus/mdev/devices"),
                ElementsAre(U1, U2, U3, "8a6b2a65-1b1f-4e7e-a1c4-0000000000ab"));
}

// enospc-large enospc-no-mdev enospc-add-remove enospc-no-bind enospc-budget-kept
// mtty-budget-shared mtty-enospc: a get_available driver refuses in its probe, after the core
// added the device.
TEST(FakeMdev, ADriversOwnBudgetRefusesInProbe) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U1), "ok");
    for (const auto& u : {U2, U3, U4})
        ASSERT_EQ(h.create("mbochs-large", u), "ok");
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=0 mbochs-medium=3 mbochs-small=15");
    h.take_events();
    EXPECT_EQ(h.create("mbochs-large", UX), "ENOSPC");
    EXPECT_FALSE(h.exists(kBus + UX));
    EXPECT_FALSE(h.exists(kMbochs + "/" + UX));
    EXPECT_THAT(h.take_events(), ElementsAre("add " + kDevMbochs + "/" + UX + " mdev",
                                             "remove " + kDevMbochs + "/" + UX + " mdev"));
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=0 mbochs-medium=3 mbochs-small=15");
    EXPECT_EQ(h.create("mbochs-medium", UX), "ok");  // what is left still serves another type

    for (int i = 10; i < 22; ++i)
        ASSERT_EQ(h.create("mtty-2", "8a6b2a65-1b1f-4e7e-a1c4-0000000000" + std::to_string(i),
                           "mtty"), "ok");
    EXPECT_EQ(h.avail("mtty"), "mtty-1=0 mtty-2=0");
    EXPECT_EQ(h.create("mtty-1", "8a6b2a65-1b1f-4e7e-a1c4-0000000000fe", "mtty"), "ENOSPC");
}

// eusers-mdpy eusers-available-zero eusers-no-event: without get_available the core counts and
// refuses before it adds anything.
TEST(FakeMdev, TheCoresCountRefusesBeforeAnything) {
    Loaded h;
    for (const auto& u : {U2, U3, U4})
        ASSERT_EQ(h.create("mdpy-vga", u, "mdpy"), "ok");
    ASSERT_EQ(h.create("mdpy-hd", U1, "mdpy"), "ok");
    h.take_events();
    EXPECT_EQ(h.create("mdpy-xga", UX, "mdpy"), "EUSERS");
    EXPECT_EQ(h.avail("mdpy"), "mdpy-hd=0 mdpy-vga=0 mdpy-xga=0");
    EXPECT_THAT(h.take_events(), IsEmpty());
    ASSERT_EQ(h.remove(U3), "ok");
    EXPECT_EQ(h.avail("mdpy"), "mdpy-hd=1 mdpy-vga=1 mdpy-xga=1");
}

// remove-zero-noop remove-einval remove-ok remove-gone remove-budget-back remove-events
// remove-event-order.
TEST(FakeMdev, RemoveTakesTheMdevItsGroupAndNode) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U1), "ok");
    h.take_events();
    EXPECT_EQ(h.remove(U1, "0\n"), "ok");
    EXPECT_TRUE(h.exists(kBus + U1));
    EXPECT_EQ(h.remove(U1, "x\n"), "EINVAL");
    EXPECT_THAT(h.take_events(), IsEmpty());
    EXPECT_EQ(h.remove(U1), "ok");
    for (const std::string& p : {kBus + U1, kMbochs + "/" + U1, std::string("dev/vfio/3"),
                                 std::string("sys/kernel/iommu_groups/3"),
                                 T + "mbochs-small/devices/" + U1,
                                 std::string("sys/class/vfio/3"),
                                 std::string("sys/class/vfio-dev/vfio0")})
        EXPECT_FALSE(h.exists(p)) << p;
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=4 mbochs-medium=16 mbochs-small=64");
    EXPECT_EQ(h.take_events(), removal(kDevMbochs, U1, "vfio0", "3"));
    EXPECT_EQ(h.remove(U1), "ENOENT");  // the file went with it
    // The group number and the vfio index are taken again.
    ASSERT_EQ(h.create("mbochs-small", U2), "ok");
    EXPECT_EQ(h.group(U2), "3");
    EXPECT_THAT(h.kernel->list(kBus + U2 + "/vfio-dev"), ElementsAre("vfio0"));
}

// group-held-remove-returns group-held-mdev-gone group-held-group-gone: a process holding only
// the group's node does not make a remove wait.
TEST(FakeMdev, HoldingOnlyTheGroupDoesNotHoldTheMdev) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U2), "ok");
    h.tree.hold_open(4242, "holder", 5, "/dev/vfio/3");
    EXPECT_EQ(h.remove(U2), "ok");
    EXPECT_FALSE(h.exists(kMbochs + "/" + U2));
    EXPECT_FALSE(h.exists("sys/kernel/iommu_groups/3"));
    EXPECT_FALSE(h.exists("dev/vfio/3"));
    EXPECT_EQ(h.kernel->blocked_now(), 0u);
}

// device-open-remove-blocks device-open-bus-link-gone device-open-dir-stays device-open-files
// device-open-type-link-gone device-open-no-event device-open-node-stays device-open-eexist
// device-open-budget-held device-closed-remove-returns device-closed-gone
// device-closed-budget-back device-closed-events.
TEST(FakeMdev, RemoveWaitsWhileAVmHoldsTheDevice) {
    Loaded h;
    const std::string ud = "8a6b2a65-1b1f-4e7e-a1c4-0000000000d0";
    ASSERT_EQ(h.create("mbochs-small", ud), "ok");
    h.kernel->open_mdev_device(ud);
    h.take_events();
    auto writer = std::async(std::launch::async, [&] { return h.remove(ud); });
    ASSERT_TRUE(test::eventually([&] { return h.kernel->blocked_now() == 1; }, 5s));
    EXPECT_EQ(writer.wait_for(0s), std::future_status::timeout);
    EXPECT_FALSE(h.exists(kBus + ud));
    EXPECT_THAT(h.kernel->list(kMbochs + "/" + ud), ElementsAre("iommu_group", "vfio-dev"));
    EXPECT_FALSE(h.exists(T + "mbochs-small/devices/" + ud));
    EXPECT_THAT(h.take_events(), IsEmpty());
    EXPECT_TRUE(h.exists("dev/vfio/3"));
    EXPECT_EQ(h.create("mbochs-medium", ud), "EEXIST");
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=3 mbochs-medium=15 mbochs-small=63");
    EXPECT_EQ(h.write(kMbochs + "/" + ud + "/remove", "1\n"), "ENOENT");  // a second remove

    h.kernel->close_mdev_device(ud);
    ASSERT_EQ(writer.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(writer.get(), "ok");
    EXPECT_FALSE(h.exists(kMbochs + "/" + ud));
    EXPECT_FALSE(h.exists("dev/vfio/3"));
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=4 mbochs-medium=16 mbochs-small=64");
    EXPECT_EQ(h.take_events(), removal(kDevMbochs, ud, "vfio0", "3"));
}

// A fake kernel that goes away ends a remove that waits, so no writer outlives the tree.
TEST(FakeMdev, AWaitingRemoveEndsWithTheKernel) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-small", U1), "ok");
    h.kernel->open_mdev_device(U1);
    auto writer = std::async(std::launch::async, [&] { return h.remove(U1); });
    ASSERT_TRUE(test::eventually([&] { return h.kernel->blocked_now() == 1; }, 5s));
    h.kernel.reset();
    EXPECT_EQ(writer.get(), "ok");
}

// unload-removes-mdevs unregistered-event unregistered-after-mdev-remove unload-class-link-gone
// parent-remove-after-unregistered.
TEST(FakeMdev, UnloadRemovesTheMdevsThenSaysUnregistered) {
    Loaded h;
    const std::string m = "/devices/virtual/mtty/mtty";
    ASSERT_EQ(h.create("mtty-1", U4, "mtty"), "ok");
    ASSERT_EQ(h.create("mtty-2", U1, "mtty"), "ok");
    h.take_events();
    h.kernel->unregister_mdev_parent("mtty");
    EXPECT_FALSE(h.exists(kBus + U4));
    EXPECT_FALSE(h.exists(B + "mtty"));
    EXPECT_FALSE(h.exists("sys/devices/virtual/mtty/mtty"));
    EXPECT_FALSE(h.exists("sys/bus/mdev/drivers/mtty"));
    auto want = removal(m, U4, "vfio0", "3");
    for (auto& line : removal(m, U1, "vfio1", "4"))
        want.push_back(line);
    want.push_back("change " + m + " mtty MDEV_STATE=unregistered");
    want.push_back("remove " + m + " mtty");
    EXPECT_EQ(h.take_events(), want);
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=4 mbochs-medium=16 mbochs-small=64");
}

// A PCI parent (a vGPU's GPU): its function's directory is the parent, its types take its
// driver's name, and its change uevent is a PCI function's, which the PCI sink sees too.
TEST(FakeMdev, APciParentIsItsFunction) {
    MdevHost h;
    MdevParentSpec vgpu;
    vgpu.name = "0000:00:03.0";
    vgpu.mdev_driver = "nvidia-vgpu-vfio";
    vgpu.budget = 16;  // GB of frame buffer
    vgpu.types = {{"222", "GRID T4-1Q", 1, ""}, {"223", "GRID T4-2Q", 2, ""}};
    h.kernel->register_mdev_parent(vgpu);
    const std::string fn = "sys/devices/pci0000:00/0000:00:03.0";
    EXPECT_EQ(h.resolved(B + "0000:00:03.0"), fn);
    EXPECT_THAT(h.kernel->list(B + "0000:00:03.0/mdev_supported_types"),
                ElementsAre("nvidia-222", "nvidia-223"));
    EXPECT_EQ(h.read(B + "0000:00:03.0/mdev_supported_types/nvidia-222/name"), "GRID T4-1Q");
    EXPECT_THAT(h.take_events(),
                ElementsAre("change /devices/pci0000:00/0000:00:03.0 pci DRIVER=nvidia "
                            "PCI_SLOT_NAME=0000:00:03.0 MDEV_STATE=registered"));
    EXPECT_THAT(h.pci_events, ElementsAre("change 0000:00:03.0"));

    ASSERT_EQ(h.write("sys/bus/pci/devices/0000:00:03.0/mdev_supported_types/nvidia-223/create",
                      U1 + "\n"), "ok");
    EXPECT_EQ(h.resolved(kBus + U1), fn + "/" + U1);
    EXPECT_EQ(h.link(kBus + U1 + "/driver"), "nvidia-vgpu-vfio");
    EXPECT_EQ(h.avail("0000:00:03.0"), "nvidia-222=14 nvidia-223=7");
    EXPECT_EQ(h.link("sys/bus/pci/devices/0000:00:03.0/driver"), "nvidia");  // untouched
}

// A fake kernel started over a tree that has mdevs (vfiod restarted, the host not): the parent
// registered before, no uevent; its mdevs keep their budget and UUIDs.
TEST(FakeMdev, ARestartedKernelAdoptsTheMdevsOfTheTree) {
    Loaded h;
    ASSERT_EQ(h.create("mbochs-large", U1), "ok");
    h.take_events();
    h.start();
    h.kernel->register_mdev_parent(test::mbochs_parent(), false);
    EXPECT_THAT(h.take_events(), IsEmpty());
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=3 mbochs-medium=12 mbochs-small=48");
    EXPECT_EQ(h.create("mbochs-small", U1), "EEXIST");
    ASSERT_EQ(h.create("mbochs-small", U2), "ok");
    EXPECT_EQ(h.group(U2), "4");
    EXPECT_THAT(h.kernel->list(kBus + U2 + "/vfio-dev"), ElementsAre("vfio1"));
    EXPECT_EQ(h.remove(U1), "ok");
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=3 mbochs-medium=15 mbochs-small=63");
}

// A probe that fails (a vGPU driver's error): add, then remove, the driver's errno, nothing kept.
TEST(FakeMdev, AFailingProbeAddsThenRemoves) {
    Loaded h;
    h.kernel->fail_mdev_probe("mbochs", EIO);
    EXPECT_EQ(h.create("mbochs-small", U1), "EIO");
    EXPECT_FALSE(h.exists(kBus + U1));
    EXPECT_THAT(h.take_events(), ElementsAre("add " + kDevMbochs + "/" + U1 + " mdev",
                                             "remove " + kDevMbochs + "/" + U1 + " mdev"));
    EXPECT_EQ(h.avail("mbochs"), "mbochs-large=4 mbochs-medium=16 mbochs-small=64");
    h.kernel->fail_mdev_probe("mbochs", 0);
    EXPECT_EQ(h.create("mbochs-small", U1), "ok");
}

// The writes reach the same attribute by any of its paths: the class link, the canonical
// directory, the bus link.
TEST(FakeMdev, WritesTakeAnyPathToTheAttribute) {
    Loaded h;
    EXPECT_EQ(h.write(kMbochs + "/mdev_supported_types/mbochs-small/create", U1 + "\n"), "ok");
    EXPECT_EQ(h.write("sys/devices/virtual/mbochs/mbochs/" + U1 + "/remove", "1"), "ok");
    EXPECT_FALSE(h.exists(kBus + U1));
    EXPECT_EQ(h.write(T + "mbochs-tiny/create", U1 + "\n"), "ENOENT");
}
