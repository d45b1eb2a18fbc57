// What vfiod-dra-plugin publishes (dra-plugin/devices.cpp, api_objects.cpp, DESIGN §10, §12):
// device names both ways, attributes (limits included), which functions and mdevs are published,
// an mdev's device nodes, and the pool's slices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>

#include "api_objects.hpp"
#include "core/mdev.hpp"
#include "core/state.hpp"
#include "device_health.hpp"
#include "devices.hpp"
#include "dra_fixtures.hpp"
#include "fake_tree.hpp"
#include "io/host_fs.hpp"

namespace vfiod::dra {
namespace {

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

// What Kubernetes takes as a label (IsDNS1123Label) and an object name (IsDNS1123Subdomain: the
// same parts joined by dots, each part of any length, 253 in all). Checked by hand, not with
// std::regex: gcc 12 warns (maybe-uninitialized, inside <regex>) under the sanitizer build's
// flags, and -Werror makes that a build failure.
bool is_part(std::string_view s) {
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (s.empty() || !alnum(s.front()) || !alnum(s.back()))
        return false;
    for (char c : s)
        if (!alnum(c) && c != '-')
            return false;
    return true;
}
bool is_label(const std::string& s) { return s.size() <= 63 && is_part(s); }
bool is_subdomain(const std::string& s) {
    if (s.size() > 253)
        return false;
    std::string_view rest = s;
    for (size_t dot; (dot = rest.find('.')) != std::string_view::npos; rest.remove_prefix(dot + 1))
        if (!is_part(rest.substr(0, dot)))
            return false;
    return is_part(rest);
}

TEST(DraDevices, NamesBothWays) {
    EXPECT_EQ(device_name(addr("0000:01:00.0")), "pci-0000-01-00-0");
    EXPECT_EQ(device_name(addr("0000:af:1f.7")), "pci-0000-af-1f-7");
    EXPECT_EQ(device_name(addr("10000:e1:00.3")), "pci-10000-e1-00-3");  // a VMD domain
    for (const char* a : {"0000:01:00.0", "0000:af:1f.7", "10000:e1:00.3", "ffff:ff:1f.7"}) {
        std::string n = device_name(addr(a));
        EXPECT_TRUE(is_label(n)) << n;
        auto back = parse_device_name(n);
        ASSERT_TRUE(back) << n;
        EXPECT_EQ(back->str(), a);
    }
}

TEST(DraDevices, HostileNamesNameNoDevice) {
    for (const std::string& bad : std::vector<std::string>{"", "pci-", "pci-0000-01-00", "pci-0000-01-00-0-", "PCI-0000-01-00-0",
          "pci-0000-AF-00-0", "pci-0000-1-00-0", "pci-000-01-00-0", "pci-0000-01-00-8",
          "pci-0000-01-20-0", "pci-0000:01:00.0", "0000-01-00-0", "pci-0000-01-00-0\n",
          "pci--0000-01-00-0", "pci-0000--01-00-0", "pci-zzzz-01-00-0", "pci-+000-01-00-0",
          std::string("pci-0000-01-00-0\0", 17), "pci-" + std::string(100, '0') + "-01-00-0"})
        EXPECT_FALSE(parse_device_name(bad)) << bad;
}

DraDevice sample() {
    DraDevice d = test::dra_device("0000:01:00.0", 13);
    d.numa_node = 1;
    return d;
}

TEST(DraDevices, Attributes) {
    std::vector<std::string> omitted;
    auto a = device_attributes(sample(), &omitted);
    EXPECT_TRUE(omitted.empty());
    nlohmann::json want = {
        {"resource.kubernetes.io/pciBusID", {{"string", "0000:01:00.0"}}},
        {"resource.kubernetes.io/pcieRoot", {{"string", "pci0000:00"}}},
        {"resourceName", {{"string", "nvidia.com/GH100"}}},
        {"vendor", {{"string", "10de"}}},
        {"device", {{"string", "2331"}}},
        {"class", {{"string", "030200"}}},
        {"iommuGroup", {{"int", 13}}},
        {"numaNode", {{"int", 1}}},
        {"driver", {{"string", "vfio-pci"}}},
    };
    EXPECT_EQ(a, want) << a.dump(2);
}

TEST(DraDevices, AbsentAttributes) {
    DraDevice d = sample();
    d.numa_node = -1;
    d.pcie_root.clear();
    d.resource_name.clear();
    d.ids.class_code = 0x000001;
    d.ids.vendor = 0x0001;
    std::vector<std::string> omitted;
    auto a = device_attributes(d, &omitted);
    EXPECT_FALSE(a.contains("numaNode"));
    EXPECT_FALSE(a.contains("resource.kubernetes.io/pcieRoot"));
    EXPECT_FALSE(a.contains("resourceName"));
    EXPECT_EQ(a["class"], (nlohmann::json{{"string", "000001"}}));
    EXPECT_EQ(a["vendor"], (nlohmann::json{{"string", "0001"}}));
    EXPECT_TRUE(omitted.empty());  // absent is not omitted
    d.numa_node = 0;
    EXPECT_EQ(device_attributes(d, nullptr)["numaNode"], (nlohmann::json{{"int", 0}}));
}

TEST(DraDevices, OverlongValuesAreOmittedAndReported) {
    DraDevice d = sample();
    d.resource_name = "example.com/" + std::string(64 - 12, 'r');
    ASSERT_EQ(d.resource_name.size(), 64u);
    std::vector<std::string> omitted;
    EXPECT_TRUE(device_attributes(d, &omitted).contains("resourceName"));  // 64 is allowed
    EXPECT_TRUE(omitted.empty());

    d.resource_name += "x";  // 65
    d.driver = std::string(80, 'd');
    auto a = device_attributes(d, &omitted);
    EXPECT_FALSE(a.contains("resourceName"));
    EXPECT_FALSE(a.contains("driver"));
    EXPECT_TRUE(a.contains("resource.kubernetes.io/pciBusID"));  // the rest stays
    EXPECT_EQ(omitted, (std::vector<std::string>{"resourceName", "driver"}));

    // make_slices names the device with the attribute, and the slice still carries the device.
    Pool pool{"vfio.vfiod.io", "node1", "uid-1", 1};
    omitted.clear();
    auto slices = make_slices({d}, pool, &omitted);
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_EQ(slices[0]["spec"]["devices"].size(), 1u);
    EXPECT_EQ(omitted, (std::vector<std::string>{"pci-0000-01-00-0: resourceName",
                                                 "pci-0000-01-00-0: driver"}));
    for (const auto& [k, v] : slices[0]["spec"]["devices"][0]["attributes"].items()) {
        if (v.contains("string")) {
            EXPECT_LE(v["string"].get<std::string>().size(), kMaxStringAttribute) << k;
        }
    }
}

// A hand-built inventory: only allowlisted functions of bound groups whose /dev/vfio node
// exists are published; facts come from vfiod's records, pcieRoot from the tree.
PlannedDevice rec(const char* a, Role role, const char* resource, const char* driver = "vfio-pci") {
    PlannedDevice d;
    d.address = addr(a);
    d.role = role;
    if (resource)
        d.resource_name = std::string(resource);
    d.vendor = 0x10de;
    d.device = 0x2331;
    d.class_code = 0x030200;
    d.driver = driver;
    return d;
}
client::DaemonGroup grp(unsigned id, const char* state, std::vector<PlannedDevice> devs, int numa) {
    client::DaemonGroup g;
    g.plan.group = id;
    g.state = state;
    g.state_value = parse_group_state(state);
    g.plan.devices = std::move(devs);
    for (auto& d : g.plan.devices)
        d.numa_node = numa;
    return g;
}

TEST(DraDevices, InventoryPublishesHealthyAllowlistedFunctionsOnly) {
    test::FakeTree tree;
    tree.enable_iommu();
    tree.add_function(test::FakeTree::pci("0000:00:01.0", "8086", "1901", "060400", "pcieport", 1));
    tree.add_function(test::FakeTree::pci("0000:01:00.0", "10de", "2331", "030200", "vfio-pci", 13,
                                          "0000:00:01.0"));
    tree.add_function(test::FakeTree::pci("0000:01:00.1", "10de", "22a3", "040300", "vfio-pci", 13,
                                          "0000:00:01.0"));
    // 0000:40:00.0 sits on another root complex; 0000:05:00.0 has no sysfs entry at all.
    tree.add_function(test::FakeTree::pci("0000:40:00.0", "15b3", "101d", "020000", "mlx5_vfio_pci",
                                          16));
    KernelHostFs host(tree.root());

    client::DaemonView v;
    v.iommu = true;
    v.groups.push_back(grp(13, "bound",
                           {rec("0000:01:00.0", Role::Allowlisted, "nvidia.com/GH100"),
                            rec("0000:01:00.1", Role::Companion, nullptr),
                            rec("0000:00:01.0", Role::Bridge, nullptr, "pcieport")},
                           0));
    v.groups.push_back(grp(14, "released", {rec("0000:02:00.0", Role::Allowlisted, "nvidia.com/GH100")}, 0));
    v.groups.push_back(grp(15, "bound", {rec("0000:03:00.0", Role::Allowlisted, "nvidia.com/GH100")}, 0));
    v.groups.push_back(grp(16, "bound",
                           {rec("0000:40:00.0", Role::Allowlisted, nullptr, "mlx5_vfio_pci")}, -1));
    v.groups.push_back(grp(17, "refused", {rec("0000:04:00.0", Role::Allowlisted, "x.com/y")}, 0));
    v.groups.push_back(grp(18, "bound", {rec("0000:05:00.0", Role::Allowlisted, "x.com/y")}, 1));
    v.groups.push_back(grp(19, "pending", {rec("0000:06:00.0", Role::Allowlisted, "x.com/y")}, 1));

    std::vector<unsigned> asked;
    auto inv = make_inventory(v, [&](unsigned g) {
        asked.push_back(g);
        return g != 15;  // group 15's /dev/vfio/15 is missing
    }, host);
    // Each group's node is looked at once at most.
    EXPECT_EQ(std::set<unsigned>(asked.begin(), asked.end()).size(), asked.size());

    std::vector<std::string> names;
    for (const auto& d : inv->devices)
        names.push_back(d.name);
    EXPECT_EQ(names, (std::vector<std::string>{"pci-0000-01-00-0", "pci-0000-05-00-0",
                                               "pci-0000-40-00-0"}));
    const DraDevice* gpu = inv->find("pci-0000-01-00-0");
    ASSERT_TRUE(gpu);
    EXPECT_EQ(gpu->address, addr("0000:01:00.0"));
    EXPECT_EQ(gpu->group, 13u);
    EXPECT_EQ(gpu->resource_name, "nvidia.com/GH100");
    EXPECT_EQ(gpu->ids.vendor, 0x10de);
    EXPECT_EQ(gpu->ids.class_code, 0x030200u);
    EXPECT_EQ(gpu->driver, "vfio-pci");
    EXPECT_EQ(gpu->numa_node, 0);
    EXPECT_EQ(gpu->pcie_root, "pci0000:00");
    const DraDevice* nic = inv->find("pci-0000-40-00-0");
    ASSERT_TRUE(nic);
    EXPECT_EQ(nic->pcie_root, "pci0000:40");
    EXPECT_EQ(nic->driver, "mlx5_vfio_pci");
    EXPECT_EQ(nic->resource_name, "");
    EXPECT_EQ(nic->numa_node, -1);
    EXPECT_EQ(inv->find("pci-0000-05-00-0")->pcie_root, "");  // no sysfs entry: no pcieRoot
    EXPECT_FALSE(device_attributes(*inv->find("pci-0000-05-00-0"), nullptr)
                     .contains("resource.kubernetes.io/pcieRoot"));
    for (const char* gone : {"pci-0000-01-00-1", "pci-0000-00-01-0", "pci-0000-02-00-0",
                             "pci-0000-03-00-0", "pci-0000-04-00-0", "pci-0000-06-00-0", "x", ""})
        EXPECT_FALSE(inv->find(gone)) << gone;
    // The device plugin's snapshot rides along for Prepare (group mates).
    EXPECT_EQ(inv->snapshot.group_functions.at(13).size(), 2u);

    // The next inventory takes the roots of the functions published before from them, and reads
    // only the new function's: with the GPU's sysfs link gone, its root is still known, while
    // the NIC, released meanwhile and back, is read again.
    std::filesystem::remove(tree.root() + "/sys/bus/pci/devices/0000:01:00.0");
    std::filesystem::remove(tree.root() + "/sys/bus/pci/devices/0000:40:00.0");
    auto without_nic = v;
    without_nic.groups.erase(without_nic.groups.begin() + 3);
    auto between = make_inventory(without_nic, [](unsigned) { return true; }, host, inv.get());
    auto next = make_inventory(v, [](unsigned) { return true; }, host, between.get());
    EXPECT_EQ(next->find("pci-0000-01-00-0")->pcie_root, "pci0000:00");
    EXPECT_EQ(next->find("pci-0000-40-00-0")->pcie_root, "");
}

// Health as DRA says it (DESIGN §13): a function's own; failed when a group mate is failed
// (the group is handed out whole), naming the mate; an mdev's is its parent's.
TEST(DraDevices, HealthIsTheFunctionsOwnOrItsFailedGroupMates) {
    test::FakeTree tree;
    KernelHostFs host(tree.root());
    client::DaemonView v;
    v.groups.push_back(grp(13, "bound",
                           {rec("0000:01:00.0", Role::Allowlisted, "x.com/gpu"),
                            rec("0000:01:00.1", Role::Allowlisted, "x.com/gpu")},
                           0));
    v.groups.push_back(grp(14, "bound", {rec("0000:02:00.0", Role::Allowlisted, "x.com/gpu")}, 0));
    v.groups.push_back(grp(15, "bound", {rec("0000:03:00.0", Role::Allowlisted, "x.com/gpu")}, 0));
    v.groups[0].health = "failed";
    v.groups[0].device_health[addr("0000:01:00.0")] = {"ok", ""};
    v.groups[0].device_health[addr("0000:01:00.1")] = {"failed", "aer-fatal: recovery failed"};
    v.groups[1].health = "degraded";
    v.groups[1].device_health[addr("0000:02:00.0")] = {"degraded",
                                                       "aer-correctable: 3 since start"};
    // Group 15 from a vfiod that publishes no health.
    auto inv = make_inventory(v, [](unsigned) { return true; }, host);
    ASSERT_EQ(inv->devices.size(), 4u);
    EXPECT_EQ(inv->find("pci-0000-01-00-1")->health,
              (client::Health{"failed", "aer-fatal: recovery failed"}));
    EXPECT_EQ(inv->find("pci-0000-01-00-0")->health,
              (client::Health{"failed",
                              "group-member-failed: 0000:01:00.1 aer-fatal: recovery failed"}));
    EXPECT_EQ(inv->find("pci-0000-02-00-0")->health.state, "degraded");
    EXPECT_EQ(inv->find("pci-0000-03-00-0")->health, client::Health{});
    // A group failed with no failed function in the view still fails its functions.
    v.groups[0].device_health.clear();
    inv = make_inventory(v, [](unsigned) { return true; }, host);
    EXPECT_EQ(inv->find("pci-0000-01-00-0")->health,
              (client::Health{"failed", "group-member-failed: IOMMU group 13 is failed"}));
}

TEST(DraDevices, KubeletHealthOfEachState) {
    EXPECT_EQ(kubelet_health({"ok", ""}), (HealthReport{KubeletHealth::Healthy, ""}));
    EXPECT_EQ(kubelet_health({"degraded", "aer-correctable: 3 since start"}),
              (HealthReport{KubeletHealth::Healthy, "degraded: aer-correctable: 3 since start"}));
    EXPECT_EQ(kubelet_health({"failed", "gone: config reads all ones"}),
              (HealthReport{KubeletHealth::Unhealthy, "gone: config reads all ones"}));
    EXPECT_EQ(kubelet_health({"unknown", "no-aer"}),
              (HealthReport{KubeletHealth::Unknown, "no-aer"}));
    EXPECT_EQ(kubelet_health({}).health, KubeletHealth::Unknown);
    EXPECT_EQ(kubelet_health({"on-fire", "x"}).health, KubeletHealth::Unknown);
    // A hostile reason: escaped, and cut below the kubelet's limit.
    HealthReport r = kubelet_health({"failed", "x\x1b[2J" + std::string(5000, 'a')});
    EXPECT_EQ(r.health, KubeletHealth::Unhealthy);
    EXPECT_LE(r.message.size(), kMaxHealthMessage);
    EXPECT_GT(r.message.size(), kMaxHealthMessage - 10);
    EXPECT_EQ(r.message.find('\x1b'), std::string::npos);
}

TEST(DraDevices, TaintValueIsTheReasonCodeAsALabelValue) {
    EXPECT_EQ(taint_value({"ok", ""}), "");
    EXPECT_EQ(taint_value({"degraded", "aer-recovered: x"}), "");
    EXPECT_EQ(taint_value({"unknown", "no-aer"}), "");
    EXPECT_EQ(taint_value({"failed", "aer-fatal: recovery failed"}), "aer-fatal");
    EXPECT_EQ(taint_value({"failed", "quarantine: its driver did not take it"}), "quarantine");
    EXPECT_EQ(taint_value({"failed", ""}), "failed");
    EXPECT_EQ(taint_value({"failed", "--: x"}), "failed");
    EXPECT_EQ(taint_value({"failed", "-a b:c-: x"}), "a-b-c");
    EXPECT_EQ(taint_value({"failed", "\xff\xfeok"}), "ok");
    std::string v = taint_value({"failed", std::string(200, 'z')});
    EXPECT_EQ(v, std::string(63, 'z'));
}

std::vector<DraDevice> many(size_t n) {
    std::vector<DraDevice> out;
    for (size_t i = 0; i < n; ++i) {
        DraDevice d = sample();
        d.address = PciAddress{static_cast<uint32_t>(i / 256), static_cast<uint8_t>(i % 256), 0, 0};
        d.name = device_name(d.address);
        d.group = static_cast<unsigned>(i);
        out.push_back(d);
    }
    // Not in name order: make_slices sorts.
    std::reverse(out.begin(), out.end());
    return out;
}

TEST(DraDevices, FourThousandEightyDevicesMakeSixtyFourSlices) {
    Pool pool{"vfio.vfiod.io", "worker-1", "0b9f6c1e-uid", 7};
    auto devices = many(4080);
    std::vector<std::string> omitted;
    auto slices = make_slices(devices, pool, &omitted);
    ASSERT_EQ(slices.size(), 64u);
    EXPECT_TRUE(omitted.empty());
    std::set<std::string> slice_names, device_names;
    std::string last;
    for (size_t i = 0; i < slices.size(); ++i) {
        const auto& s = slices[i];
        EXPECT_EQ(s["apiVersion"], "resource.k8s.io/v1");
        EXPECT_EQ(s["kind"], "ResourceSlice");
        EXPECT_FALSE(s["metadata"].contains("resourceVersion"));
        std::string name = s["metadata"]["name"];
        EXPECT_EQ(name, slice_name(pool, i));
        EXPECT_TRUE(is_subdomain(name)) << name;
        slice_names.insert(name);
        EXPECT_EQ(s["metadata"]["ownerReferences"],
                  (nlohmann::json::array({{{"apiVersion", "v1"}, {"kind", "Node"},
                                           {"name", "worker-1"}, {"uid", "0b9f6c1e-uid"},
                                           {"controller", true}}})));
        EXPECT_EQ(s["spec"]["driver"], "vfio.vfiod.io");
        EXPECT_EQ(s["spec"]["nodeName"], "worker-1");
        EXPECT_EQ(s["spec"]["pool"], (nlohmann::json{{"name", "worker-1"}, {"generation", 7},
                                                     {"resourceSliceCount", 64}}));
        const auto& devs = s["spec"]["devices"];
        EXPECT_LE(devs.size(), kDevicesPerSlice);
        EXPECT_GT(devs.size(), 0u);
        for (const auto& d : devs) {
            std::string n = d["name"];
            EXPECT_GT(n, last);  // name order across all slices
            last = n;
            device_names.insert(n);
        }
    }
    EXPECT_EQ(slice_names.size(), 64u);
    EXPECT_EQ(device_names.size(), 4080u);
    // Deterministic: the same input gives the same bytes.
    auto again = make_slices(many(4080), pool, nullptr);
    ASSERT_EQ(again.size(), slices.size());
    for (size_t i = 0; i < slices.size(); ++i)
        EXPECT_EQ(again[i].dump(), slices[i].dump());

    // 64 is one slice, 65 two (DESIGN §10: 64 always, the limit of a slice with a taint); none,
    // none.
    EXPECT_EQ(make_slices(many(64), pool, nullptr).size(), 1u);
    auto two = make_slices(many(65), pool, nullptr);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_EQ(two[1]["spec"]["devices"].size(), 1u);
    EXPECT_EQ(two[0]["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_TRUE(make_slices({}, pool, nullptr).empty());
}

// A failed device carries the vfiod.io/unhealthy taint (DESIGN §13); every other state none,
// not even an empty list. What the server adds to a taint is no difference; a server that
// dropped the taints is told apart from one that kept them.
TEST(DraDevices, AFailedDeviceIsTaintedInItsSlice) {
    static_assert(kDevicesPerSlice == 64);
    Pool pool{"vfio.vfiod.io", "worker-1", "0b9f6c1e-uid", 3};
    auto devices = many(4);
    devices[0].health = {"failed", "aer-fatal: recovery failed"};  // pci-0000-03-00-0
    devices[1].health = {"degraded", "aer-correctable: 3 since start"};
    devices[2].health = {"unknown", "no-aer"};
    auto slices = pool_slices(devices, pool, nullptr);
    ASSERT_EQ(slices.size(), 1u);
    SliceToWrite want = to_write(slices[0]);
    const auto& devs = want.object["spec"]["devices"];
    ASSERT_EQ(devs.size(), 4u);
    for (size_t i = 0; i < 3; ++i)
        EXPECT_FALSE(devs[i].contains("taints")) << devs[i].dump();
    EXPECT_EQ(devs[3]["name"], "pci-0000-03-00-0");
    EXPECT_EQ(devs[3]["taints"],
              (nlohmann::json::array({{{"key", "vfiod.io/unhealthy"}, {"value", "aer-fatal"},
                                       {"effect", "NoSchedule"}}})));

    ServerSlice have = server_slice(want.object);
    have.object["spec"]["devices"][3]["taints"][0]["timeAdded"] = "2026-07-01T10:00:00Z";
    have.object["metadata"]["resourceVersion"] = "12";
    EXPECT_TRUE(holds(have, want));
    EXPECT_FALSE(taints_dropped(have, want));
    have.object["spec"]["devices"][3]["taints"][0]["value"] = "gone";
    EXPECT_FALSE(holds(have, want));

    ServerSlice dropped = server_slice(want.object);
    dropped.object["spec"]["devices"][3].erase("taints");
    EXPECT_TRUE(taints_dropped(dropped, want));
    EXPECT_FALSE(holds(dropped, want));
    dropped.object["spec"]["devices"][3]["taints"] = nlohmann::json::array();
    EXPECT_TRUE(taints_dropped(dropped, want));
    // Nothing tainted to send: nothing to drop.
    EXPECT_FALSE(taints_dropped(dropped, to_write(pool_slices(many(4), pool, nullptr)[0])));
}

// ---- mediated devices (DESIGN §12) ----

constexpr char kUuidA[] = "6d966230-f3a1-5551-97f3-4aec0da0213a";
constexpr char kUuidB[] = "0b1e1e5a-8f2c-5d7a-9b7e-2f1c3d4e5f60";

TEST(DraDevices, MdevAttributesNameTheMdevNeverItsParentGpu) {
    DraDevice d = test::dra_mdev(kUuidA, 21);
    d.numa_node = 1;
    EXPECT_EQ(d.name, std::string("mdev-") + kUuidA);
    EXPECT_TRUE(is_label(d.name)) << d.name;
    std::vector<std::string> omitted;
    auto a = device_attributes(d, &omitted);
    EXPECT_TRUE(omitted.empty());
    nlohmann::json want = {
        {"mdevUUID", {{"string", kUuidA}}},
        {"type", {{"string", "nvidia-222"}}},
        {"typeName", {{"string", "GRID T4-1Q"}}},
        {"resourceName", {{"string", "nvidia.com/GRID_T4-1Q"}}},
        {"iommuGroup", {{"int", 21}}},
        {"numaNode", {{"int", 1}}},
        {"resource.kubernetes.io/pcieRoot", {{"string", "pci0000:00"}}},
    };
    EXPECT_EQ(a, want) << a.dump(2);
    // A virtual parent ("mbochs") has no PCIe root: no pcieRoot, and still no pciBusID.
    d.pcie_root.clear();
    d.numa_node = -1;
    a = device_attributes(d, nullptr);
    EXPECT_FALSE(a.contains("resource.kubernetes.io/pcieRoot"));
    EXPECT_FALSE(a.contains("resource.kubernetes.io/pciBusID"));
    EXPECT_FALSE(a.contains("numaNode"));
    EXPECT_EQ(a.size(), 5u) << a.dump();
}

client::DaemonMdev mdev(const std::string& uuid, const char* parent, const char* type,
                        const char* resource, const char* state, std::optional<unsigned> group,
                        int numa = -1) {
    client::DaemonMdev m;
    m.plan.uuid = uuid;
    m.plan.parent = parent;
    m.plan.type = type;
    m.plan.type_name = std::string(type) + " name";
    m.plan.resource_name = resource;
    m.plan.group = group;
    m.state = state;
    m.state_value = parse_mdev_state(state);
    m.vfio_path = group ? "/dev/vfio/" + std::to_string(*group) : "";
    m.numa_node = numa;
    return m;
}

// Only mdevs plugin::mdev_served serves are devices: ready with their /dev/vfio node. A pending,
// refused (in-use-mdev), failed or foreign one, UUID-shaped and with a node, is never published,
// nor a ready one whose node is missing or whose UUID is not canonical. Two types may share one
// resource name, each its own type attribute.
TEST(DraDevices, InventoryServesReadyMdevsOnly) {
    test::FakeTree tree;
    tree.enable_iommu();
    tree.add_function(test::FakeTree::pci("0000:00:01.0", "8086", "1901", "060400", "pcieport", 1));
    tree.add_function(test::FakeTree::pci("0000:3b:00.0", "10de", "1eb8", "030200", "nvidia", 2,
                                          "0000:00:01.0"));
    KernelHostFs host(tree.root());
    const std::string t4 = "nvidia.com/T4";
    std::vector<std::string> ready, not_served;
    client::DaemonView v;
    v.mdevs.emplace();
    auto add = [&](client::DaemonMdev m, bool served) {
        (served ? ready : not_served).push_back(mdev_device_name(m.plan.uuid));
        v.mdevs->push_back(std::move(m));
    };
    const std::string q1 = mdev_uuid("0000:3b:00.0", "nvidia-222", 0);
    const std::string q2 = mdev_uuid("0000:3b:00.0", "nvidia-223", 0);
    const std::string small = mdev_uuid("mbochs", "mbochs-small", 0);
    add(mdev(q1, "0000:3b:00.0", "nvidia-222", t4.c_str(), "ready", 30, 0), true);
    add(mdev(q2, "0000:3b:00.0", "nvidia-223", t4.c_str(), "ready", 31, 0), true);
    add(mdev(small, "mbochs", "mbochs-small", "vfiod.io/mbochs-small", "ready", 32), true);
    add(mdev(mdev_uuid("mbochs", "mbochs-small", 1), "mbochs", "mbochs-small", "", "pending", 33),
        false);
    add(mdev(mdev_uuid("mbochs", "mbochs-small", 2), "mbochs", "mbochs-small", "", "refused", 34),
        false);
    add(mdev(mdev_uuid("mbochs", "mbochs-small", 3), "mbochs", "mbochs-small", "", "failed", 35),
        false);
    add(mdev(kUuidB, "mbochs", "mbochs-small", "", "foreign", 36), false);  // made by hand
    add(mdev(mdev_uuid("mbochs", "mbochs-small", 4), "mbochs", "mbochs-small", "", "ready", 37),
        false);  // its /dev/vfio/37 is missing
    add(mdev(mdev_uuid("mbochs", "mbochs-small", 5), "mbochs", "mbochs-small", "", "ready",
             std::nullopt), false);
    std::string upper = mdev_uuid("mbochs", "mbochs-small", 6);
    std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
    add(mdev(upper, "mbochs", "mbochs-small", "", "ready", 38), false);

    auto inv = make_inventory(v, [](unsigned g) { return g != 37; }, host);
    std::vector<std::string> names;
    for (const auto& d : inv->devices)
        names.push_back(d.name);
    std::sort(ready.begin(), ready.end());
    EXPECT_EQ(names, ready);
    for (const auto& n : not_served)
        EXPECT_FALSE(inv->find(n)) << n;

    const DraDevice* a = inv->find(mdev_device_name(q1));
    const DraDevice* b = inv->find(mdev_device_name(q2));
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->mdev.uuid, q1);
    EXPECT_EQ(a->group, 30u);
    EXPECT_EQ(a->numa_node, 0);
    EXPECT_EQ(a->mdev.type_name, "nvidia-222 name");
    EXPECT_EQ(a->pcie_root, "pci0000:00");  // the PCI parent's
    EXPECT_EQ(a->host_id(), q1);
    auto attrs_a = device_attributes(*a, nullptr), attrs_b = device_attributes(*b, nullptr);
    EXPECT_EQ(attrs_a["resourceName"], attrs_b["resourceName"]);
    EXPECT_EQ(attrs_a["type"], (nlohmann::json{{"string", "nvidia-222"}}));
    EXPECT_EQ(attrs_b["type"], (nlohmann::json{{"string", "nvidia-223"}}));
    EXPECT_FALSE(attrs_a.contains("resource.kubernetes.io/pciBusID"));
    EXPECT_EQ(inv->find(mdev_device_name(small))->pcie_root, "");  // a virtual parent

    // Withdrawn once vfiod no longer calls it ready (about to be removed, in-use-mdev), and
    // when its node goes; back when it is ready again.
    auto later = v;
    (*later.mdevs)[0].state = "pending";
    (*later.mdevs)[0].state_value = MdevState::Pending;
    auto next = make_inventory(later, [](unsigned g) { return g != 37 && g != 31; }, host,
                               inv.get());
    EXPECT_FALSE(next->find(mdev_device_name(q1)));
    EXPECT_FALSE(next->find(mdev_device_name(q2)));
    EXPECT_TRUE(next->find(mdev_device_name(small)));
    EXPECT_EQ(make_inventory(v, [](unsigned g) { return g != 37; }, host, next.get())->devices,
              inv->devices);
}

TEST(DraDevices, AnMdevsNodesAreItsOwnGroupsAndItsIommufdNode) {
    test::FakeTree tree;
    for (const char* f : {"dev/vfio/vfio", "dev/vfio/21", "dev/vfio/22", "dev/iommu",
                          "dev/vfio/devices/vfio3"})
        tree.write_file(f, "");
    tree.write_file(std::string("sys/bus/mdev/devices/") + kUuidA + "/vfio-dev/vfio3/dev", "");
    // The kernel lists vfio-dev/vfio4 of the other, but has no character device for it (6.1).
    tree.write_file(std::string("sys/bus/mdev/devices/") + kUuidB + "/vfio-dev/vfio4/dev", "");
    KernelHostFs host(tree.root());
    plugin::Snapshot none;
    auto paths = [&](const DraDevice& d) {
        std::vector<std::string> out;
        for (const auto& n : device_nodes(d, none, host))
            out.push_back(n.path);
        return out;
    };
    EXPECT_EQ(paths(test::dra_mdev(kUuidA, 21)),
              (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/21", "/dev/iommu",
                                        "/dev/vfio/devices/vfio3"}));
    EXPECT_EQ(paths(test::dra_mdev(kUuidB, 22)),
              (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/22"}));
}

// 256 mdevs are 4 slices of 64. Which slice holds a device follows from the names alone: what
// a device's attributes say (a taint, a later issue, included) never moves one to another slice.
TEST(DraDevices, TwoHundredFiftySixMdevsMakeFourStableSlicesOfSixtyFour) {
    Pool pool{"vfio.vfiod.io", "worker-1", "uid-1", 1};
    std::vector<DraDevice> devices;
    for (unsigned i = 0; i < 256; ++i)
        devices.push_back(test::dra_mdev(mdev_uuid("vgpu" + std::to_string(i / 32), "vgpu-1q",
                                                   i % 32), 100 + i));
    auto members = [&](const std::vector<DraDevice>& ds) {
        std::vector<std::vector<std::string>> out;
        for (const auto& s : pool_slices(ds, pool, nullptr)) {
            out.emplace_back();
            for (const auto& d : s.devices)
                out.back().push_back(d.name);
        }
        return out;
    };
    auto before = members(devices);
    ASSERT_EQ(before.size(), 4u);
    std::set<std::string> all;
    for (const auto& s : before) {
        EXPECT_EQ(s.size(), 64u);
        all.insert(s.begin(), s.end());
    }
    EXPECT_EQ(all.size(), 256u);
    for (const auto& s : pool_slices(devices, pool, nullptr))
        EXPECT_EQ(s.slice_count, 4);

    auto changed = devices;
    std::reverse(changed.begin(), changed.end());  // order given does not matter either
    for (size_t i = 0; i < changed.size(); i += 3) {
        changed[i].numa_node = 1;
        changed[i].mdev.type_name = std::string(65, 'n');  // omitted: an attribute fewer
        changed[i].resource_name.clear();
    }
    EXPECT_EQ(members(changed), before);
}

TEST(DraDevices, NoOwnerReferenceWithoutNodeUid) {
    Pool pool{"vfio.vfiod.io", "worker-1", "", 1};
    auto slices = make_slices(many(3), pool, nullptr);
    ASSERT_EQ(slices.size(), 1u);
    EXPECT_FALSE(slices[0]["metadata"].contains("ownerReferences"));
}

TEST(DraDevices, SliceNames) {
    Pool pool{"vfio.vfiod.io", "worker-1", "", 1};
    EXPECT_EQ(slice_name(pool, 0), "worker-1-vfio.vfiod.io-0");
    EXPECT_EQ(slice_name(pool, 31), "worker-1-vfio.vfiod.io-31");

    // Long node names (253 characters is legal for a Node) stay within 253, stay distinct per
    // index and per node, and are the same every time.
    std::set<std::string> seen;
    for (std::string node : {std::string(253, 'a'), std::string(252, 'a') + "b",
                             std::string(200, 'n') + "." + std::string(52, 'm'),
                             std::string(240, 'a') + "-" + std::string(12, 'b')}) {
        Pool p{"vfio.vfiod.io", node, "", 1};
        for (size_t i : {size_t{0}, size_t{1}, size_t{31}, size_t{12345678}}) {
            std::string n = slice_name(p, i);
            EXPECT_TRUE(is_subdomain(n)) << n;
            EXPECT_EQ(n, slice_name(p, i));
            EXPECT_TRUE(seen.insert(n).second) << n;
        }
    }
    // Hostile node and driver names still give valid, distinct names.
    for (auto [node, driver] :
         std::vector<std::pair<std::string, std::string>>{
             {"Node_A", "vfio.vfiod.io"}, {"node-a", "vfio.vfiod.io"}, {"..", "-"},
             {"", ""}, {"a/b", "c"}, {"a..b", "x.-y"}, {std::string("n\0x", 3), "d"},
             {"ü", "d"}, {"-", "."}}) {
        Pool p{driver, node, "", 1};
        std::string n = slice_name(p, 3);
        EXPECT_TRUE(is_subdomain(n)) << "'" << node << "' '" << driver << "' -> " << n;
        EXPECT_TRUE(seen.insert(n).second) << n;
    }
}

}  // namespace
}  // namespace vfiod::dra
