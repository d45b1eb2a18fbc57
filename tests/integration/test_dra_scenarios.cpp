// vfiod-dra-plugin end to end (DESIGN §10, issue 26 "Scenarios"): a private dbus-daemon, vfiod on
// a synthetic host (the test build on the fake kernel in enforce mode, or a stand-in vfiod for
// the 4,080-function fleet), the fake API server (HTTPS with a test CA) holding the Node and the
// claims, the real vfiod-dra-plugin binary, and the fake DRA kubelet registering it from its
// registration socket and calling Prepare/Unprepare on the kubelet's literal method paths.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mdev.hpp"
#include "dbus_client.hpp"
#include "dra_cluster.hpp"
#include "fake_apiserver.hpp"
#include "fake_dra_kubelet.hpp"
#include "fake_vfiod_peer.hpp"
#include "kube_api.hpp"
#include "plugin_env.hpp"
#include "scenarios.hpp"

namespace vfiod::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// DESIGN §10's goal for a change, and for slices a kubelet deleted, is 1 s; that goal is judged
// in bench/ and the VM. A test on a loaded two-core CI machine fails only at three times it (a
// change missed, or one waiting for a poll or a backed-off retry). Measured times are printed.
constexpr auto kServedLimit = 3s;
// The plugin's first slices: vfiod read, the Node read, the stale slices listed, then written.
constexpr auto kStartLimit = 15s;

long ms_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

const char kPciBusId[] = "resource.kubernetes.io/pciBusID";
const char kMdevUuid[] = "mdevUUID";  // KubeVirt's pkg/dra MDevUUIDAttribute: unqualified
const char kPcieRoot[] = "resource.kubernetes.io/pcieRoot";
// Host paths, as the kubelet and the plugin name them; the plugin finds them under --root.
const char kRegistrarDir[] = "/var/lib/kubelet/plugins_registry";
const char kPluginDir[] = "/var/lib/kubelet/plugins/vfio.vfiod.io";
const char kCdiDir[] = "/var/run/cdi";
const char kStateDir[] = "/var/lib/vfiod-dra-plugin";
// DESIGN §10 (KEP-5304): where the metadata file appears in the container.
const char kMetadataBase[] = "/var/run/kubernetes.io/dra-device-attributes";

// What vfiod binds of k8s-host under kK8sHostConfig (tests/support/scenarios.hpp) and allowlists.
const std::set<std::string> kBound = {"pci-0000-01-00-0", "pci-0000-01-00-1",
                                      "pci-0000-03-00-0", "pci-0000-05-00-0"};

// Every regular file under `dir`, relative to it (empty when `dir` is missing).
std::set<std::string> files_under(const std::string& dir) {
    std::set<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return out;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file(ec) || it->is_symlink(ec))
            out.insert(fs::relative(it->path(), dir).string());
    return out;
}

std::string joined(const std::set<std::string>& s) {
    std::string out;
    for (const auto& x : s)
        out += (out.empty() ? "" : ", ") + x;
    return out;
}

// What KubeVirt's pkg/dra (GetMDevUUIDForClaim, then GetPCIAddressForClaim, v1.9) does in
// virt-launcher: the claim's request directory under the metadata base (resourceclaims/<claim>
// for a claim the VMI names, resourceclaimtemplates/<pod claim> for one made from a template),
// exactly one "*-metadata.json" there, the file read as a JSON stream whose first object of a
// known apiVersion (metadata.resource.k8s.io/v1alpha1) counts, the request found by name with
// exactly one device, and that device's unqualified mdevUUID string when it has one (asked
// first: the device is an mdev), else its resource.kubernetes.io/pciBusID string. "" and *err
// otherwise.
std::string kubevirt_device(const std::string& base, const std::string& resource_claim_name,
                                const std::string& pod_claim_name, const std::string& request,
                                std::string* err) {
    std::string dir = resource_claim_name.empty()
                          ? base + "/resourceclaimtemplates/" + pod_claim_name + "/" + request
                          : base + "/resourceclaims/" + resource_claim_name + "/" + request;
    std::vector<std::string> matches;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
        std::string n = it->path().filename().string();
        if (n.size() > 14 && n.compare(n.size() - 14, 14, "-metadata.json") == 0)
            matches.push_back(it->path().string());
    }
    if (matches.size() != 1) {
        *err = std::to_string(matches.size()) + " metadata files in " + dir + " (KubeVirt wants 1)";
        return "";
    }
    std::ifstream in(matches[0]);
    std::vector<std::string> unknown;
    while (true) {
        in >> std::ws;
        if (in.peek() == std::char_traits<char>::eof())
            break;
        json obj;
        try {
            in >> obj;  // one value of the stream, as json.Decoder.Decode
        } catch (const std::exception& e) {
            *err = matches[0] + ": " + e.what();
            return "";
        }
        if (!obj.is_object() || !obj.contains("apiVersion") || !obj["apiVersion"].is_string() ||
            obj["apiVersion"].get<std::string>().empty()) {
            *err = matches[0] + ": an object without apiVersion";
            return "";
        }
        if (obj["apiVersion"] != "metadata.resource.k8s.io/v1alpha1") {
            unknown.push_back(obj["apiVersion"].get<std::string>());
            continue;
        }
        for (const auto& req : obj.value("requests", json::array())) {
            if (req.value("name", "") != request)
                continue;
            const json devices = req.value("devices", json::array());
            if (devices.size() != 1) {
                *err = "request " + request + " has " + std::to_string(devices.size()) +
                       " devices; KubeVirt takes exactly one";
                return "";
            }
            const json& attrs = devices[0].value("attributes", json::object());
            for (const char* name : {kMdevUuid, kPciBusId})
                if (attrs.contains(name) && attrs[name].is_object() &&
                    attrs[name].contains("string") && attrs[name]["string"].is_string() &&
                    !attrs[name]["string"].get<std::string>().empty())
                    return attrs[name]["string"];
            *err = "neither mdevUUID nor pciBusID for request " + request + " in " + matches[0];
            return "";
        }
        *err = "request " + request + " not found in " + matches[0];
        return "";
    }
    *err = matches[0] + ": no metadata object of a known version (" +
           std::to_string(unknown.size()) + " unknown)";
    return "";
}

// One claim's answer, from NodePrepareResources.
struct Prepared {
    bool called = false;  // the call itself succeeded (gRPC OK)
    std::string status;   // its gRPC error otherwise
    std::string error;    // the claim's error
    std::vector<DraDevice> devices;
};

class DraScenarioTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(env.start_bus());
        work = env.work;
        config = work + "/vfiod.toml";
        spit(config, kK8sHostConfig);
        api_dir = work + "/api";
        fs::create_directories(api_dir);
        ASSERT_TRUE(api.start(api_dir)) << "the fake API server did not start";
        auto r = add_this_node(api);
        ASSERT_TRUE(r.ok()) << r.describe();
    }

    void TearDown() override {
        auto t0 = Clock::now();
        int code = plugin.stop(SIGTERM);
        if (code != -1) {
            EXPECT_EQ(code, 0) << "vfiod-dra-plugin's exit status on SIGTERM";
            EXPECT_LT(ms_since(t0), 5000) << "SIGTERM -> exit";
        }
        peer.stop();
        vfiod.stop();
        env.bus.stop();
        if (HasFailure()) {
            std::cerr << "--- plugin log ---\n" << slurp(work + "/plugin.log");
            std::cerr << "--- vfiod log (tail) ---\n" << tail(slurp(work + "/vfiod.log"), 4000);
            std::cerr << "--- API server writes (tail) ---\n"
                      << tail(slurp(api_dir + "/writes.jsonl"), 4000);
        } else {
            fs::remove_all(work);
        }
    }

    static std::string tail(const std::string& s, size_t n) {
        return s.size() > n ? "..." + s.substr(s.size() - n) : s;
    }

    // vfiod (the test build on the fake kernel) in enforce mode on k8s-host; sets root.
    void start_fake_vfiod() {
        root = env.start_fake_vfiod(&vfiod, "k8s-host", config);
        ASSERT_FALSE(root.empty()) << "vfiod did not get ready";
    }

    // A stand-in vfiod publishing `functions` bound, each group's /dev/vfio/N under a fresh root.
    void start_peer(std::vector<FakeVfiodPeer::Function> functions) {
        root = work + "/root";
        fs::create_directories(root + "/dev/vfio");
        spit(root + "/dev/vfio/vfio", "");
        for (const auto& f : functions)
            spit(root + "/dev/vfio/" + std::to_string(f.group), "");
        peer.set_inventory(std::move(functions));
        ASSERT_TRUE(peer.start());
    }

    void start_plugin() {
        plugin = Proc({VFIOD_DRA_PLUGIN, "--node-name", kNode, "--driver-name", kDriver, "--root",
                       root, "--registrar-dir", kRegistrarDir, "--plugin-dir", kPluginDir,
                       "--cdi-dir", kCdiDir, "--state-dir", kStateDir, "--kubeconfig",
                       api.kubeconfig(), "--verbose"},
                      work + "/plugin.log");
        ASSERT_GT(plugin.pid(), 0);
    }

    // What the kubelet's plugin watcher does with the registration socket (under the root):
    // GetInfo, the DRA socket it names dialled (under the root), NotifyRegistrationStatus. The
    // answer is checked against DESIGN §10.
    bool register_plugin() {
        DraPluginInfo info;
        std::string err;
        if (!kubelet.register_plugin(root + kRegistrarDir + "/" + kDriver + "-reg.sock", &info,
                                     &err, root)) {
            last_registration_error = err;
            return false;
        }
        EXPECT_EQ(info.type, "DRAPlugin");
        EXPECT_EQ(info.name, kDriver);
        EXPECT_EQ(info.endpoint, std::string(kPluginDir) + "/dra.sock");
        EXPECT_EQ(vfiod::test::pick_health_service(info.supported_versions),
                  "v1.DRAResourceHealth");
        EXPECT_EQ(info.supported_versions.front(), "v1.DRAPlugin");
        ++registrations;
        return true;
    }
    bool registered(std::chrono::milliseconds t = 10s) {
        bool ok = eventually([&] { return register_plugin(); }, t);
        if (!ok)
            ADD_FAILURE() << "not registered: " << last_registration_error;
        return ok;
    }

    std::optional<std::vector<json>> slices() { return node_slices(api); }
    // The devices those slices publish, by name; names published twice in *twice (while the
    // slices are rewritten a device may move between two of them, so only a settled pool is
    // held to it).
    std::map<std::string, json> published(std::set<std::string>* twice = nullptr) {
        std::map<std::string, json> out;
        auto ss = slices();
        if (!ss)
            return out;
        for (const auto& s : *ss)
            for (const auto& d : s["spec"].value("devices", json::array())) {
                std::string name = d.value("name", "");
                if (out.count(name) && twice)
                    twice->insert(name);
                out[name] = d;
            }
        return out;
    }
    std::set<std::string> published_names() {
        std::set<std::string> out;
        for (const auto& [n, d] : published())
            out.insert(n);
        return out;
    }
    bool settled(const std::set<std::string>& names) { return pool_settled(api, names); }
    bool publishes(const std::set<std::string>& names, std::chrono::milliseconds t) {
        return eventually([&] { return settled(names); }, t);
    }

    void add_claim(const json& claim) {
        auto r = api.control("POST", "/_fake/claims", claim.dump());
        ASSERT_TRUE(r.ok()) << r.describe();
    }

    // NodePrepareResources for the claims (namespace "default"), through the fake kubelet; one
    // answer per claim, in the order given.
    std::vector<Prepared> prepare(const std::vector<std::pair<std::string, std::string>>& claims) {
        std::vector<DraClaim> refs;
        for (const auto& [name, uid] : claims)
            refs.push_back({uid, "default", name});
        DraCallResult answer = kubelet.prepare(kubelet.dra_socket(), refs);
        std::vector<Prepared> out;
        for (const auto& [name, uid] : claims) {
            Prepared p;
            p.called = answer.status.ok();
            p.status = answer.status.error_message();
            auto it = answer.claims.find(uid);
            if (p.called && it == answer.claims.end())
                p.error = "(no answer for the claim)";
            if (it != answer.claims.end()) {
                p.error = it->second.error;
                p.devices = it->second.devices;
            }
            out.push_back(std::move(p));
        }
        return out;
    }
    Prepared prepare_one(const std::string& name, const std::string& uid) {
        return prepare({{name, uid}}).front();
    }
    // NodeUnprepareResources for one claim: "" when done, its error otherwise.
    std::string unprepare(const std::string& name, const std::string& uid) {
        DraCallResult answer = kubelet.unprepare(kubelet.dra_socket(), {{uid, "default", name}});
        if (!answer.status.ok())
            return "gRPC: " + answer.status.error_message();
        auto it = answer.claims.find(uid);
        if (it == answer.claims.end())
            return "(no answer for the claim)";
        return it->second.error;
    }

    // The CDI spec device an ID ("vfiod.io/vfio=NAME") names, looked up in every spec of the
    // CDI directory; its containerEdits merged with the spec's own. Null when none names it.
    json cdi_edits(const std::string& id) {
        auto eq = id.find('=');
        if (eq == std::string::npos)
            return nullptr;
        std::string kind = id.substr(0, eq), name = id.substr(eq + 1);
        for (const auto& f : files_under(root + kCdiDir)) {
            json spec;
            try {
                spec = json::parse(slurp(root + kCdiDir + "/" + f));
            } catch (const std::exception& e) {
                ADD_FAILURE() << "CDI spec " << f << " is no JSON: " << e.what();
                continue;
            }
            if (spec.value("kind", "") != kind)
                continue;
            for (const auto& d : spec.value("devices", json::array())) {
                if (d.value("name", "") != name)
                    continue;
                EXPECT_EQ(spec.value("cdiVersion", ""), "0.5.0") << f;
                json edits = d.value("containerEdits", json::object());
                json common = spec.value("containerEdits", json::object());
                for (const char* key : {"deviceNodes", "mounts"})
                    for (const auto& e : common.value(key, json::array()))
                        edits[key].push_back(e);
                return edits;
            }
        }
        return nullptr;
    }

    // What a container of the claim would see: every mount of the answer's CDI devices copied
    // from its host path (under the root) to its container path under `container`.
    void inject_mounts(const Prepared& p, const std::string& container) {
        for (const auto& d : p.devices)
            for (const auto& id : d.cdi_device_ids) {
                json edits = cdi_edits(id);
                ASSERT_FALSE(edits.is_null()) << "no CDI spec names " << id;
                for (const auto& m : edits.value("mounts", json::array())) {
                    std::string host = root + m.value("hostPath", "");
                    std::string target = container + m.value("containerPath", "");
                    ASSERT_TRUE(fs::exists(host)) << id << " mounts " << host << ", not there";
                    fs::create_directories(fs::path(target).parent_path());
                    fs::copy_file(host, target, fs::copy_options::overwrite_existing);
                }
            }
    }

    size_t log_count(const std::string& needle) {
        std::string log = slurp(work + "/plugin.log");
        size_t n = 0;
        for (auto at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
            ++n;
        return n;
    }

    PluginEnv env;
    std::string work, config, root, api_dir;
    Proc vfiod, plugin;
    FakeApiServer api;
    FakeDraKubelet kubelet;
    size_t registrations = 0;
    std::string last_registration_error;
    FakeVfiodPeer peer;
};

// Scenario 1: the slices list exactly the bound allowlisted functions, named and with the
// attributes of DESIGN §10, in one pool named after the node and owned by the Node.
TEST_F(DraScenarioTest, SlicesListExactlyTheBoundAllowlistedFunctions) {
    start_fake_vfiod();
    auto t0 = Clock::now();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit)) << "published: " << joined(published_names());
    std::printf("# start -> slices published: %ld ms\n", ms_since(t0));

    auto ss = slices();
    ASSERT_TRUE(ss);
    ASSERT_EQ(ss->size(), 1u);
    const json& s = ss->front();
    EXPECT_EQ(s["spec"]["driver"], kDriver);
    EXPECT_EQ(s["spec"]["nodeName"], kNode);
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 1);
    EXPECT_GE(s["spec"]["pool"].value("generation", 0), 1);
    ASSERT_EQ(s["metadata"].value("ownerReferences", json::array()).size(), 1u) << s.dump();
    const json& owner = s["metadata"]["ownerReferences"][0];
    EXPECT_EQ(owner["kind"], "Node");
    EXPECT_EQ(owner["name"], kNode);
    EXPECT_EQ(owner["uid"], kNodeUid);

    std::set<std::string> twice;
    auto devices = published(&twice);
    EXPECT_TRUE(twice.empty()) << "published twice: " << joined(twice);
    auto attrs = [&](const std::string& name) {
        return devices[name].value("attributes", json::object());
    };
    json gpu = attrs("pci-0000-01-00-0");
    EXPECT_EQ(gpu, (json{{kPciBusId, {{"string", "0000:01:00.0"}}},
                         {kPcieRoot, {{"string", "pci0000:00"}}},
                         {"resourceName", {{"string", "nvidia.com/GH100"}}},
                         {"vendor", {{"string", "10de"}}},
                         {"device", {{"string", "2331"}}},
                         {"class", {{"string", "030200"}}},
                         {"iommuGroup", {{"int", 13}}},
                         {"numaNode", {{"int", 0}}},
                         {"driver", {{"string", "vfio-pci"}}}}))
        << gpu.dump();
    json audio = attrs("pci-0000-01-00-1");
    EXPECT_EQ(audio[kPciBusId], (json{{"string", "0000:01:00.1"}}));
    EXPECT_EQ(audio["device"], (json{{"string", "22a3"}}));
    EXPECT_EQ(audio["class"], (json{{"string", "040300"}}));
    EXPECT_EQ(audio["iommuGroup"], (json{{"int", 13}}));
    json nic = attrs("pci-0000-05-00-0");
    EXPECT_EQ(nic[kPciBusId], (json{{"string", "0000:05:00.0"}}));
    EXPECT_EQ(nic[kPcieRoot], (json{{"string", "pci0000:00"}}));
    EXPECT_EQ(nic["resourceName"], (json{{"string", "intel.com/I210"}}));
    EXPECT_EQ(nic["vendor"], (json{{"string", "8086"}}));
    EXPECT_EQ(nic["device"], (json{{"string", "1533"}}));
    EXPECT_EQ(nic["iommuGroup"], (json{{"int", 17}}));
    EXPECT_EQ(nic["numaNode"], (json{{"int", 1}}));
    EXPECT_EQ(nic["driver"], (json{{"string", "vfio-pci"}}));
    EXPECT_EQ(attrs("pci-0000-03-00-0")["iommuGroup"], (json{{"int", 15}}));
    EXPECT_FALSE(env.activated()) << "the plugin D-Bus-activated vfiod";
}

// Scenario 2: vfiod's Release withdraws the device from the slices, its Bind puts it back, each
// within the limit; the pool's generation moves on and the other devices stay.
TEST_F(DraScenarioTest, ReleaseWithdrawsAndBindRestoresPromptly) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit)) << "published: " << joined(published_names());
    auto generation = [&] {
        auto ss = slices();
        return ss && !ss->empty() ? (*ss)[0]["spec"]["pool"].value("generation", 0) : -1;
    };
    const int64_t g0 = generation();

    std::set<std::string> without = kBound;
    without.erase("pci-0000-03-00-0");
    auto t0 = Clock::now();
    auto r = client::call_group_method("Release", "0000:03:00.0");
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_TRUE(publishes(without, kServedLimit)) << "published: " << joined(published_names());
    std::printf("# Release -> withdrawn from the slices: %ld ms\n", ms_since(t0));
    EXPECT_GT(generation(), g0);
    const int64_t g1 = generation();

    t0 = Clock::now();
    r = client::call_group_method("Bind", "0000:03:00.0");
    ASSERT_TRUE(r.ok()) << r.message;
    EXPECT_TRUE(publishes(kBound, kServedLimit)) << "published: " << joined(published_names());
    std::printf("# Bind -> back in the slices: %ld ms\n", ms_since(t0));
    EXPECT_GT(generation(), g1);
    auto ss = slices();
    ASSERT_TRUE(ss);
    EXPECT_EQ(ss->size(), 1u);
    EXPECT_FALSE(env.activated());
}

// Scenario 3: Prepare answers CDI IDs whose spec names existing device nodes and mounts the
// metadata file at DESIGN §10's container path, where KubeVirt's reader finds the pciBusID; for
// a claim the VMI names, and for one made from a template (the pod claim's name in the path).
TEST_F(DraScenarioTest, PrepareAnswersCdiDevicesAndTheMetadataKubeVirtReads) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    // The whole group 13, one function a request (KubeVirt takes one device a request).
    add_claim(claim_json("vm-a-gpu", "uid-gpu", {{"gpu", "pci-0000-01-00-0"},
                                                 {"audio", "pci-0000-01-00-1"}}));
    // An iommufd kernel for the NIC: its vfio-dev cdev and /dev/iommu exist.
    fs::create_directories(root + "/sys/bus/pci/devices/0000:05:00.0/vfio-dev/vfio3");
    fs::create_directories(root + "/dev/vfio/devices");
    spit(root + "/dev/vfio/devices/vfio3", "");
    spit(root + "/dev/iommu", "");
    // Made from a template: its name is generated, the pod's claim is "hostdev".
    add_claim(claim_json("virt-launcher-vm-b-hostdev-x7k2p", "uid-nic",
                         {{"nic", "pci-0000-05-00-0"}}, "hostdev"));

    auto t0 = Clock::now();
    auto answers = prepare({{"vm-a-gpu", "uid-gpu"}, {"virt-launcher-vm-b-hostdev-x7k2p", "uid-nic"}});
    std::printf("# Prepare of 2 claims: %ld ms\n", ms_since(t0));
    const Prepared& gpu = answers[0];
    const Prepared& nic = answers[1];
    ASSERT_TRUE(gpu.called) << gpu.status;
    ASSERT_EQ(gpu.error, "");
    ASSERT_EQ(nic.error, "");
    ASSERT_EQ(gpu.devices.size(), 2u);
    ASSERT_EQ(nic.devices.size(), 1u);

    std::map<std::string, const DraDevice*> by_device;
    for (const auto& d : gpu.devices)
        by_device[d.device_name] = &d;
    ASSERT_TRUE(by_device.count("pci-0000-01-00-0") && by_device.count("pci-0000-01-00-1"));
    EXPECT_EQ(by_device["pci-0000-01-00-0"]->request_names, std::vector<std::string>{"gpu"});
    EXPECT_EQ(by_device["pci-0000-01-00-1"]->request_names, std::vector<std::string>{"audio"});
    for (const auto* p : {&gpu, &nic})
        for (const auto& d : p->devices) {
            EXPECT_EQ(d.pool_name, kNode);
            ASSERT_FALSE(d.cdi_device_ids.empty()) << d.device_name;
            for (const auto& id : d.cdi_device_ids) {
                EXPECT_EQ(id.rfind("vfiod.io/vfio=", 0), 0u) << id;
                json edits = cdi_edits(id);
                ASSERT_FALSE(edits.is_null()) << "no CDI spec in " << root + kCdiDir << " names "
                                              << id << "; there: "
                                              << joined(files_under(root + kCdiDir));
                std::set<std::string> nodes;
                for (const auto& n : edits.value("deviceNodes", json::array())) {
                    std::string host = n.value("hostPath", n.value("path", ""));
                    nodes.insert(n.value("path", ""));
                    EXPECT_TRUE(fs::exists(root + host)) << id << " names " << host
                                                         << ", which is not under the root";
                }
                const char* group = p == &gpu ? "/dev/vfio/13" : "/dev/vfio/17";
                EXPECT_TRUE(nodes.count(group)) << id << ": " << edits.dump();
                EXPECT_TRUE(nodes.count("/dev/vfio/vfio")) << id << ": " << edits.dump();
                if (p == &nic) {
                    EXPECT_TRUE(nodes.count("/dev/iommu")) << id << ": " << edits.dump();
                    EXPECT_TRUE(nodes.count("/dev/vfio/devices/vfio3")) << id << ": "
                                                                        << edits.dump();
                } else {
                    EXPECT_FALSE(nodes.count("/dev/vfio/devices/vfio3")) << id;
                }
            }
        }

    // The metadata files at the container paths of DESIGN §10.
    std::string container = work + "/container";
    inject_mounts(gpu, container);
    inject_mounts(nic, container);
    const std::string base = container + kMetadataBase;
    for (const char* f : {"/resourceclaims/vm-a-gpu/gpu/vfio.vfiod.io-metadata.json",
                          "/resourceclaims/vm-a-gpu/audio/vfio.vfiod.io-metadata.json",
                          "/resourceclaimtemplates/hostdev/nic/vfio.vfiod.io-metadata.json"})
        EXPECT_TRUE(fs::exists(base + f)) << f << " is not mounted; the container has: "
                                          << joined(files_under(container));
    std::string err;
    EXPECT_EQ(kubevirt_device(base, "vm-a-gpu", "", "gpu", &err), "0000:01:00.0") << err;
    EXPECT_EQ(kubevirt_device(base, "vm-a-gpu", "", "audio", &err), "0000:01:00.1") << err;
    EXPECT_EQ(kubevirt_device(base, "", "hostdev", "nic", &err), "0000:05:00.0") << err;

    // The rest of the file's form (DESIGN §10), for the GPU's.
    std::ifstream in(base + "/resourceclaims/vm-a-gpu/gpu/vfio.vfiod.io-metadata.json");
    json md;
    ASSERT_NO_THROW(in >> md);
    EXPECT_EQ(md["kind"], "DeviceMetadata");
    EXPECT_EQ(md["metadata"]["name"], "vm-a-gpu");
    EXPECT_EQ(md["metadata"]["namespace"], "default");
    EXPECT_EQ(md["metadata"]["uid"], "uid-gpu");
    ASSERT_TRUE(md["requests"].is_array());
    for (const auto& req : md["requests"])
        if (req["name"] == "gpu") {
            ASSERT_EQ(req["devices"].size(), 1u);
            EXPECT_EQ(req["devices"][0]["driver"], kDriver);
            EXPECT_EQ(req["devices"][0]["pool"], kNode);
            EXPECT_EQ(req["devices"][0]["name"], "pci-0000-01-00-0");
            EXPECT_EQ(req["devices"][0]["attributes"]["iommuGroup"], (json{{"int", 13}}));
        }
}

// Scenario 4: a Prepare retried after the plugin was SIGKILLed (the kubelet never saw the first
// answer) answers the same CDI IDs from the checkpoint, and leaves the same spec.
TEST_F(DraScenarioTest, PrepareRetriedAfterSigkillAnswersTheSameIds) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    add_claim(claim_json("vm-c", "uid-c", {{"nic", "pci-0000-03-00-0"}}));
    Prepared first = prepare_one("vm-c", "uid-c");
    ASSERT_TRUE(first.called) << first.status;
    ASSERT_EQ(first.error, "");
    ASSERT_EQ(first.devices.size(), 1u);
    const auto cdi_before = files_under(root + kCdiDir);
    const auto state_before = files_under(root + kStateDir);

    EXPECT_EQ(plugin.stop(SIGKILL), 128 + SIGKILL);
    auto t0 = Clock::now();
    start_plugin();
    // The kubelet's plugin watcher sees the new registration socket and registers it again.
    ASSERT_TRUE(registered(15s));
    Prepared again = prepare_one("vm-c", "uid-c");
    ASSERT_TRUE(again.called) << again.status;
    std::printf("# SIGKILL, restart -> Prepare answered again: %ld ms\n", ms_since(t0));
    EXPECT_EQ(again.error, "");
    EXPECT_EQ(again.devices, first.devices);
    EXPECT_EQ(files_under(root + kCdiDir), cdi_before);
    EXPECT_EQ(files_under(root + kStateDir), state_before);
    // And once more, on the same process: idempotent.
    Prepared third = prepare_one("vm-c", "uid-c");
    EXPECT_EQ(third.error, "");
    EXPECT_EQ(third.devices, first.devices);
}

// Scenario 5: Unprepare removes exactly what Prepare wrote: the CDI spec, the metadata files and
// the checkpoint; a second Unprepare is a success with nothing to do. The group stays bound.
TEST_F(DraScenarioTest, UnprepareLeavesNothingBehind) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    add_claim(claim_json("vm-d", "uid-d", {{"gpu", "pci-0000-01-00-0"},
                                           {"audio", "pci-0000-01-00-1"}}));
    const auto cdi_before = files_under(root + kCdiDir);
    const auto state_before = files_under(root + kStateDir);

    Prepared p = prepare_one("vm-d", "uid-d");
    ASSERT_TRUE(p.called) << p.status;
    ASSERT_EQ(p.error, "");
    const auto cdi_prepared = files_under(root + kCdiDir);
    const auto state_prepared = files_under(root + kStateDir);
    EXPECT_NE(cdi_prepared, cdi_before) << "Prepare wrote no CDI spec: the test tests nothing";
    EXPECT_NE(state_prepared, state_before) << "Prepare wrote no checkpoint or metadata";
    std::printf("# Prepare wrote: cdi [%s], state [%s]\n", joined(cdi_prepared).c_str(),
                joined(state_prepared).c_str());

    EXPECT_EQ(unprepare("vm-d", "uid-d"), "");
    EXPECT_EQ(files_under(root + kCdiDir), cdi_before);
    EXPECT_EQ(files_under(root + kStateDir), state_before);
    EXPECT_EQ(unprepare("vm-d", "uid-d"), "") << "a second Unprepare";
    // Nothing names the claim any more, anywhere the plugin writes.
    for (const char* dir : {kCdiDir, kStateDir})
        for (const auto& f : files_under(root + dir))
            EXPECT_EQ(slurp(root + dir + "/" + f).find("uid-d"), std::string::npos) << f;
    // Binding is vfiod's business: the group is still published.
    EXPECT_TRUE(publishes(kBound, 1s));
    // A new Prepare works from scratch.
    Prepared again = prepare_one("vm-d", "uid-d");
    EXPECT_EQ(again.error, "");
    EXPECT_EQ(again.devices, p.devices);
}

// Scenario 6: two claims, each allocated one function of group 13: the second Prepare is
// refused, naming both claims; once the first is unprepared the second goes through.
TEST_F(DraScenarioTest, ASplitGroupIsRefusedNamingBothClaims) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    add_claim(claim_json("split-a", "uid-split-a", {{"gpu", "pci-0000-01-00-0"}}));
    add_claim(claim_json("split-b", "uid-split-b", {{"audio", "pci-0000-01-00-1"}}));
    const auto cdi_before = files_under(root + kCdiDir);

    Prepared a = prepare_one("split-a", "uid-split-a");
    ASSERT_TRUE(a.called) << a.status;
    ASSERT_EQ(a.error, "");
    const auto cdi_a = files_under(root + kCdiDir);

    Prepared b = prepare_one("split-b", "uid-split-b");
    ASSERT_TRUE(b.called) << b.status;
    EXPECT_NE(b.error, "") << "a split group was prepared";
    EXPECT_NE(b.error.find("split-a"), std::string::npos) << b.error;
    EXPECT_NE(b.error.find("split-b"), std::string::npos) << b.error;
    EXPECT_TRUE(b.devices.empty());
    std::printf("# split group refused: %s\n", b.error.c_str());
    EXPECT_EQ(files_under(root + kCdiDir), cdi_a) << "the refused claim left files behind";

    ASSERT_EQ(unprepare("split-a", "uid-split-a"), "");
    EXPECT_EQ(files_under(root + kCdiDir), cdi_before);
    Prepared b2 = prepare_one("split-b", "uid-split-b");
    EXPECT_EQ(b2.error, "") << "refused although its group-mate's claim is gone";
    // And now the first one is the split.
    Prepared a2 = prepare_one("split-a", "uid-split-a");
    EXPECT_NE(a2.error.find("split-b"), std::string::npos) << a2.error;
}

// Beyond the scenarios, end to end: what Prepare must refuse, each refusal naming the claim,
// none leaving a file behind: a device vfiod released between scheduling and Prepare, a claim
// the API server does not have, one whose UID is another's (deleted and made again), one
// allocated on another node's pool. The next claim is prepared as if nothing happened.
TEST_F(DraScenarioTest, PrepareRefusesWhatItCannotServe) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    const auto cdi_before = files_under(root + kCdiDir);
    const auto state_before = files_under(root + kStateDir);

    add_claim(claim_json("vm-late", "uid-late", {{"nic", "pci-0000-03-00-0"}}));
    auto r = client::call_group_method("Release", "0000:03:00.0");
    ASSERT_TRUE(r.ok()) << r.message;
    std::set<std::string> without = kBound;
    without.erase("pci-0000-03-00-0");
    ASSERT_TRUE(publishes(without, kServedLimit));
    Prepared late = prepare_one("vm-late", "uid-late");
    ASSERT_TRUE(late.called) << late.status;
    EXPECT_NE(late.error.find("vm-late"), std::string::npos) << late.error;
    EXPECT_TRUE(late.error.find("pci-0000-03-00-0") != std::string::npos ||
                late.error.find("0000:03:00.0") != std::string::npos)
        << late.error;

    Prepared missing = prepare_one("vm-nowhere", "uid-nowhere");
    EXPECT_NE(missing.error.find("vm-nowhere"), std::string::npos) << missing.error;

    add_claim(claim_json("vm-again", "uid-new", {{"gpu", "pci-0000-01-00-0"}}));
    Prepared stale = prepare_one("vm-again", "uid-old");
    EXPECT_NE(stale.error.find("vm-again"), std::string::npos) << stale.error;
    EXPECT_TRUE(stale.devices.empty());

    json elsewhere = claim_json("vm-elsewhere", "uid-elsewhere", {{"gpu", "pci-0000-01-00-0"}});
    elsewhere["status"]["allocation"]["devices"]["results"][0]["pool"] = "node-2";
    add_claim(elsewhere);
    Prepared other = prepare_one("vm-elsewhere", "uid-elsewhere");
    EXPECT_NE(other.error, "") << "a claim of another node's pool was prepared here";
    EXPECT_TRUE(other.devices.empty());
    std::printf("# refused: %s | %s | %s | %s\n", late.error.c_str(), missing.error.c_str(),
                stale.error.c_str(), other.error.c_str());
    EXPECT_EQ(files_under(root + kCdiDir), cdi_before);
    EXPECT_EQ(files_under(root + kStateDir), state_before);

    Prepared fine = prepare_one("vm-again", "uid-new");
    EXPECT_EQ(fine.error, "");
    EXPECT_EQ(fine.devices.size(), 1u);
}

// Issue 37: the kubelet gives up on a Prepare at its deadline and calls again. Work for a call
// nobody waits for any more must stop, or the plugin's 8 workers serve the dead calls while the
// live ones time out. Every claim GET takes 1.5 s (under the plugin's 10 s request bound); eight
// calls of 20 claims, each with a 2 s deadline, then one fresh call.
TEST_F(DraScenarioTest, CallsTheKubeletGaveUpOnDoNotStarveFreshOnes) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    add_claim(claim_json("vm-fresh", "uid-fresh", {{"gpu", "pci-0000-01-00-0"}}));
    const std::string claims_path = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/";
    ASSERT_TRUE(api.control("POST", "/_fake/faults",
                            json{{"method", "GET"}, {"path_prefix", claims_path},
                                 {"action", "delay"}, {"delay_ms", 1500}, {"count", -1}}
                                .dump())
                    .ok());
    std::atomic<int> expired{0};
    std::vector<std::thread> calls;
    for (int c = 0; c < 8; ++c)
        calls.emplace_back([&, c] {
            std::vector<DraClaim> claims;
            for (int i = 0; i < 20; ++i) {
                const std::string n = std::to_string(c) + "-" + std::to_string(i);
                claims.push_back({"uid-dead-" + n, "default", "dead-" + n});
            }
            FakeDraKubelet impatient(2s);
            DraCallResult r = impatient.prepare(kubelet.dra_socket(), claims);
            // The plugin's answer may just beat the kubelet's own timer: then it says why the
            // claims left were not prepared.
            bool cut_short = r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
            for (const auto& [uid, claim] : r.claims)
                cut_short = cut_short || claim.error.find("past its deadline") != std::string::npos;
            if (cut_short)
                ++expired;
        });
    for (auto& t : calls)
        t.join();
    EXPECT_EQ(expired.load(), 8) << "the slow API server did not make the calls time out";

    auto t0 = Clock::now();
    FakeDraKubelet patient(10s);
    DraCallResult fresh = patient.prepare(kubelet.dra_socket(), {{"uid-fresh", "default", "vm-fresh"}});
    EXPECT_TRUE(fresh.status.ok()) << "a fresh Prepare after the dead calls: "
                                   << fresh.status.error_message();
    EXPECT_TRUE(fresh.all_ok({{"uid-fresh", "default", "vm-fresh"}}));
    std::printf("# fresh Prepare behind 8 abandoned calls: %ld ms\n", ms_since(t0));

    // Each dead call read its first claim, and its second for what was left of the 2 s; none
    // read a claim after its caller had gone (the fresh call's 1.5 s GET let them all finish).
    auto r = api.control("GET", "/_fake/requests");
    ASSERT_TRUE(r.ok()) << r.describe();
    size_t dead_gets = 0;
    for (const auto& q : json::parse(r.body))
        dead_gets += q.value("method", "") == "GET" &&
                     q.value("path", "").rfind(claims_path + "dead-", 0) == 0;
    std::printf("# claim GETs for the 8 abandoned calls: %zu\n", dead_gets);
    EXPECT_LE(dead_gets, 16u);
    EXPECT_GE(dead_gets, 8u);
}

// Issue 37: a claim is cut off at 4 MiB as it streams in, not after 64 MiB of it were read: an
// API server that streams a claim for ever gets about 4 MiB (and the socket buffers) through.
TEST_F(DraScenarioTest, AHugeClaimIsCutOffWhileItStreams) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(registered(kStartLimit));
    ASSERT_TRUE(api.control("POST", "/_fake/faults",
                            json{{"method", "GET"},
                                 {"path_prefix",
                                  "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/vm-huge"},
                                 {"action", "huge"}}
                                .dump())
                    .ok());
    Prepared huge = prepare_one("vm-huge", "uid-huge");
    ASSERT_TRUE(huge.called) << huge.status;
    EXPECT_NE(huge.error.find("vm-huge"), std::string::npos) << huge.error;
    EXPECT_NE(huge.error.find("over 4194304 bytes"), std::string::npos) << huge.error;
    json state;
    EXPECT_TRUE(eventually([&] {
        auto r = api.control("GET", "/_fake/state");
        state = json::parse(r.body, nullptr, false);
        return r.ok() && state.value("huge_streaming", 1) == 0;
    }, 30s));
    const size_t sent = state.value("huge_sent", size_t{0});
    std::printf("# a claim streamed for ever: %zu bytes sent before the plugin stopped reading\n",
                sent);
    EXPECT_LT(sent, 24u << 20);
}

// Scenario 7: a restarted kubelet asks GetInfo again on the existing registration socket and
// deletes the node's slices; they are back within the limit, and the plugin still serves.
TEST_F(DraScenarioTest, SlicesAreBackAfterAKubeletRestart) {
    start_fake_vfiod();
    start_plugin();
    ASSERT_TRUE(publishes(kBound, kStartLimit));
    ASSERT_TRUE(registered());
    auto t0 = Clock::now();
    // The restarted kubelet's plugin watcher finds the existing socket and asks again.
    ASSERT_TRUE(registered(kServedLimit));
    std::printf("# kubelet restart -> GetInfo answered again: %ld ms\n", ms_since(t0));
    EXPECT_EQ(registrations, 2u);
    // ... and, starting, deletes the node's slices.
    const size_t writes = api.writes().size();
    t0 = Clock::now();
    auto r = api.control("DELETE", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" +
                                       dra::query_escape(std::string("spec.nodeName=") + kNode),
                         "");
    ASSERT_TRUE(r.ok()) << r.describe();
    json deleted = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(deleted.is_object() && deleted.contains("items")) << r.body;
    EXPECT_EQ(deleted["items"].size(), 1u) << "the delete took no slice: the test tests nothing";
    EXPECT_TRUE(publishes(kBound, kServedLimit)) << "published: " << joined(published_names());
    std::printf("# slices deleted by the kubelet -> back: %ld ms\n", ms_since(t0));
    // Back because the plugin wrote them again, not because the delete missed them. The fake
    // logs a write just before answering it, a moment after the slice is in its store: waited for.
    size_t creates = 0;
    eventually([&] {
        auto all = api.writes();
        creates = 0;
        for (size_t i = writes; i < all.size(); ++i)
            creates += all[i].value("method", "") == "POST" &&
                       all[i].value("path", "").rfind("/apis/resource.k8s.io/v1/resourceslices", 0) == 0;
        return creates >= 1;
    }, kServedLimit);
    EXPECT_GE(creates, 1u) << "no slice was created after the delete";
    auto ss = slices();
    ASSERT_TRUE(ss);
    ASSERT_EQ(ss->size(), 1u);
    EXPECT_EQ((*ss)[0]["spec"]["pool"]["resourceSliceCount"], 1);

    // A registration socket someone removed is served again, and registers.
    fs::remove(root + kRegistrarDir + "/" + kDriver + "-reg.sock");
    t0 = Clock::now();
    EXPECT_TRUE(registered(kServedLimit));
    std::printf("# registration socket removed -> registered again: %ld ms\n", ms_since(t0));

    add_claim(claim_json("vm-e", "uid-e", {{"nic", "pci-0000-05-00-0"}}));
    Prepared p = prepare_one("vm-e", "uid-e");
    EXPECT_TRUE(p.called) << p.status;
    EXPECT_EQ(p.error, "");
}

// Scenario 9 (issue 41, DESIGN §10, §12): vfiod's mdevs on the fake kernel (a T4 of nvidia-222,
// the mbochs sample) are devices of the pool beside the functions, with their attributes; a
// claim on the T4's vGPU is prepared with its own group's nodes and a metadata file from which
// KubeVirt's reading takes its UUID; lowering the [[mdev]] count (Reload) withdraws the mdev
// vfiod removes, and a claim on it is refused.
TEST_F(DraScenarioTest, MdevsArePreparedForKubeVirtAndWithdrawnOnReload) {
    auto mdev_config = [](unsigned small) {
        return std::string(kK8sHostConfig) + "[[mdev]]\nparent = \"mbochs\"\n" +
               "type = \"mbochs-small\"\ncount = " + std::to_string(small) + "\n" +
               "[[mdev]]\nparent = \"" + kMdevPciParent + "\"\ntype = \"nvidia-222\"\n" +
               "count = 1\nresource_name = \"nvidia.com/GRID_T4-1Q\"\n";
    };
    spit(config, mdev_config(2));
    root = env.start_fake_vfiod(&vfiod, "k8s-mdev-host", config);
    ASSERT_FALSE(root.empty()) << "vfiod did not get ready";
    const std::string t4 = mdev_uuid(kMdevPciParent, "nvidia-222", 0);
    const std::string small0 = mdev_uuid("mbochs", "mbochs-small", 0);
    const std::string small1 = mdev_uuid("mbochs", "mbochs-small", 1);
    std::set<std::string> want = kBound;
    for (const auto& u : {t4, small0, small1})
        want.insert("mdev-" + u);
    start_plugin();
    ASSERT_TRUE(publishes(want, kStartLimit)) << "published: " << joined(published_names());

    auto devices = published();
    const json gpu = devices["mdev-" + t4].value("attributes", json::object());
    ASSERT_TRUE(gpu.contains("iommuGroup")) << gpu.dump();
    const int64_t group = gpu["iommuGroup"].value("int", int64_t{-1});
    EXPECT_TRUE(fs::exists(root + "/dev/vfio/" + std::to_string(group))) << group;
    EXPECT_EQ(gpu, (json{{kMdevUuid, {{"string", t4}}},
                         {"type", {{"string", "nvidia-222"}}},
                         {"typeName", {{"string", "GRID T4-1Q"}}},
                         {"resourceName", {{"string", "nvidia.com/GRID_T4-1Q"}}},
                         {"iommuGroup", {{"int", group}}},
                         {"numaNode", {{"int", 0}}},
                         {kPcieRoot, {{"string", "pci0000:00"}}}}))
        << gpu.dump();
    const json vga = devices["mdev-" + small0].value("attributes", json::object());
    EXPECT_EQ(vga[kMdevUuid], (json{{"string", small0}}));
    EXPECT_EQ(vga["resourceName"], (json{{"string", "vfiod.io/mbochs-small"}}));
    EXPECT_FALSE(vga.contains(kPcieRoot)) << "a virtual parent has no PCIe root";
    for (const auto& [name, d] : devices) {
        if (name.rfind("mdev-", 0) == 0) {
            EXPECT_FALSE(d["attributes"].contains(kPciBusId)) << name;
        }
    }

    ASSERT_TRUE(registered());
    add_claim(claim_json("vgpu", "uid-v", {{"gpu", "mdev-" + t4}}));
    Prepared p = prepare_one("vgpu", "uid-v");
    ASSERT_TRUE(p.called) << p.status;
    ASSERT_EQ(p.error, "");
    ASSERT_EQ(p.devices.size(), 1u);
    json edits = cdi_edits(p.devices[0].cdi_device_ids.at(0));
    std::vector<std::string> nodes;
    for (const auto& n : edits.value("deviceNodes", json::array()))
        nodes.push_back(n.value("path", ""));
    ASSERT_GE(nodes.size(), 2u);
    EXPECT_EQ(nodes[0], "/dev/vfio/vfio");
    EXPECT_EQ(nodes[1], "/dev/vfio/" + std::to_string(group));
    const std::string container = work + "/container";
    inject_mounts(p, container);
    std::string err;
    EXPECT_EQ(kubevirt_device(container + kMetadataBase, "vgpu", "", "gpu", &err), t4) << err;

    // One mbochs mdev fewer: vfiod removes index 1, and the plugin withdraws it.
    spit(config, mdev_config(1));
    auto t0 = Clock::now();
    ASSERT_EQ(vfiod.signal(SIGHUP), 0);
    want.erase("mdev-" + small1);
    EXPECT_TRUE(publishes(want, 5s)) << "published: " << joined(published_names());
    std::printf("# [[mdev]] count lowered (Reload) -> the mdev withdrawn: %ld ms\n", ms_since(t0));
    add_claim(claim_json("gone", "uid-g", {{"gpu", "mdev-" + small1}}));
    p = prepare_one("gone", "uid-g");
    EXPECT_TRUE(p.called) << p.status;
    EXPECT_NE(p.error.find("withdrawn"), std::string::npos) << p.error;
    EXPECT_EQ(unprepare("vgpu", "uid-v"), "");
    EXPECT_TRUE(files_under(root + kCdiDir).empty()) << joined(files_under(root + kCdiDir));
}

// Scenario 8: 4,080 functions (16 PFs' worth of VFs, each its own group) give 64 slices of at
// most 64 devices (DESIGN §10), each with resourceSliceCount 64 and the pool's one generation. vfiod here is
// the stand-in of tests/support/fake_vfiod_peer.hpp: binding 4,080 groups on the fake kernel
// takes minutes, and what is tested is the pool's shape. Its functions publish no NUMA node, so
// no device has a numaNode attribute.
TEST_F(DraScenarioTest, FourThousandEightyFunctionsGiveSixtyFourSlices) {
    std::vector<FakeVfiodPeer::Function> fns;
    std::set<std::string> names;
    for (unsigned n = 0; n < 4080; ++n) {
        char addr[16], name[24];
        std::snprintf(addr, sizeof addr, "0000:%02x:%02x.%u", 0x10 + n / 64, (n / 8) % 8 * 4,
                      n % 8);
        std::snprintf(name, sizeof name, "pci-0000-%02x-%02x-%u", 0x10 + n / 64, (n / 8) % 8 * 4,
                      n % 8);
        fns.push_back({addr, 1000 + n, "intel.com/E810_VF", "bound"});
        names.insert(name);
    }
    ASSERT_EQ(names.size(), 4080u);
    start_peer(fns);
    auto t0 = Clock::now();
    start_plugin();
    ASSERT_TRUE(eventually([&] {
        auto ss = slices();
        return ss && ss->size() == 64;
    }, 60s)) << "slices: " << (slices() ? slices()->size() : 0);
    ASSERT_TRUE(publishes(names, 30s)) << published_names().size() << " published";
    std::printf("# 4,080 functions -> 64 slices published: %ld ms\n", ms_since(t0));

    auto ss = slices();
    ASSERT_TRUE(ss);
    ASSERT_EQ(ss->size(), 64u);
    std::set<int64_t> generations;
    std::set<std::string> slice_names;
    size_t total = 0;
    for (const auto& s : *ss) {
        const json& spec = s["spec"];
        EXPECT_EQ(spec["pool"]["name"], kNode);
        EXPECT_EQ(spec["pool"]["resourceSliceCount"], 64) << s["metadata"]["name"];
        generations.insert(spec["pool"].value("generation", -1));
        slice_names.insert(s["metadata"].value("name", ""));
        size_t n = spec.value("devices", json::array()).size();
        EXPECT_LE(n, 64u);
        EXPECT_GT(n, 0u);
        total += n;
        for (const auto& d : spec["devices"])
            EXPECT_FALSE(d.value("attributes", json::object()).contains("numaNode"))
                << d["name"];
    }
    EXPECT_EQ(total, 4080u) << "a device in two slices, or one missing";
    EXPECT_EQ(generations.size(), 1u) << "slices of one pool with different generations";
    EXPECT_EQ(slice_names.size(), 64u);

    // One group released: the pool shrinks to 4,079 devices in 64 slices, still consistent.
    const size_t writes = api.writes().size();
    t0 = Clock::now();
    peer.emit_state(1000, "released");
    names.erase("pci-0000-10-00-0");
    EXPECT_TRUE(publishes(names, 10s)) << published_names().size() << " published";
    std::printf("# one release among 4,080 -> pool settled without it: %ld ms, %zu slice writes\n",
                ms_since(t0), api.writes().size() - writes);
    ss = slices();
    ASSERT_TRUE(ss);
    generations.clear();
    for (const auto& s : *ss) {
        EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], static_cast<int>(ss->size()));
        generations.insert(s["spec"]["pool"].value("generation", -1));
    }
    EXPECT_EQ(generations.size(), 1u);
}

}  // namespace
// Health (DESIGN §13): the kubelet's stream (KEP-4680), picked from the registration, says each
// device's health; vfiod's failed Health of a group turns its functions UNHEALTHY and taints
// them in the slices (KEP-5055) within the limit, while they stay published (a running pod's
// claim still names them), and its ok turns both back. The other group's device is untouched.
TEST_F(DraScenarioTest, VfiodsHealthReachesTheHealthStreamAndTheSlices) {
    start_peer({{"0000:21:00.0", 21, "nvidia.com/GH100", "bound", "ok", ""},
                {"0000:21:00.1", 21, "", "bound", "ok", ""},
                {"0000:22:00.0", 22, "intel.com/I210", "bound", "ok", ""}});
    start_plugin();
    const std::set<std::string> all = {"pci-0000-21-00-0", "pci-0000-21-00-1",
                                       "pci-0000-22-00-0"};
    ASSERT_TRUE(publishes(all, kStartLimit)) << "published: " << joined(published_names());
    ASSERT_TRUE(registered());
    FakeHealthWatch watch(root + kPluginDir + "/dra.sock", vfiod::test::kHealthV1);
    auto health = [&](const char* name) { return watch.health(kNode, name); };
    ASSERT_TRUE(eventually([&] { return health("pci-0000-22-00-0") == FakeHealthWatch::Healthy; },
                           kServedLimit));
    EXPECT_EQ(health("pci-0000-21-00-0"), FakeHealthWatch::Healthy);

    auto t0 = Clock::now();
    peer.emit_health(21, "failed", "aer-fatal: recovery failed");
    ASSERT_TRUE(eventually([&] {
        return health("pci-0000-21-00-0") == FakeHealthWatch::Unhealthy &&
               health("pci-0000-21-00-1") == FakeHealthWatch::Unhealthy;
    }, kServedLimit));
    std::printf("# vfiod's failed Health -> UNHEALTHY in the kubelet's stream: %ld ms\n",
                ms_since(t0));
    std::string message;
    watch.health(kNode, "pci-0000-21-00-0", &message);
    EXPECT_EQ(message, "aer-fatal: recovery failed");
    EXPECT_EQ(health("pci-0000-22-00-0"), FakeHealthWatch::Healthy);
    // The slices: both functions stay published, tainted (KEP-5055); the other device is not.
    auto taints = [&](const char* name) {
        return published()[name].value("taints", json::array());
    };
    const json tainted = json::array({{{"key", "vfiod.io/unhealthy"},
                                       {"value", "aer-fatal"},
                                       {"effect", "NoSchedule"}}});
    auto sent = [](json t) {  // what the plugin wrote: the server's timeAdded aside
        for (auto& x : t)
            x.erase("timeAdded");
        return t;
    };
    EXPECT_TRUE(eventually([&] {
        return sent(taints("pci-0000-21-00-0")) == tainted &&
               sent(taints("pci-0000-21-00-1")) == tainted;
    }, kServedLimit)) << taints("pci-0000-21-00-0").dump();
    EXPECT_EQ(taints("pci-0000-22-00-0"), json::array());

    peer.emit_health(21, "ok", "");
    EXPECT_TRUE(eventually([&] {
        return health("pci-0000-21-00-0") == FakeHealthWatch::Healthy &&
               health("pci-0000-21-00-1") == FakeHealthWatch::Healthy;
    }, kServedLimit));
    EXPECT_TRUE(eventually([&] {
        return taints("pci-0000-21-00-0").empty() && taints("pci-0000-21-00-1").empty();
    }, kServedLimit));
}

}  // namespace vfiod::test
