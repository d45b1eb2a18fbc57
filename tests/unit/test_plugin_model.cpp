// vfiod-device-plugin's rules without gRPC or D-Bus (plugin-common/model.cpp,
// device-plugin/allocation.cpp): names, health, Allocate's answer and refusals, and the
// preferred allocation's group and NUMA order.
#include <gtest/gtest.h>

#include "allocation.hpp"
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

}  // namespace
}  // namespace vfiod::plugin
