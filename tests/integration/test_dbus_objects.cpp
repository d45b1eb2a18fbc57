// DbusObjects on a private dbus-daemon, driven with hand-made inventories: keys at the ends of
// their ranges are reachable by their paths and by no other spelling, PropertiesChanged names
// only what changed, and a signal that cannot be sent throws sdbus::Error, which is what
// Service::publish catches to mark what failed and send it again.
#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <set>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "private_bus.hpp"
#include "service/authorization.hpp"
#include "service/call_log.hpp"
#include "service/dbus_objects.hpp"
#include "service/sd_bus_objects.hpp"
#include "service/service.hpp"

namespace vfiod::test {
namespace {

using namespace std::chrono_literals;
using ManagedObjects =
    std::map<sdbus::ObjectPath, std::map<std::string, std::map<std::string, sdbus::Variant>>>;

const PciAddress kVmd{0x10000, 0, 0, 0};           // a VMD domain: five hex digits
const PciAddress kLast{0xffff, 0xff, 0x1f, 7};

Inventory inventory() {
    Inventory inv;
    inv.groups[0] = {0, GroupState::Pending, Reason::None, {}, {kVmd}};
    inv.groups[UINT_MAX] = {UINT_MAX, GroupState::Refused, Reason::None, {kLast}, {kLast}};
    DeviceInfo vmd;
    vmd.address = kVmd;
    vmd.driver = "nvme";
    vmd.resource_name = "odd/\xff name";  // not UTF-8: published as U+FFFD
    inv.devices[kVmd] = vmd;
    DeviceInfo last;
    last.address = kLast;
    last.group = UINT_MAX;
    inv.devices[kLast] = last;
    return inv;
}

InventoryChange everything(const Inventory& inv) {
    InventoryChange c;
    c.manager = true;
    for (const auto& [id, g] : inv.groups)
        c.groups.insert(id);
    for (const auto& [a, d] : inv.devices)
        c.devices.insert(a);
    return c;
}

class DbusObjectsTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(bus_.up()) << "dbus-daemon did not start";
        server_ = sdbus::createSessionBusConnectionWithAddress(bus_.address());
        auth_ = std::make_unique<Authorizer>(*server_);
        objects_ = std::make_unique<DbusObjects>(*server_, service_, *auth_, log_);
        server_->requestName("org.vfiod1");
        client_ = sdbus::createSessionBusConnectionWithAddress(bus_.address());
    }
    void TearDown() override {
        if (serving_)
            server_->leaveEventLoop();
    }
    // The server answers on a thread of its own from here on; publish before.
    void serve() {
        server_->enterEventLoopAsync();
        serving_ = true;
    }
    std::string error_of_get(const std::string& path, const char* interface, const char* name) {
        try {
            sdbus::createProxy(*client_, "org.vfiod1", path)
                ->getProperty(name)
                .onInterface(interface);
            return "";
        } catch (const sdbus::Error& e) {
            return e.getName();
        }
    }

    FakeTree tree_;
    FakeKernel kernel_{tree_};
    PrivateBus bus_{tree_.root()};
    Service service_{kernel_, {}};
    CallLog log_;
    std::unique_ptr<sdbus::IConnection> server_;
    std::unique_ptr<Authorizer> auth_;
    std::unique_ptr<DbusObjects> objects_;
    std::unique_ptr<sdbus::IConnection> client_;
    bool serving_ = false;
};

TEST_F(DbusObjectsTest, EveryKeyByItsOwnPathAndNoOtherSpelling) {
    Inventory inv = inventory();
    objects_->publish(inv, everything(inv));
    serve();

    auto vmd = sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1/device/10000_00_00_0");
    EXPECT_EQ(vmd->getProperty("Address").onInterface("org.vfiod1.Device").get<std::string>(),
              "10000:00:00.0");
    EXPECT_EQ(vmd->getProperty("ResourceName").onInterface("org.vfiod1.Device").get<std::string>(),
              "odd/\xef\xbf\xbd name");
    auto last = sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1/group/4294967295");
    EXPECT_EQ(last->getProperty("Id").onInterface("org.vfiod1.Group").get<uint32_t>(), UINT_MAX);
    EXPECT_EQ(last->getProperty("Blockers")
                  .onInterface("org.vfiod1.Group")
                  .get<std::vector<std::string>>(),
              std::vector<std::string>{"ffff:ff:1f.7"});
    auto dev = sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1/device/ffff_ff_1f_7");
    EXPECT_EQ(dev->getProperty("Group").onInterface("org.vfiod1.Device").get<sdbus::ObjectPath>(),
              "/org/vfiod1/group/4294967295");
    EXPECT_EQ(error_of_get("/org/vfiod1/group/0", "org.vfiod1.Group", "State"), "");

    const char* unknown = "org.freedesktop.DBus.Error.UnknownObject";
    for (const char* path : {"/org/vfiod1/device/010000_00_00_0", "/org/vfiod1/device/FFFF_ff_1f_7",
                             "/org/vfiod1/device/ffff_ff_1f_7/x", "/org/vfiod1/device/ffff_ff_1f",
                             "/org/vfiod1/device/ffff_ff_1f_7_0", "/org/vfiod1/device/_"})
        EXPECT_EQ(error_of_get(path, "org.vfiod1.Device", "Driver"), unknown) << path;
    for (const char* path : {"/org/vfiod1/group/00", "/org/vfiod1/group/4294967296",
                             "/org/vfiod1/group/1", "/org/vfiod1/group/0/0"})
        EXPECT_EQ(error_of_get(path, "org.vfiod1.Group", "State"), unknown) << path;

    ManagedObjects all;
    sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1")
        ->callMethod("GetManagedObjects")
        .onInterface("org.freedesktop.DBus.ObjectManager")
        .storeResultsTo(all);
    std::set<std::string> paths;
    for (const auto& [path, interfaces] : all)
        if (path != "/org/vfiod1")
            paths.insert(path);
    EXPECT_EQ(paths, (std::set<std::string>{"/org/vfiod1/device/10000_00_00_0",
                                            "/org/vfiod1/device/ffff_ff_1f_7",
                                            "/org/vfiod1/group/0", "/org/vfiod1/group/4294967295"}));
    EXPECT_EQ(all["/org/vfiod1/device/ffff_ff_1f_7"]["org.vfiod1.Device"].size(), 12u);
    EXPECT_EQ(all["/org/vfiod1/group/0"]["org.vfiod1.Group"].size(), 6u);
}

TEST_F(DbusObjectsTest, PropertiesChangedNamesOnlyWhatChanged) {
    Inventory inv = inventory();
    objects_->publish(inv, everything(inv));
    serve();
    std::mutex mu;
    std::vector<std::set<std::string>> seen;
    auto watch = sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1/device/10000_00_00_0");
    watch->uponSignal("PropertiesChanged")
        .onInterface("org.freedesktop.DBus.Properties")
        .call([&](const std::string& interface, const std::map<std::string, sdbus::Variant>& changed,
                  const std::vector<std::string>&) {
            std::set<std::string> names;
            for (const auto& [name, value] : changed)
                names.insert(interface + "." + name);
            std::lock_guard l(mu);
            seen.push_back(names);
        });
    watch->finishRegistration();
    client_->enterEventLoopAsync();
    server_->leaveEventLoop();  // publishing happens on the bus's thread, as in vfiod
    serving_ = false;

    inv.devices[kVmd].driver = "vfio-pci";
    inv.devices[kVmd].group = 7;  // IommuGroup and Group both
    InventoryChange change;
    change.devices.insert(kVmd);
    objects_->publish(inv, change);
    objects_->publish(inv, change);  // the same again: nothing to say
    serve();
    for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(20ms)) {
        std::lock_guard l(mu);
        if (!seen.empty())
            break;
    }
    std::this_thread::sleep_for(200ms);
    client_->leaveEventLoop();
    std::lock_guard l(mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], (std::set<std::string>{"org.vfiod1.Device.Driver",
                                              "org.vfiod1.Device.IommuGroup",
                                              "org.vfiod1.Device.Group"}));
}

TEST_F(DbusObjectsTest, ASignalThatCannotBeSentThrowsSdbusError) {
    Inventory inv = inventory();
    objects_->publish(inv, everything(inv));
    auto probe = sdbus::createObject(*server_, "/probe");
    sd_bus_close(sd_bus_of(*probe));

    Inventory changed = inv;
    changed.groups[0].state = GroupState::Failed;
    InventoryChange one;
    one.groups.insert(0);
    EXPECT_THROW(objects_->publish(changed, one), sdbus::Error);  // PropertiesChanged
    Inventory added = inv;
    added.groups[5] = {5, GroupState::Pending, Reason::None, {}, {}};
    InventoryChange five;
    five.groups.insert(5);
    EXPECT_THROW(objects_->publish(added, five), sdbus::Error);  // InterfacesAdded
    Inventory removed = inv;
    removed.groups.erase(0);
    EXPECT_THROW(objects_->publish(removed, one), sdbus::Error);  // InterfacesRemoved
    // And the objects still go quietly with the bus closed.
    EXPECT_NO_THROW(objects_.reset());
}

}  // namespace
}  // namespace vfiod::test
