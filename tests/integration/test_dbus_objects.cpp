// DbusObjects on a private dbus-daemon, driven with hand-made inventories: keys at the ends of
// their ranges are reachable by their paths and by no other spelling, PropertiesChanged names
// only what changed, and a signal that cannot be sent throws sdbus::Error, which is what
// Service::publish catches to mark what failed and send it again. Bulk reads (GetManagedObjects,
// Introspect, Plan) wait behind every other call, by count, not by clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <sdbus-c++/sdbus-c++.h>

#include "eventually.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "private_bus.hpp"
#include "dbus_client.hpp"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/objects.hpp"
#include "infra/loop.hpp"
#include "dbus/raw_bus.hpp"
#include "dbus/sd_bus_objects.hpp"
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
    for (const auto& [a, p] : inv.pfs)
        c.pfs.insert(a);
    for (const auto& [u, m] : inv.mdevs)
        c.mdevs.insert(u);
    return c;
}

PfInfo pf_info(const PciAddress& a, unsigned total, unsigned now, unsigned wanted, PfState state,
               Reason reason = Reason::None, std::vector<PciAddress> blockers = {}) {
    return {a, total, now, wanted, state, reason, std::move(blockers)};
}

// Two PFs at the ends of the address range: a VMD domain (five hex digits) and the last one.
Inventory pf_inventory() {
    Inventory inv;
    inv.pfs[kVmd] = pf_info(kVmd, 2, 0, 2, PfState::Pending);
    inv.pfs[kLast] = pf_info(kLast, 7, 0, 8, PfState::Refused, Reason::VfsExceedTotal, {kLast});
    return inv;
}

// A plain sd-bus client that sends calls without waiting for their replies and records the order
// in which the replies come: "label" for a return, "label error-name" for an error.
class Pipeline {
public:
    explicit Pipeline(const std::string& address) {
        sd_bus_new(&bus_);
        sd_bus_set_address(bus_, address.c_str());
        sd_bus_set_bus_client(bus_, 1);
        up_ = sd_bus_start(bus_) >= 0;
    }
    ~Pipeline() {
        for (auto* slot : slots_)
            sd_bus_slot_unref(slot);
        sd_bus_flush_close_unref(bus_);
    }
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;
    bool up() const { return up_; }

    void call(std::string label, const char* dest, const char* path, const char* interface,
              const char* member, const char* arg = nullptr) {
        sd_bus_message* m = nullptr;
        sd_bus_message_new_method_call(bus_, &m, dest, path, interface, member);
        if (arg)
            sd_bus_message_append(m, "s", arg);
        labels_.push_back({this, std::move(label)});
        sd_bus_slot* slot = nullptr;
        if (sd_bus_call_async(bus_, &slot, m, &Pipeline::on_reply, &labels_.back(), 0) >= 0)
            slots_.push_back(slot);
        sd_bus_message_unref(m);
    }
    // Returns once the bus has routed every call sent so far: it handles a connection's
    // messages in order, so its answer to a call of its own comes after it passed them on.
    void barrier() {
        sd_bus_flush(bus_);
        sd_bus_error e = SD_BUS_ERROR_NULL;
        sd_bus_message* reply = nullptr;
        sd_bus_call_method(bus_, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                           "org.freedesktop.DBus", "GetId", &e, &reply, "");
        sd_bus_message_unref(reply);
        sd_bus_error_free(&e);
    }
    // The replies, once `n` have come (a minute at most: a safety net, not a measurement).
    const std::vector<std::string>& replies(size_t n) {
        auto end = std::chrono::steady_clock::now() + 60s;
        while (order_.size() < n && std::chrono::steady_clock::now() < end)
            if (sd_bus_process(bus_, nullptr) == 0)
                sd_bus_wait(bus_, 100000);
        return order_;
    }
    // Where the first reply starting with `label` came, or -1.
    long position(const std::string& label) const {
        for (size_t i = 0; i < order_.size(); ++i)
            if (order_[i].rfind(label, 0) == 0)
                return static_cast<long>(i);
        return -1;
    }

private:
    struct Label {
        Pipeline* self;
        std::string text;
    };
    static int on_reply(sd_bus_message* m, void* userdata, sd_bus_error*) {
        auto* l = static_cast<Label*>(userdata);
        const sd_bus_error* e = sd_bus_message_get_error(m);
        l->self->order_.push_back(e ? l->text + " " + e->name : l->text);
        return 1;
    }

    sd_bus* bus_ = nullptr;
    bool up_ = false;
    std::deque<Label> labels_;
    std::vector<sd_bus_slot*> slots_;
    std::vector<std::string> order_;
};

// 1,024 groups of one function each: a GetManagedObjects that costs milliseconds to build.
Inventory large_inventory() {
    Inventory inv;
    for (unsigned i = 0; i < 1024; ++i) {
        PciAddress a{0, static_cast<uint8_t>(i / 256), static_cast<uint8_t>(i / 8 % 32),
                     static_cast<uint8_t>(i % 8)};
        inv.groups[i] = {i, GroupState::Pending, Reason::None, {}, {a}};
        DeviceInfo d;
        d.address = a;
        d.group = i;
        d.driver = "vfio-pci";
        inv.devices[a] = d;
    }
    return inv;
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
    void TearDown() override { stop_serving(); }
    // The server answers on a thread of its own from here on, in vfiod's event loop (the
    // service's replies sent after each dispatch, held reads put back one per turn); publish
    // before, or after stop_serving().
    void serve() {
        auto loop = std::make_shared<Loop>(*server_, signal_set({}));
        loop->after_each([this] { service_.publish(); });
        loop->release_held(objects_->hold_bulk_reads());
        auto mailbox = loop->mailbox();
        auto thread = std::make_shared<std::thread>([loop] { loop->run(); });
        stop_ = [loop, mailbox, thread] {
            mailbox->post([loop] { loop->quit(0); });
            thread->join();
        };
    }
    void stop_serving() {
        if (stop_)
            std::exchange(stop_, nullptr)();
    }
    std::pair<std::set<std::string>, std::set<std::string>> served_and_declared(
        const std::string& path, const std::string& interface);
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
    std::function<void()> stop_;
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
    EXPECT_EQ(all["/org/vfiod1/device/ffff_ff_1f_7"]["org.vfiod1.Device"].size(), 14u);
    EXPECT_EQ(all["/org/vfiod1/group/0"]["org.vfiod1.Group"].size(), 7u);
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
    stop_serving();  // publishing happens on the loop's thread, as in vfiod

    inv.devices[kVmd].driver = "vfio-pci";
    inv.devices[kVmd].group = 7;  // IommuGroup and Group both
    InventoryChange change;
    change.devices.insert(kVmd);
    objects_->publish(inv, change);
    objects_->publish(inv, change);  // the same again: nothing to say
    // A marker after them, on the same connection: once it is seen, so is all that came before.
    inv.devices[kVmd].driver = "nvme";
    objects_->publish(inv, change);
    serve();
    EXPECT_TRUE(eventually([&] {
        std::lock_guard l(mu);
        return seen.size() >= 2;
    }, 5s));
    client_->leaveEventLoop();
    std::lock_guard l(mu);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], (std::set<std::string>{"org.vfiod1.Device.Driver",
                                              "org.vfiod1.Device.IommuGroup",
                                              "org.vfiod1.Device.Group"}));
    EXPECT_EQ(seen[1], std::set<std::string>{"org.vfiod1.Device.Driver"}) << "not the marker";
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

// Issue 23, finding 6: sd-bus handles messages in order, so a call queued behind bulk reads
// waited for every one of them. All calls are in vfiod's socket before its loop turns: the
// property read comes back first, ahead of every read held back, which are served in order.
TEST_F(DbusObjectsTest, BulkReadsWaitBehindEveryOtherCall) {
    Inventory inv = large_inventory();
    objects_->publish(inv, everything(inv));
    Pipeline client(bus_.address());
    ASSERT_TRUE(client.up());
    for (int i = 0; i < 10; ++i)
        client.call("gmo", "org.vfiod1", "/org/vfiod1", "org.freedesktop.DBus.ObjectManager",
                    "GetManagedObjects");
    client.call("plan", "org.vfiod1", "/org/vfiod1", "org.vfiod1.Manager", "Plan");
    client.call("introspect", "org.vfiod1", "/org/vfiod1/device",
                "org.freedesktop.DBus.Introspectable", "Introspect");
    client.call("get", "org.vfiod1", "/org/vfiod1/group/7", "org.freedesktop.DBus.Properties",
                "Get");  // no arguments: InvalidArgs, answered inline all the same
    client.barrier();
    serve();
    auto order = client.replies(13);
    stop_serving();
    ASSERT_EQ(order.size(), 13u);
    EXPECT_EQ(order[0].rfind("get ", 0), 0u) << "the cheap call is not held: " << order[0];
    EXPECT_EQ(client.position("plan"), 11) << "held reads keep their order";
    EXPECT_EQ(client.position("introspect"), 12);
    for (int i = 1; i <= 10; ++i)
        EXPECT_EQ(order[i], "gmo") << "reply " << i;
}

// A mutating call needs bus round trips of its own (who is the caller? polkit?): while they are
// out, held reads are served, one per loop turn. It is answered after a few of 100, not after
// all of them as before.
TEST_F(DbusObjectsTest, AMutatingCallWaitsForAFewHeldReadsNotAll) {
    Inventory inv = large_inventory();
    objects_->publish(inv, everything(inv));
    Pipeline client(bus_.address());
    ASSERT_TRUE(client.up());
    for (int i = 0; i < 100; ++i)
        client.call("gmo", "org.vfiod1", "/org/vfiod1", "org.freedesktop.DBus.ObjectManager",
                    "GetManagedObjects");
    // Root: InvalidArgs from the service; anyone else: AccessDenied (no polkit on this bus).
    client.call("bind", "org.vfiod1", "/org/vfiod1", "org.vfiod1.Manager", "Bind", "x");
    client.barrier();
    serve();
    auto order = client.replies(101);
    stop_serving();
    ASSERT_EQ(order.size(), 101u);
    long bind = client.position("bind ");
    EXPECT_GE(bind, 0) << "Bind answered with an error";
    EXPECT_LT(bind, 50) << "Bind waited for " << bind << " of 100 GetManagedObjects";
}

// The cap: past `max` held calls, one more is answered LimitsExceeded at once; the held ones are
// answered as they are put back.
TEST_F(DbusObjectsTest, HeldCallsAreBounded) {
    auto probe = sdbus::createObject(*server_, "/probe");
    HeldCalls held(sd_bus_of(*probe),
                   [](sd_bus_message* m) { return sd_bus_message_is_method_call(m, nullptr, "Ping") > 0; },
                   4);
    Pipeline client(bus_.address());
    ASSERT_TRUE(client.up());
    for (int i = 0; i < 6; ++i)
        client.call("ping", "org.vfiod1", "/probe", "org.freedesktop.DBus.Peer", "Ping");
    client.barrier();
    sd_bus* server = sd_bus_of(*probe);
    while (sd_bus_process(server, nullptr) > 0) {
    }
    EXPECT_EQ(held.held(), 4u);
    auto order = client.replies(2);
    ASSERT_EQ(order.size(), 2u);
    EXPECT_EQ(order[0], "ping org.freedesktop.DBus.Error.LimitsExceeded");
    EXPECT_EQ(order[1], "ping org.freedesktop.DBus.Error.LimitsExceeded");
    for (int i = 0; i < 4; ++i) {
        sd_bus_flush(server);  // a call is put back only once the replies before it are out
        EXPECT_EQ(held.release_one(), i < 3);
        while (sd_bus_process(server, nullptr) > 0) {
        }
    }
    order = client.replies(6);
    EXPECT_EQ(order.size(), 6u);
    EXPECT_EQ(order.back(), "ping") << "a call put back is answered, not held again";
    EXPECT_EQ(held.held(), 0u);
}

// The D-Bus encoder (dbus/device.cpp) and the client's decoder agree: the client reads back the
// record the daemon published (core/plan.hpp DeviceRecord), every field of it, with a bridge's
// empty Target read as none, as the planner had it.
TEST_F(DbusObjectsTest, TheClientReadsBackThePublishedRecord) {
    const PciAddress gpu{0, 0x41, 0, 0}, bridge{0, 0x40, 1, 0};
    auto in_group_7 = [](const PciAddress& a, uint16_t vendor, uint16_t device, uint32_t cls,
                         const char* driver, Role role) {
        DeviceInfo d;
        static_cast<FunctionFacts&>(d) = {a, vendor, device, cls, driver, 3};
        d.role = role;
        d.group = 7;
        return d;
    };
    DeviceInfo g = in_group_7(gpu, 0x10de, 0x2331, 0x030200, "vfio-pci", Role::Allowlisted);
    g.target = "nvgrace_gpu_vfio_pci";
    g.resource_name = "nvidia.com/GH100";
    g.original_driver = "nvidia";
    const DeviceInfo b = in_group_7(bridge, 0x8086, 0xa110, 0x060400, "pcieport", Role::Bridge);
    Inventory inv;
    inv.devices = {{gpu, g}, {bridge, b}};
    inv.groups[7] = {7, GroupState::Bound, Reason::None, {}, {bridge, gpu}};
    objects_->publish(inv, everything(inv));
    serve();

    client::DaemonView view;
    ASSERT_TRUE(client::fetch_view(*client_, &view).ok());
    ASSERT_EQ(view.groups.size(), 1u);
    const auto& devices = view.groups[0].plan.devices;
    ASSERT_EQ(devices.size(), 2u);
    EXPECT_TRUE(static_cast<const DeviceRecord&>(devices[0]) == b);
    EXPECT_FALSE(devices[0].target);
    EXPECT_TRUE(static_cast<const DeviceRecord&>(devices[1]) == g);
    EXPECT_EQ(devices[1].numa_node, 3);
}


// PhysicalFunction objects (DESIGN §11) at both ends of the address range: reachable by their own
// path and no other spelling, every property as published, every string plain ASCII (a PfInfo
// holds no host text: the address is re-spelled from its numbers, the rest are codes).
TEST_F(DbusObjectsTest, PhysicalFunctionsByTheirOwnPathWithEveryProperty) {
    Inventory inv = pf_inventory();
    objects_->publish(inv, everything(inv));
    serve();

    ManagedObjects all;
    sdbus::createProxy(*client_, "org.vfiod1", "/org/vfiod1")
        ->callMethod("GetManagedObjects")
        .onInterface("org.freedesktop.DBus.ObjectManager")
        .storeResultsTo(all);
    auto& vmd = all["/org/vfiod1/pf/10000_00_00_0"]["org.vfiod1.PhysicalFunction"];
    ASSERT_EQ(vmd.size(), 7u);
    EXPECT_EQ(vmd["Address"].get<std::string>(), "10000:00:00.0");
    EXPECT_EQ(vmd["TotalVfs"].get<uint32_t>(), 2u);
    EXPECT_EQ(vmd["NumVfs"].get<uint32_t>(), 0u);
    EXPECT_EQ(vmd["WantedVfs"].get<uint32_t>(), 2u);
    EXPECT_EQ(vmd["State"].get<std::string>(), "pending");
    EXPECT_EQ(vmd["Reason"].get<std::string>(), "");
    EXPECT_TRUE(vmd["Blockers"].get<std::vector<std::string>>().empty());
    auto& last = all["/org/vfiod1/pf/ffff_ff_1f_7"]["org.vfiod1.PhysicalFunction"];
    ASSERT_EQ(last.size(), 7u);
    EXPECT_EQ(last["Reason"].get<std::string>(), "vfs-exceed-total");
    EXPECT_EQ(last["State"].get<std::string>(), "refused");
    EXPECT_EQ(last["Blockers"].get<std::vector<std::string>>(),
              std::vector<std::string>{"ffff:ff:1f.7"});
    for (auto* props : {&vmd, &last})
        for (const char* name : {"Address", "State", "Reason"}) {
            std::string v = (*props)[name].get<std::string>();
            EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](char c) { return c > 0; }))
                << name << ": " << v;
        }

    const char* unknown = "org.freedesktop.DBus.Error.UnknownObject";
    for (const char* path : {"/org/vfiod1/pf/010000_00_00_0", "/org/vfiod1/pf/FFFF_ff_1f_7",
                             "/org/vfiod1/pf/ffff_ff_1f_7/x", "/org/vfiod1/pf/0000_00_00_0",
                             "/org/vfiod1/pf/_", "/org/vfiod1/device/ffff_ff_1f_7"})
        EXPECT_EQ(error_of_get(path, "org.vfiod1.PhysicalFunction", "State"), unknown) << path;
}

// What each signal from org.vfiod1 said, in order: "PropertiesChanged PATH NAME…",
// "InterfacesAdded PATH IFACE…", "InterfacesRemoved PATH IFACE…".
class SignalLog {
public:
    explicit SignalLog(sdbus::IConnection& bus)
        : slot_(bus.addMatch("type='signal',sender='org.vfiod1'",
                             [this](sdbus::Message& m) { record(m); })) {}
    // Every signal so far, once there are `n` (or after 5 s).
    std::vector<std::string> wait_for(size_t n) {
        eventually([&] {
            std::lock_guard l(mu_);
            return seen_.size() >= n;
        }, 5s);
        std::lock_guard l(mu_);
        return seen_;
    }
    // Every signal so far, once `line` has come (or after 5 s): all the signals sent before it
    // are in, since a connection's signals arrive in the order they were sent.
    std::vector<std::string> until(const std::string& line) {
        eventually([&] {
            std::lock_guard l(mu_);
            return std::find(seen_.begin(), seen_.end(), line) != seen_.end();
        }, 5s);
        std::lock_guard l(mu_);
        return seen_;
    }

private:
    void record(sdbus::Message& m) {
        std::string line = m.getMemberName();
        if (line == "PropertiesChanged") {
            std::string iface;
            std::map<std::string, sdbus::Variant> changed;
            m >> iface >> changed;
            line += std::string(" ") + m.getPath();
            for (const auto& [name, v] : changed)
                line += " " + name;
        } else {
            sdbus::ObjectPath path;
            m >> path;
            line += " " + path;
            if (line.rfind("InterfacesAdded", 0) == 0) {
                std::map<std::string, std::map<std::string, sdbus::Variant>> ifaces;
                m >> ifaces;
                for (const auto& [i, props] : ifaces)
                    line += " " + i;
            } else {
                std::vector<std::string> ifaces;
                m >> ifaces;
                for (const auto& i : ifaces)
                    line += " " + i;
            }
        }
        std::lock_guard l(mu_);
        seen_.push_back(line);
    }

    std::mutex mu_;
    std::vector<std::string> seen_;
    sdbus::Slot slot_;
};

// A publication that names PFs: a new one is InterfacesAdded, a gone one InterfacesRemoved, a
// changed one PropertiesChanged naming only what changed; the same again says nothing.
TEST_F(DbusObjectsTest, PhysicalFunctionsComeChangeOnlyWhatChangedAndGo) {
    SignalLog log(*client_);
    client_->enterEventLoopAsync();
    Inventory inv = pf_inventory();
    objects_->publish(inv, everything(inv));
    serve();
    ASSERT_EQ(log.wait_for(2).size(), 2u) << "the first publication's InterfacesAdded";
    stop_serving();  // publishing happens on the loop's thread, as in vfiod

    const PciAddress other{0, 0x3b, 0, 0};
    inv.pfs[kVmd].num_vfs = 2;
    inv.pfs[kVmd].state = PfState::Ready;
    inv.pfs.erase(kLast);
    inv.pfs[other] = pf_info(other, 8, 4, 8, PfState::Refused, Reason::InUseVf, {kVmd});
    InventoryChange change;
    change.pfs = {kVmd, kLast, other};
    objects_->publish(inv, change);
    objects_->publish(inv, change);  // the same again: nothing to say
    // A marker after them: once it is seen, so is every signal of the publications before it.
    inv.pfs[kVmd].num_vfs = 1;
    const std::string marker = "PropertiesChanged /org/vfiod1/pf/10000_00_00_0 NumVfs";
    objects_->publish(inv, change);
    serve();
    auto all = log.until(marker);
    client_->leaveEventLoop();
    ASSERT_GE(all.size(), 3u);
    ASSERT_EQ(all.back(), marker);
    std::vector<std::string> seen(all.begin() + 2, all.end() - 1);
    EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()),
              (std::set<std::string>{
                  "PropertiesChanged /org/vfiod1/pf/10000_00_00_0 NumVfs State",
                  "InterfacesRemoved /org/vfiod1/pf/ffff_ff_1f_7 org.vfiod1.PhysicalFunction",
                  "InterfacesAdded /org/vfiod1/pf/0000_3b_00_0 org.vfiod1.PhysicalFunction"}));
    EXPECT_EQ(seen.size(), 3u);
}

// The object serves org.vfiod1.PhysicalFunction.xml's properties, types and annotations. Read
// by hand, not with std::regex: gcc 12 warns (maybe-uninitialized, inside <regex>) under the
// sanitizer build's flags, and -Werror makes that a build failure.
std::string xml_attr(const std::string& tag, const std::string& name) {
    auto at = tag.find(" " + name + "=\"");
    if (at == std::string::npos)
        return "";
    at += name.size() + 3;
    return tag.substr(at, tag.find('"', at) - at);
}

std::set<std::string> declared_properties(const std::string& xml) {
    static const std::string kConst =
        R"(<annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>)";
    std::set<std::string> out;
    for (size_t at = xml.find("<property "); at != std::string::npos;
         at = xml.find("<property ", at + 1)) {
        size_t end = xml.find('>', at);
        if (end == std::string::npos)
            break;
        std::string tag = xml.substr(at, end + 1 - at);
        std::string line = xml_attr(tag, "name") + " " + xml_attr(tag, "type") + " " +
                           xml_attr(tag, "access");
        size_t next = xml.find_first_not_of(" \t\r\n", end + 1);
        if (tag.ends_with(">") && !tag.ends_with("/>") && next != std::string::npos &&
            xml.compare(next, kConst.size(), kConst) == 0)
            line += " const";
        out.insert(line);
    }
    return out;
}

// The properties `interface` declares in its installed XML, and those the object at `path`
// serves as its Introspect says ({} when it lacks the interface).
std::pair<std::set<std::string>, std::set<std::string>> DbusObjectsTest::served_and_declared(
    const std::string& path, const std::string& interface) {
    std::string live;
    sdbus::createProxy(*client_, "org.vfiod1", path)
        ->callMethod("Introspect")
        .onInterface("org.freedesktop.DBus.Introspectable")
        .storeResultsTo(live);
    std::ifstream file(VFIOD_DBUS_XML_DIR "/" + interface + ".xml");
    std::stringstream xml;
    xml << file.rdbuf();
    auto from = live.find("<interface name=\"" + interface + "\">");
    if (from == std::string::npos)
        return {declared_properties(xml.str()), {}};
    live = live.substr(from, live.find("</interface>", from) - from);
    return {declared_properties(xml.str()), declared_properties(live)};
}

TEST_F(DbusObjectsTest, APhysicalFunctionIsServedAsItsXmlDeclares) {
    Inventory inv = pf_inventory();
    objects_->publish(inv, everything(inv));
    serve();
    auto [declared, live] = served_and_declared("/org/vfiod1/pf/10000_00_00_0",
                                                "org.vfiod1.PhysicalFunction");
    EXPECT_EQ(declared.size(), 7u);
    EXPECT_TRUE(declared.count("Address s read const"));
    EXPECT_TRUE(declared.count("NumVfs u read"));
    EXPECT_EQ(live, declared);
}

// The client decodes what dbus/pf.cpp encodes: every published field, in address order, and no
// pfs at all where no PF object is published.
TEST_F(DbusObjectsTest, TheClientReadsBackThePublishedPfs) {
    Inventory inv = pf_inventory();
    objects_->publish(inv, everything(inv));
    serve();
    client::DaemonView view;
    ASSERT_TRUE(client::fetch_view(*client_, &view).ok());
    ASSERT_TRUE(view.pfs);
    ASSERT_EQ(view.pfs->size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const client::DaemonPf& got = (*view.pfs)[i];
        const PfInfo& want = inv.pfs.at(i == 0 ? kLast : kVmd);  // ffff:… sorts before 10000:…
        EXPECT_EQ(got.plan.address, want.address);
        EXPECT_EQ(got.plan.total_vfs, want.total_vfs);
        EXPECT_EQ(got.plan.num_vfs, want.num_vfs);
        EXPECT_EQ(got.plan.wanted_vfs, want.wanted_vfs);
        EXPECT_EQ(got.state, to_string(want.state));
        EXPECT_EQ(got.state_value, want.state);
        EXPECT_EQ(got.plan.reason, want.reason);
        EXPECT_EQ(got.plan.blockers, want.blockers);
        EXPECT_TRUE(got.plan.details.empty());
    }

    stop_serving();
    Inventory none;
    InventoryChange gone;
    gone.pfs = {kVmd, kLast};
    objects_->publish(none, gone);
    serve();
    ASSERT_TRUE(client::fetch_view(*client_, &view).ok());
    EXPECT_FALSE(view.pfs);
}


// A consumer that follows the signals (client::Inventory::apply, as the device plugin does)
// sees PFs come, change and go without a whole read, and none of their signals is refused.
TEST_F(DbusObjectsTest, TheClientFollowsPfSignals) {
    std::mutex mu;
    client::Inventory followed;
    int refused = 0;
    auto watch = client::watch_inventory(
        *client_,
        [&](sdbus::Message& m) {
            std::lock_guard l(mu);
            refused += !followed.apply(m);
        },
        [](bool) {});
    client_->enterEventLoopAsync();
    // "ADDRESS NOW/WANTED STATE REASON" per followed PF, once it reads `want` (or after 5 s).
    auto pfs_when = [&](const std::string& want) {
        std::string got;
        eventually([&] {
            std::lock_guard l(mu);
            got.clear();
            for (const auto& p : followed.view().pfs.value_or(std::vector<client::DaemonPf>{}))
                got += (got.empty() ? "" : "|") + p.plan.address.str() + " " +
                       std::to_string(p.plan.num_vfs) + "/" + std::to_string(p.plan.wanted_vfs) +
                       " " + p.state + " " + to_string(p.plan.reason);
            return got == want;
        }, 5s);
        return got;
    };
    Inventory inv = pf_inventory();
    InventoryChange both;
    both.pfs = {kVmd, kLast};
    objects_->publish(inv, both);
    serve();
    EXPECT_EQ(pfs_when("ffff:ff:1f.7 0/8 refused vfs-exceed-total|10000:00:00.0 0/2 pending "),
              "ffff:ff:1f.7 0/8 refused vfs-exceed-total|10000:00:00.0 0/2 pending ");
    stop_serving();
    inv.pfs[kVmd].num_vfs = 2;
    inv.pfs[kVmd].state = PfState::Ready;
    inv.pfs.erase(kLast);
    objects_->publish(inv, both);
    serve();
    EXPECT_EQ(pfs_when("10000:00:00.0 2/2 ready "), "10000:00:00.0 2/2 ready ");
    client_->leaveEventLoop();
    EXPECT_EQ(refused, 0);
}

// MediatedDevice objects (DESIGN §12): by their UUID's path (- as _) and no other spelling, every
// property as org.vfiod1.MediatedDevice.xml declares it, host bytes made valid UTF-8, and read
// back by the client in DESIGN §12's order (foreign last). Then gone, and no mdevs at all.
TEST_F(DbusObjectsTest, MediatedDevicesByTheirUuidWithEveryPropertyAndReadBack) {
    const std::string own = "6d966230-f3a1-5551-97f3-4aec0da0213a";  // mbochs/mbochs-small/0
    const std::string other = "0a1b2c3d-0000-4000-8000-000000000001";
    Inventory inv;
    inv.mdevs[own] = {{Health::Ok, ""}, own, "mbochs", "mbochs-small", "mbochs-64mb",
                      "vfiod.io/mbochs-small", 14u, -1, MdevState::Ready, Reason::None, {}};
    inv.mdevs[other] = {{Health::Failed, "aer-fatal: recovery failed \xff"}, other,
                        "0000:3b:00.0", "nvidia-222", "GRID \xff T4", "", std::nullopt, 1,
                        MdevState::Foreign, Reason::InUseMdev, {"pid 7 (q\xfe)"}};
    objects_->publish(inv, everything(inv));
    serve();
    auto get = [&](const std::string& path, const char* prop) {
        sdbus::Variant v;
        sdbus::createProxy(*client_, "org.vfiod1", path)
            ->callMethod("Get")
            .onInterface("org.freedesktop.DBus.Properties")
            .withArguments("org.vfiod1.MediatedDevice", prop)
            .storeResultsTo(v);
        return v;
    };
    const std::string path = "/org/vfiod1/mdev/6d966230_f3a1_5551_97f3_4aec0da0213a";
    EXPECT_EQ(mdev_object_path(own), path);
    EXPECT_EQ(get(path, "Uuid").get<std::string>(), own);
    EXPECT_EQ(get(path, "IommuGroup").get<uint32_t>(), 14u);
    EXPECT_EQ(get(path, "VfioPath").get<std::string>(), "/dev/vfio/14");
    EXPECT_EQ(get(path, "NumaNode").get<int32_t>(), -1);
    EXPECT_EQ(get(path, "State").get<std::string>(), "ready");
    const std::string foreign_path = mdev_object_path(other);
    EXPECT_EQ(get(foreign_path, "IommuGroup").get<uint32_t>(), 0u);
    EXPECT_EQ(get(foreign_path, "VfioPath").get<std::string>(), "");
    EXPECT_EQ(get(foreign_path, "TypeName").get<std::string>(), "GRID \xef\xbf\xbd T4");
    EXPECT_EQ(get(path, "Health").get<std::string>(), "ok");
    EXPECT_EQ(get(path, "HealthReason").get<std::string>(), "");
    EXPECT_EQ(get(foreign_path, "Health").get<std::string>(), "failed");
    EXPECT_EQ(get(foreign_path, "HealthReason").get<std::string>(),
              "aer-fatal: recovery failed \xef\xbf\xbd");
    // Upper case, or a UUID cut short: not an object ('-' kept is no object path at all).
    for (const char* spelling : {"/org/vfiod1/mdev/6D966230_F3A1_5551_97F3_4AEC0DA0213A",
                                 "/org/vfiod1/mdev/6d966230_f3a1_5551_97f3_4aec0da0213"})
        EXPECT_EQ(error_of_get(spelling, "org.vfiod1.MediatedDevice", "State"),
                  "org.freedesktop.DBus.Error.UnknownObject") << spelling;

    auto [declared, live] = served_and_declared(path, "org.vfiod1.MediatedDevice");
    EXPECT_EQ(declared.size(), 13u);
    EXPECT_TRUE(declared.count("Uuid s read const"));
    EXPECT_EQ(live, declared);

    client::DaemonView view;
    ASSERT_TRUE(client::fetch_view(*client_, &view).ok());
    ASSERT_TRUE(view.mdevs);
    ASSERT_EQ(view.mdevs->size(), 2u);
    const client::DaemonMdev& first = (*view.mdevs)[0];  // foreign last, whatever its parent
    EXPECT_EQ(first.plan.uuid, own);
    EXPECT_EQ(first.plan.group, 14u);
    EXPECT_EQ(first.vfio_path, "/dev/vfio/14");
    EXPECT_EQ(first.state_value, MdevState::Ready);
    EXPECT_EQ(first.plan.resource_name, "vfiod.io/mbochs-small");
    const client::DaemonMdev& second = (*view.mdevs)[1];
    EXPECT_EQ(second.plan.uuid, other);
    EXPECT_FALSE(second.plan.group);
    EXPECT_EQ(second.numa_node, 1);
    EXPECT_EQ(second.plan.reason, Reason::InUseMdev);
    EXPECT_EQ(second.plan.blockers, std::vector<std::string>{"pid 7 (q\xef\xbf\xbd)"});

    stop_serving();
    Inventory none;
    InventoryChange gone;
    gone.mdevs = {own, other};
    objects_->publish(none, gone);
    serve();
    ASSERT_TRUE(client::fetch_view(*client_, &view).ok());
    EXPECT_FALSE(view.mdevs);
}

}  // namespace
}  // namespace vfiod::test
