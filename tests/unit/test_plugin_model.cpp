// vfiod-device-plugin's rules without gRPC or D-Bus (plugin-common/model.cpp,
// device-plugin/allocation.cpp): names, health, Allocate's answer and refusals, and the
// preferred allocation's group and NUMA order; the same for mdevs (DESIGN §12).
#include <gtest/gtest.h>

#include <tuple>

#include "allocation.hpp"
#include "core/mdev.hpp"
#include "core/strings.hpp"
#include "fake_tree.hpp"

namespace vfiod::plugin {
namespace {

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

PlannedDevice dev(const char* a, const char* resource, Role role = Role::Allowlisted) {
    PlannedDevice d;
    d.address = addr(a);
    d.role = role;
    if (resource)
        d.resource_name = resource;
    return d;
}

client::DaemonGroup group(unsigned id, const char* state, std::vector<PlannedDevice> devices,
                          int numa) {
    client::DaemonGroup g;
    g.plan.group = id;
    g.state = state;
    g.state_value = parse_group_state(state);
    g.plan.devices = std::move(devices);
    for (auto& d : g.plan.devices)
        d.numa_node = numa;
    return g;
}

// Group 13: two functions of "gpu"; 15 and 17: one "gpu" each on NUMA 0 and 1; 20 released.
Snapshot host() {
    client::DaemonView v;
    v.groups.push_back(group(13, "bound", {dev("0000:01:00.0", "gpu"), dev("0000:01:00.1", "gpu")}, 0));
    v.groups.push_back(group(15, "bound", {dev("0000:03:00.0", "gpu")}, 0));
    v.groups.push_back(group(17, "bound", {dev("0000:05:00.0", "gpu"),
                                           dev("0000:05:00.1", nullptr, Role::Companion),
                                           dev("0000:00:1c.0", nullptr, Role::Bridge)}, 1));
    v.groups.push_back(group(20, "released", {dev("0000:07:00.0", "gpu")}, -1));
    v.groups.push_back(group(21, "bound", {dev("0000:08:00.0", "nic")}, -1));
    // group 21's /dev/vfio node is missing
    return make_snapshot(v, [](unsigned g) { return g != 21; });
}

// The kubelet's IDs, parsed as server.cpp parses them.
DeviceIds parsed(const std::vector<std::string>& texts) { return parse_device_ids(texts); }
std::vector<DeviceIds> request(const std::vector<std::vector<std::string>>& containers) {
    std::vector<DeviceIds> out;
    for (const auto& c : containers)
        out.push_back(parsed(c));
    return out;
}
// The preferred allocation as server.cpp answers it.
std::vector<std::string> texts(const std::vector<PciAddress>& chosen) {
    std::vector<std::string> out;
    for (const auto& a : chosen)
        out.push_back(a.str());
    return out;
}

TEST(PluginModel, NamesFollowDesign) {
    EXPECT_EQ(plugin_socket_name("nvidia.com/GH100"), "vfiod-nvidia_com_GH100.sock");
    EXPECT_EQ(plugin_socket_name("a.b/c d:e"), "vfiod-a_b_c_d_e.sock");
    EXPECT_EQ(plugin_env_name("nvidia.com/GH100_H100-PCIE"), "PCI_RESOURCE_NVIDIA_COM_GH100_H100-PCIE");
}

// Hostile input round 3: handed "example.com/gpu.a" and "example.com/gpu_a" (one socket), the
// plugin served gpu_a's device under gpu.a's name. Names that share a socket or a variable are
// not served at all, each with the reason; the others are.
TEST(PluginModel, ResourceNamesThatCollideAreNotServed) {
    client::DaemonView v;
    v.groups.push_back(group(13, "bound", {dev("0000:01:00.0", "example.com/gpu.a")}, 0));
    v.groups.push_back(group(14, "bound", {dev("0000:02:00.0", "example.com/gpu_a")}, 0));
    v.groups.push_back(group(15, "bound", {dev("0000:03:00.0", "nvidia.com/gpu")}, 0));
    v.groups.push_back(group(16, "bound", {dev("0000:04:00.0", "nvidia.com/GPU")}, 0));
    v.groups.push_back(group(17, "bound", {dev("0000:05:00.0", "intel.com/nic")}, 0));
    Snapshot s = make_snapshot(v, [](unsigned) { return true; });
    EXPECT_EQ(s.resources.size(), 1u);
    EXPECT_TRUE(s.resources.count("intel.com/nic"));
    ASSERT_EQ(s.refused.size(), 4u);
    EXPECT_EQ(s.refused.at("example.com/gpu.a"),
              "collides with example.com/gpu_a: both would be served on the device plugin socket "
              "vfiod-example_com_gpu_a.sock");
    EXPECT_EQ(s.refused.at("example.com/gpu_a"),
              "collides with example.com/gpu.a: both would be served on the device plugin socket "
              "vfiod-example_com_gpu_a.sock");
    EXPECT_NE(s.refused.at("nvidia.com/GPU").find("PCI_RESOURCE_NVIDIA_COM_GPU"), std::string::npos);
    EXPECT_EQ(s.find("example.com/gpu.a", addr("0000:02:00.0")), nullptr);
}

TEST(PluginModel, HealthNeedsBoundAndTheVfioNode) {
    Snapshot s = host();
    ASSERT_EQ(s.resources.size(), 2u);
    EXPECT_TRUE(s.find("gpu", addr("0000:01:00.1"))->healthy);
    EXPECT_FALSE(s.find("gpu", addr("0000:07:00.0"))->healthy);
    EXPECT_FALSE(s.find("nic", addr("0000:08:00.0"))->healthy);
    EXPECT_EQ(s.find("gpu", addr("0000:05:00.0"))->numa_node, 1);
    EXPECT_EQ(s.find("gpu", addr("0000:05:00.1")), nullptr);  // companion without a resource
    EXPECT_EQ(s.group_functions.at(17).size(), 2u);      // the bridge is not a function to hand out
}

// DESIGN §13: a failed group (the worst of its functions) makes every function of it
// Unhealthy, its companion's failure too; a function's own failed Health does, even where the
// group's is not published; degraded, unknown and a vfiod without Health stay Healthy; cleared,
// Healthy again. Allocate's refusal says vfiod reported the failure.
TEST(PluginModel, FailedHealthIsUnhealthyOtherHealthIsNot) {
    auto view = [](const char* group_health, const char* fn_health) {
        client::DaemonView v;
        v.groups.push_back(group(13, "bound", {dev("0000:01:00.0", "gpu"),
                                               dev("0000:01:00.1", "gpu")}, 0));
        v.groups.push_back(group(15, "bound", {dev("0000:03:00.0", "gpu")}, 0));
        v.groups[0].health = group_health;
        v.groups[0].device_health[addr("0000:01:00.1")] = {fn_health, ""};
        v.groups[1].health = "ok";
        return make_snapshot(v, [](unsigned) { return true; });
    };
    for (auto [group_health, fn_health, healthy] :
         {std::tuple{"failed", "failed", false}, std::tuple{"", "failed", false},
          std::tuple{"failed", "ok", false}, std::tuple{"degraded", "degraded", true},
          std::tuple{"unknown", "unknown", true}, std::tuple{"", "", true},
          std::tuple{"ok", "ok", true}}) {
        Snapshot s = view(group_health, fn_health);
        const std::string why = std::string(group_health) + "/" + fn_health;
        // 01:00.0's own Health is not published: its group's decides.
        EXPECT_EQ(s.find("gpu", addr("0000:01:00.0"))->healthy,
                  healthy || *group_health != 'f') << why;
        EXPECT_EQ(s.find("gpu", addr("0000:01:00.1"))->healthy, healthy) << why;
        EXPECT_TRUE(s.find("gpu", addr("0000:03:00.0"))->healthy) << why;
    }
    Snapshot s = view("failed", "failed");
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    std::vector<ContainerAllocation> out;
    AllocateError err;
    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:01:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
    EXPECT_EQ(err.message, "device 0000:01:00.0 is unhealthy: vfiod reports it or a function of "
                           "IOMMU group 13 failed (vfioctl doctor says what to do)");
    EXPECT_TRUE(allocate(s, "gpu", request({{"0000:03:00.0"}}), {}, fs, &out, &err));
}

TEST(PluginModel, AllocateWholeGroupsAndRefusals) {
    Snapshot s = host();
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    std::vector<ContainerAllocation> out;
    AllocateError err;
    ASSERT_TRUE(
        allocate(s, "gpu", request({{"0000:05:00.0", "0000:03:00.0"}}), {}, fs, &out, &err));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/17"},
                                                       {"/dev/vfio/15"}}));
    EXPECT_EQ(out[0].envs.at("PCI_RESOURCE_GPU"), "0000:05:00.0,0000:03:00.0");

    // iommufd: a vfio-dev entry counts only with its /dev node (6.1 has the former alone), and
    // /dev/iommu comes along; the companion's cdev too, since the whole group is handed out.
    tree.write_file("sys/bus/pci/devices/0000:05:00.1/vfio-dev/vfio2/dev", "");
    ASSERT_TRUE(allocate(s, "gpu", request({{"0000:05:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/17"}}));
    tree.write_file("dev/vfio/devices/vfio2", "");
    tree.write_file("dev/iommu", "");
    ASSERT_TRUE(allocate(s, "gpu", request({{"0000:05:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/17"},
                                                       {"/dev/iommu"},
                                                       {"/dev/vfio/devices/vfio2"}}));

    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:07:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
    EXPECT_NE(err.message.find("0000:07:00.0"), std::string::npos);
    // Another resource's device.
    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:08:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::InvalidArgument);
    EXPECT_FALSE(allocate(s, "gone", request({{"0000:01:00.0"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);

    // The companion 05:00.1 is held (as another plugin's ID): group 17 cannot go elsewhere.
    EXPECT_EQ(group_mates_outside(s, request({{"0000:05:00.0"}})),
              std::vector<PciAddress>{addr("0000:05:00.1")});
    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:05:00.0"}}), {{"0000:05:00.1", "ns/p/c"}}, fs,
                          &out, &err));
    EXPECT_NE(err.message.find("IOMMU group 17"), std::string::npos) << err.message;
    EXPECT_TRUE(group_mates_outside(s, request({{"0000:01:00.0", "0000:01:00.1"}})).empty());
}

// Issue 22: IDs are parsed once, at the gRPC boundary. Only the canonical address names a
// device; anything else is refused as before, named as the kubelet sent it and in request order.
TEST(PluginModel, IdsAreParsedOnceAndBadOnesRefusedAsBefore) {
    EXPECT_EQ(DeviceId::parse("0000:03:00.0").address, addr("0000:03:00.0"));
    for (const char* bad : {"0000:03:00.0 ", "0000:01:00.A", "03:00.0", "", "junk"}) {
        DeviceId id = DeviceId::parse(bad);
        EXPECT_FALSE(id.address) << bad;
        EXPECT_EQ(id.str(), bad);
    }
    Snapshot s = host();
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    std::vector<ContainerAllocation> out;
    AllocateError err;
    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:03:00.0", "0000:01:00.A"}}), {}, fs, &out,
                          &err));
    EXPECT_EQ(err.code, AllocateError::Code::InvalidArgument);
    EXPECT_EQ(err.message, "unknown device ID '0000:01:00.A' for resource gpu");
    EXPECT_FALSE(allocate(s, "gpu", request({{"../../etc\n"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.message, "unknown device ID '" + printable("../../etc\n") + "' for resource gpu");
    // An unhealthy device in the first container is the first error, as it was.
    EXPECT_FALSE(allocate(s, "gpu", request({{"0000:07:00.0"}, {"junk"}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
    EXPECT_TRUE(group_mates_outside(s, request({{"junk", "0000:05:00.0"}})) ==
                std::vector<PciAddress>{addr("0000:05:00.1")});
}

TEST(PluginModel, PreferredKeepsGroupsTogetherThenNuma) {
    Snapshot s = host();
    const std::vector<std::string> all = {"0000:01:00.0", "0000:01:00.1", "0000:03:00.0",
                                          "0000:05:00.0"};
    // Two: the two-function group whole rather than two single groups.
    EXPECT_EQ(texts(preferred_allocation(s, "gpu", parsed(all), parsed({}), 2)),
              (std::vector<std::string>{"0000:01:00.0", "0000:01:00.1"}));
    // must_include brings its group-mate along.
    EXPECT_EQ(texts(preferred_allocation(s, "gpu", parsed(all), parsed({"0000:01:00.1"}), 3)),
              (std::vector<std::string>{"0000:01:00.1", "0000:01:00.0", "0000:03:00.0"}));
    // With 05:00.0 (NUMA 1) required, the other one is on node 0: still taken.
    EXPECT_EQ(texts(preferred_allocation(s, "gpu", parsed({"0000:03:00.0", "0000:05:00.0"}),
                                         parsed({"0000:05:00.0"}), 2)),
              (std::vector<std::string>{"0000:05:00.0", "0000:03:00.0"}));
    // 03:00.0 required, one slot left: group 13 does not fit whole, group 17 does.
    EXPECT_EQ(texts(preferred_allocation(s, "gpu", parsed(all), parsed({"0000:03:00.0"}), 2)),
              (std::vector<std::string>{"0000:03:00.0", "0000:05:00.0"}));
    EXPECT_EQ(preferred_allocation(s, "gpu", parsed(all), parsed({}), 1).size(), 1u);
}

std::string at(unsigned domain, unsigned bus, unsigned slot, unsigned fn) {
    return PciAddress{domain, static_cast<uint8_t>(bus), static_cast<uint8_t>(slot),
                      static_cast<uint8_t>(fn)}.str();
}

// n one-function groups of "gpu" (NUMA 0 and 1 alternating) and n/4 two-function groups of
// "gpu2", every one bound.
Snapshot fleet(unsigned n) {
    client::DaemonView v;
    std::vector<std::string> names;
    for (unsigned i = 0; i < n; ++i) {
        names.push_back(at(0, i >> 5, i & 0x1f, 0));
        v.groups.push_back(group(100 + i, "bound", {dev(names.back().c_str(), "gpu")}, int(i % 2)));
    }
    for (unsigned i = 0; i < n / 4; ++i) {
        std::string a = at(1, i & 0xff, i >> 8, 0), b = at(1, i & 0xff, i >> 8, 1);
        v.groups.push_back(group(100000 + i, "bound", {dev(a.c_str(), "gpu2"), dev(b.c_str(), "gpu2")}, 0));
    }
    return make_snapshot(v, [](unsigned) { return true; });
}

std::vector<std::string> ids_of(const Snapshot& s, const std::string& resource) {
    std::vector<std::string> out;
    for (const auto& d : s.resources.at(resource))
        out.push_back(d.address.str());
    return out;
}

// Hostile input round 3: a 5,000-ID Allocate took 7.9 s and 10,000 unknown IDs 5.6 s, since each
// ID was looked for in every device. The work is counted, not timed (bench/ times it): the
// device records examined grow with the request and the groups it names, at most a few per ID.
TEST(PluginModel, AllocateAndPreferenceExamineLinearlyManyRecords) {
    struct Host : KernelHostFs {
        Host() : KernelHostFs("/nonexistent-vfiod-root") {}
    } host;
    for (unsigned n : {1000u, 4000u}) {
        Snapshot s = fleet(n);
        auto gpus = ids_of(s, "gpu"), pairs = ids_of(s, "gpu2");
        size_t before = examined_on_this_thread();
        std::vector<ContainerAllocation> out;
        AllocateError err;
        ASSERT_TRUE(allocate(s, "gpu", request({gpus}), {}, host, &out, &err)) << err.message;
        EXPECT_EQ(out.at(0).devices.size(), n + 1);
        ASSERT_TRUE(allocate(s, "gpu2", request({pairs}), {}, host, &out, &err)) << err.message;
        EXPECT_TRUE(group_mates_outside(s, request({gpus, pairs})).empty());
        std::vector<std::string> unknown(2 * n, "0000:ff:1f.7");
        EXPECT_TRUE(group_mates_outside(s, request({unknown})).empty());
        // IDs handed in: each of gpus and pairs twice (Allocate, the group check), and unknown.
        size_t ids = 2 * (gpus.size() + pairs.size()) + unknown.size();
        size_t used = examined_on_this_thread() - before;
        EXPECT_LE(used, 3 * ids) << n;  // each request's quadratic search: n * n

        before = examined_on_this_thread();
        std::vector<std::string> must(gpus.begin(), gpus.begin() + n / 2);
        auto chosen = preferred_allocation(s, "gpu", parsed(gpus), parsed(must), int(n));
        EXPECT_EQ(chosen.size(), n);
        auto half =
            preferred_allocation(s, "gpu2", parsed(pairs), parsed({}), int(pairs.size() / 2) + 1);
        EXPECT_EQ(half.size(), pairs.size() / 2 + 1);
        used = examined_on_this_thread() - before;
        EXPECT_LE(used, 3 * (gpus.size() + must.size() + pairs.size())) << n;
    }
}

// Unknown IDs, in must_include or available, came back in the preferred allocation.
TEST(PluginModel, PreferenceNeverReturnsUnknownIds) {
    Snapshot s = host();
    auto chosen = texts(preferred_allocation(s, "gpu",
                                             parsed({"0000:03:00.0", "0000:aa:00.0", "junk"}),
                                             parsed({"0000:bb:00.0", "0000:08:00.0"}), 3));
    EXPECT_EQ(chosen, (std::vector<std::string>{"0000:03:00.0"}));
    EXPECT_TRUE(texts(preferred_allocation(s, "gpu", parsed({"x"}), parsed({"y"}), 2)).empty());
    EXPECT_TRUE(
        texts(preferred_allocation(s, "gpu", parsed({"0000:03:00.0"}), parsed({}), -5)).empty());
}

// Both plugins serve an mdev only while it is ready with its /dev/vfio/<N> (DESIGN §12).
TEST(PluginModel, MdevServedOnlyReadyWithItsNode) {
    auto mdev = [](const char* state, std::optional<unsigned> group) {
        client::DaemonMdev m;
        m.plan.uuid = "6d966230-f3a1-5551-97f3-4aec0da0213a";
        m.plan.group = group;
        m.state = state;
        m.state_value = parse_mdev_state(state);
        return m;
    };
    auto node = [](unsigned g) { return g == 30; };
    EXPECT_TRUE(mdev_served(mdev("ready", 30), node));
    EXPECT_FALSE(mdev_served(mdev("ready", 31), node));  // its node is gone
    EXPECT_FALSE(mdev_served(mdev("ready", std::nullopt), node));
    for (const char* state : {"pending", "refused", "failed", "foreign", "a-newer-state"})
        EXPECT_FALSE(mdev_served(mdev(state, 30), node)) << state;
}

// --- mediated devices (DESIGN §12) ---

const char* const kVgpu = "nvidia.com/GRID_T4-1Q";

// An mdev as vfiod publishes it: the i-th of (parent, type), its UUID vfiod's own for it.
client::DaemonMdev mdev(const char* parent, const char* type, unsigned i, const char* resource,
                        const char* state, std::optional<unsigned> group, int numa,
                        Reason reason = Reason::None) {
    client::DaemonMdev m;
    m.plan.uuid = mdev_uuid(parent, type, i);
    m.plan.parent = parent;
    m.plan.type = type;
    m.plan.resource_name = resource;
    m.plan.group = group;
    m.plan.reason = reason;
    m.state = state;
    m.state_value = parse_mdev_state(state);
    m.numa_node = numa;
    return m;
}

std::string uuid(const char* parent, const char* type, unsigned i) {
    return mdev_uuid(parent, type, i);
}

// Two types of two parents under one name (one pool), NUMA 0 and 1, both ready; one refused
// in-use-mdev; one ready whose /dev/vfio/43 is gone; one pending; a foreign one that claims the
// name (a hostile vfiod) with its node present; and a function resource beside them.
client::DaemonView mdev_view() {
    client::DaemonView v;
    v.groups.push_back(group(13, "bound", {dev("0000:01:00.0", "gpu")}, 0));
    v.mdevs.emplace();
    auto& m = *v.mdevs;
    m.push_back(mdev("0000:3b:00.0", "nvidia-222", 0, kVgpu, "ready", 40, 0));
    m.push_back(mdev("0000:af:00.0", "nvidia-223", 0, kVgpu, "ready", 41, 1));
    m.push_back(mdev("0000:3b:00.0", "nvidia-222", 1, kVgpu, "refused", 42, 0,
                     Reason::InUseMdev));
    m.push_back(mdev("0000:3b:00.0", "nvidia-222", 2, kVgpu, "ready", 43, 0));
    m.push_back(mdev("0000:3b:00.0", "nvidia-222", 3, kVgpu, "pending", std::nullopt, 0));
    client::DaemonMdev foreign = mdev("0000:3b:00.0", "nvidia-222", 0, kVgpu, "foreign", 44, 0);
    foreign.plan.uuid = "0d5e3c3a-6d2b-4c8a-9a55-1f6b0e7a2c11";
    m.push_back(foreign);
    return v;
}

Snapshot mdev_host(const client::DaemonView& v = mdev_view()) {
    return make_snapshot(v, [](unsigned g) { return g != 43; });
}

TEST(PluginModelMdev, ServedMdevsAreOnePoolByUuidWithTheirNumaNode) {
    Snapshot s = mdev_host();
    ASSERT_EQ(s.mdev_resources.size(), 1u);
    std::vector<PluginMdev> want = {{uuid("0000:3b:00.0", "nvidia-222", 0), 40, 0},
                                    {uuid("0000:af:00.0", "nvidia-223", 0), 41, 1}};
    std::sort(want.begin(), want.end(),
              [](const PluginMdev& a, const PluginMdev& b) { return a.uuid < b.uuid; });
    EXPECT_EQ(s.mdev_resources.at(kVgpu), want);
    EXPECT_TRUE(s.resources.count("gpu"));  // the functions' resource is served beside it
    EXPECT_TRUE(s.refused.empty());
    // Every other mdev of the name is withdrawn, not listed, with why; the foreign one is
    // nothing of the name's.
    EXPECT_EQ(s.withdrawn.size(), 3u);
    EXPECT_EQ(s.withdrawn.at(uuid("0000:3b:00.0", "nvidia-222", 1)).second,
              "its State is refused (in-use-mdev)");
    EXPECT_EQ(s.withdrawn.at(uuid("0000:3b:00.0", "nvidia-222", 2)).second,
              "/dev/vfio/43 is missing");
    EXPECT_EQ(s.withdrawn.at(uuid("0000:3b:00.0", "nvidia-222", 3)).second,
              "its State is pending");
    EXPECT_EQ(s.find_mdev(kVgpu, "0d5e3c3a-6d2b-4c8a-9a55-1f6b0e7a2c11"), nullptr);
    EXPECT_EQ(s.find_mdev("gpu", want[0].uuid), nullptr);  // another resource's name
}

TEST(PluginModelMdev, IdsAreAddressesOrCanonicalUuidsAndNothingElse) {
    const std::string u = uuid("mbochs", "mbochs-small", 0);
    DeviceId id = DeviceId::parse(u);
    EXPECT_FALSE(id.address);
    EXPECT_EQ(id.uuid, u);
    EXPECT_EQ(id.str(), u);
    std::string upper = u;
    for (char& c : upper)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const std::string& bad : {upper, u + " ", u.substr(1), "{" + u + "}", std::string()}) {
        DeviceId b = DeviceId::parse(bad);
        EXPECT_FALSE(b.address) << bad;
        EXPECT_TRUE(b.uuid.empty()) << bad;
        EXPECT_EQ(b.str(), bad);
    }
}

TEST(PluginModelMdev, AllocateAnswersEachMdevsNodesAndTheMdevVariable) {
    Snapshot s = mdev_host();
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    const std::string a = uuid("0000:3b:00.0", "nvidia-222", 0);
    const std::string b = uuid("0000:af:00.0", "nvidia-223", 0);
    std::vector<ContainerAllocation> out;
    AllocateError err;
    ASSERT_TRUE(allocate(s, kVgpu, request({{b, a}, {}}), {}, fs, &out, &err)) << err.message;
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/41"},
                                                       {"/dev/vfio/40"}}));
    EXPECT_EQ(out[0].envs, (std::map<std::string, std::string>{
                               {"MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q", b + "," + a}}));
    EXPECT_EQ(out[1].envs.at("MDEV_PCI_RESOURCE_NVIDIA_COM_GRID_T4-1Q"), "");

    // iommufd, as for functions: the mdev's vfio-dev entry counts with its /dev node alone.
    tree.write_file("sys/bus/mdev/devices/" + a + "/vfio-dev/vfio7/dev", "");
    tree.write_file("dev/iommu", "");
    ASSERT_TRUE(allocate(s, kVgpu, request({{a}}), {}, fs, &out, &err));
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/40"}}));
    tree.write_file("dev/vfio/devices/vfio7", "");
    ASSERT_TRUE(allocate(s, kVgpu, request({{a}}), {}, fs, &out, &err));
    EXPECT_EQ(out[0].devices, (std::vector<DeviceNode>{{"/dev/vfio/vfio"}, {"/dev/vfio/40"},
                                                       {"/dev/iommu"},
                                                       {"/dev/vfio/devices/vfio7"}}));
    EXPECT_FALSE(allocate(s, kVgpu, request({{a}, {a}}), {}, fs, &out, &err));
    EXPECT_EQ(err.message, "device ID " + a + " is requested twice");
}

TEST(PluginModelMdev, AllocateRefusesWhatIsNotServedNamingIt) {
    Snapshot s = mdev_host();
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    std::vector<ContainerAllocation> out = {ContainerAllocation{}};
    AllocateError err;
    auto refused = [&](const std::string& id, const char* resource = kVgpu) {
        out = {ContainerAllocation{}};
        bool ok = allocate(s, resource, request({{uuid("0000:3b:00.0", "nvidia-222", 0), id}}),
                           {}, fs, &out, &err);
        EXPECT_EQ(out.size(), 1u) << "an answer changed by a refused request";
        return !ok;
    };
    const std::string in_use = uuid("0000:3b:00.0", "nvidia-222", 1);
    ASSERT_TRUE(refused(in_use));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
    EXPECT_EQ(err.message, "mdev " + in_use + " of resource " + kVgpu +
                               " is no longer served: its State is refused (in-use-mdev)");
    const std::string node_gone = uuid("0000:3b:00.0", "nvidia-222", 2);
    ASSERT_TRUE(refused(node_gone));
    EXPECT_NE(err.message.find(node_gone), std::string::npos);
    EXPECT_NE(err.message.find("/dev/vfio/43 is missing"), std::string::npos) << err.message;
    // Foreign, never published, a function's address: none is a device of this resource.
    for (const std::string& id :
         {std::string("0d5e3c3a-6d2b-4c8a-9a55-1f6b0e7a2c11"), uuid("x", "y", 9),
          std::string("0000:01:00.0")}) {
        ASSERT_TRUE(refused(id)) << id;
        EXPECT_EQ(err.code, AllocateError::Code::InvalidArgument) << id;
        EXPECT_EQ(err.message, "unknown device ID '" + id + "' for resource " + kVgpu);
    }
    // A served mdev asked for under the functions' resource.
    EXPECT_FALSE(allocate(s, "gpu", request({{uuid("0000:3b:00.0", "nvidia-222", 0)}}), {}, fs,
                          &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::InvalidArgument);
}

// Withdrawal: the refused mdev leaves the list and Allocate refuses it; the other stays.
TEST(PluginModelMdev, AnMdevNoLongerServedIsWithdrawn) {
    client::DaemonView v = mdev_view();
    Snapshot before = mdev_host(v);
    const std::string a = uuid("0000:3b:00.0", "nvidia-222", 0);
    ASSERT_NE(before.find_mdev(kVgpu, a), nullptr);
    auto& m = (*v.mdevs)[0];
    for (auto [state, reason] : {std::pair{"refused", Reason::InUseMdev},
                                 std::pair{"failed", Reason::NoParent}}) {
        m.state = state;
        m.state_value = parse_mdev_state(state);
        m.plan.reason = reason;
        Snapshot after = mdev_host(v);
        EXPECT_EQ(after.find_mdev(kVgpu, a), nullptr) << state;
        EXPECT_EQ(after.mdev_resources.at(kVgpu).size(), 1u) << state;
        std::vector<ContainerAllocation> out;
        AllocateError err;
        test::FakeTree tree;
        KernelHostFs fs(tree.root());
        EXPECT_FALSE(allocate(after, kVgpu, request({{a}}), {}, fs, &out, &err));
        EXPECT_NE(err.message.find(a), std::string::npos);
        EXPECT_NE(err.message.find(to_string(reason)), std::string::npos) << err.message;
    }
    // Removed from the inventory: unknown; the name stays served with nothing when all go.
    v.mdevs->erase(v.mdevs->begin());
    v.mdevs->erase(v.mdevs->begin());
    Snapshot after = mdev_host(v);
    EXPECT_TRUE(after.serves(kVgpu));
    EXPECT_TRUE(after.mdev_resources.at(kVgpu).empty());
    EXPECT_FALSE(after.withdrawn.count(a));
}

// DESIGN §13: an mdev whose Health (its parent's) is failed stays listed, Unhealthy, so a running
// VM's device shows what became of it; Allocate refuses it; degraded or cleared, it is Healthy.
TEST(PluginModelMdev, AnMdevOnAFailedParentIsListedUnhealthy) {
    client::DaemonView v = mdev_view();
    const std::string a = uuid("0000:3b:00.0", "nvidia-222", 0);
    const std::string b = uuid("0000:af:00.0", "nvidia-223", 0);
    auto& m = (*v.mdevs)[0];
    m.health = {"failed", "aer-fatal: recovery failed"};
    Snapshot failed = mdev_host(v);
    ASSERT_NE(failed.find_mdev(kVgpu, a), nullptr) << "withdrawn rather than listed";
    EXPECT_FALSE(failed.find_mdev(kVgpu, a)->healthy);
    EXPECT_TRUE(failed.find_mdev(kVgpu, b)->healthy);
    EXPECT_FALSE(failed.withdrawn.count(a));
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    std::vector<ContainerAllocation> out;
    AllocateError err;
    EXPECT_FALSE(allocate(failed, kVgpu, request({{a}}), {}, fs, &out, &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
    EXPECT_EQ(err.message, "mdev " + a + " is unhealthy: vfiod reports its parent failed "
                           "(vfioctl status says why)");
    for (const char* h : {"degraded", "unknown", "ok", ""}) {
        m.health = {h, ""};
        Snapshot cleared = mdev_host(v);
        ASSERT_NE(cleared.find_mdev(kVgpu, a), nullptr) << h;
        EXPECT_TRUE(cleared.find_mdev(kVgpu, a)->healthy) << h;
        EXPECT_TRUE(allocate(cleared, kVgpu, request({{a}}), {}, fs, &out, &err)) << h;
    }
    // A failed parent does not serve an mdev that is otherwise withdrawn.
    (*v.mdevs)[2].health = {"failed", "gone: config space reads all ones"};
    EXPECT_EQ(mdev_host(v).find_mdev(kVgpu, uuid("0000:3b:00.0", "nvidia-222", 1)), nullptr);
}

// A name is functions or mdevs: one published for both kinds, or an mdev name sharing a socket
// with a function name, is not served at all; names whose only likeness is the variable (each
// kind has its own prefix) are.
TEST(PluginModelMdev, ResourceNamesOfBothKindsThatCollideAreNotServed) {
    client::DaemonView v;
    v.groups.push_back(group(13, "bound", {dev("0000:01:00.0", "example.com/both")}, 0));
    v.groups.push_back(group(14, "bound", {dev("0000:02:00.0", "example.com/gpu.a")}, 0));
    v.groups.push_back(group(15, "bound", {dev("0000:03:00.0", "example.com/GPU")}, 0));
    v.mdevs.emplace();
    v.mdevs->push_back(mdev("p", "t", 0, "example.com/both", "ready", 40, 0));
    v.mdevs->push_back(mdev("p", "t", 1, "example.com/gpu_a", "ready", 41, 0));
    v.mdevs->push_back(mdev("p", "t", 2, "example.com/gpu", "ready", 42, 0));
    v.mdevs->push_back(mdev("p", "t", 3, "example.com/v", "ready", 43, 0));
    v.mdevs->push_back(mdev("p", "t", 4, "example.com/V", "ready", 44, 0));
    Snapshot s = make_snapshot(v, [](unsigned) { return true; });
    EXPECT_EQ(s.refused.at("example.com/both"),
              "published for both PCI functions and mediated devices: a resource holds one "
              "kind, not both");
    EXPECT_EQ(s.refused.at("example.com/gpu_a"),
              "collides with example.com/gpu.a: both would be served on the device plugin "
              "socket vfiod-example_com_gpu_a.sock");
    EXPECT_TRUE(s.refused.count("example.com/gpu.a"));
    EXPECT_EQ(s.refused.at("example.com/V"),
              "collides with example.com/v: both would be handed to the VM in the environment "
              "variable MDEV_PCI_RESOURCE_EXAMPLE_COM_V");
    EXPECT_EQ(s.refused.size(), 5u);
    EXPECT_FALSE(s.serves("example.com/both"));
    EXPECT_FALSE(s.serves("example.com/gpu_a"));
    EXPECT_EQ(s.find_mdev("example.com/both", uuid("p", "t", 0)), nullptr);
    // PCI_RESOURCE_EXAMPLE_COM_GPU and MDEV_PCI_RESOURCE_EXAMPLE_COM_GPU: both served.
    EXPECT_EQ(s.resources.count("example.com/GPU"), 1u);
    EXPECT_EQ(s.mdev_resources.at("example.com/gpu").size(), 1u);
    std::vector<ContainerAllocation> out;
    AllocateError err;
    test::FakeTree tree;
    KernelHostFs fs(tree.root());
    EXPECT_FALSE(allocate(s, "example.com/both", request({{uuid("p", "t", 0)}}), {}, fs, &out,
                          &err));
    EXPECT_EQ(err.code, AllocateError::Code::FailedPrecondition);
}

TEST(PluginModelMdev, PreferredTakesMustIncludeThenOneNumaNode) {
    client::DaemonView v;
    v.mdevs.emplace();
    std::vector<std::string> all;
    // Node 0: mdevs 0-1 (groups 60, 62); node 1: mdevs 2-4 (groups 61, 63, 65); one without.
    const int numa[] = {0, 0, 1, 1, 1, -1};
    const unsigned groups[] = {60, 62, 61, 63, 65, 66};
    for (unsigned i = 0; i < 6; ++i) {
        v.mdevs->push_back(mdev("p", "t", i, kVgpu, "ready", groups[i], numa[i]));
        all.push_back(uuid("p", "t", i));
    }
    Snapshot s = make_snapshot(v, [](unsigned) { return true; });
    auto numa_of = [&](const std::vector<std::string>& chosen) {
        std::set<int> nodes;
        for (const auto& u : chosen)
            nodes.insert(s.find_mdev(kVgpu, u)->numa_node);
        return nodes;
    };
    // Nothing required: the node that offers most, whole.
    auto three = preferred_mdevs(s, kVgpu, parsed(all), parsed({}), 3);
    EXPECT_EQ(numa_of(three), std::set<int>{1});
    EXPECT_EQ(three, preferred_mdevs(s, kVgpu, parsed(all), parsed({}), 3));  // deterministic
    // Required first, then its node.
    auto two = preferred_mdevs(s, kVgpu, parsed(all), parsed({all[1]}), 2);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[0], all[1]);
    EXPECT_EQ(numa_of(two), std::set<int>{0});
    // More than one node holds: spills over, never an unknown or unserved ID.
    auto five = preferred_mdevs(s, kVgpu, parsed({all[0], all[1], all[2], all[3], "junk",
                                                  "0000:01:00.0", uuid("p", "t", 99)}),
                                parsed({}), 5);
    EXPECT_EQ(five.size(), 4u);
}

// 256 mdevs in one pool (issue 41): Allocate of all of them, and of each alone, and the
// preferred allocation examine a few records per ID, not IDs x inventory.
TEST(PluginModelMdev, TwoHundredFiftySixMdevsInOnePoolCostLinearWork) {
    struct Host : KernelHostFs {
        Host() : KernelHostFs("/nonexistent-vfiod-root") {}
    } host;
    for (unsigned n : {256u, 1024u}) {
        client::DaemonView v;
        v.mdevs.emplace();
        std::vector<std::string> ids;
        for (unsigned i = 0; i < n; ++i) {
            // 8 parents of 2 types each, half on each NUMA node: one resource.
            std::string parent = "vgpu" + std::to_string(i % 8);
            const char* type = i % 16 < 8 ? "vgpu-1q" : "vgpu-2q";
            v.mdevs->push_back(mdev(parent.c_str(), type, i, kVgpu, "ready", 1000 + i,
                                    int(i % 8 / 4)));
            ids.push_back(v.mdevs->back().plan.uuid);
        }
        Snapshot s = make_snapshot(v, [](unsigned) { return true; });
        ASSERT_EQ(s.mdev_resources.at(kVgpu).size(), n);
        size_t before = examined_on_this_thread();
        std::vector<ContainerAllocation> out;
        AllocateError err;
        ASSERT_TRUE(allocate(s, kVgpu, request({ids}), {}, host, &out, &err)) << err.message;
        EXPECT_EQ(out.at(0).devices.size(), n + 1);
        for (const auto& id : ids)
            ASSERT_TRUE(allocate(s, kVgpu, request({{id}}), {}, host, &out, &err));
        EXPECT_TRUE(group_mates_outside(s, request({ids})).empty());
        size_t used = examined_on_this_thread() - before;
        EXPECT_LE(used, 3 * 3 * n) << n;  // each ID looked for in every mdev: n * n

        before = examined_on_this_thread();
        std::vector<std::string> must(ids.begin(), ids.begin() + n / 4);
        EXPECT_EQ(preferred_mdevs(s, kVgpu, parsed(ids), parsed(must), int(n / 2)).size(), n / 2);
        used = examined_on_this_thread() - before;
        EXPECT_LE(used, 3 * (ids.size() + must.size())) << n;
    }
}

}  // namespace
}  // namespace vfiod::plugin
