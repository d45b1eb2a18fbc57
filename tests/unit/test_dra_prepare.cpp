// NodePrepareResources / NodeUnprepareResources behind the gRPC servers (dra-plugin/prepare):
// the claim's checks, the group rule, the CDI spec and the device-metadata file (read back as
// KubeVirt's pkg/dra reads it), the checkpoints across retries, restarts and a kill between
// writes, faults of the API server and of the disk, and a thousand claims at once.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api_objects.hpp"
#include "devices.hpp"
#include "dra_fixtures.hpp"
#include "io/host_fs.hpp"
#include "prepare.hpp"
#include "state_files.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace vfiod;
using namespace vfiod::dra;
using vfiod::test::dra_device;
using vfiod::test::dra_mdev;

namespace {

constexpr const char* kDriver = "vfio.vfiod.io";
constexpr const char* kNode = "node-1";

std::string read_text(const std::string& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

void write_text(const std::string& p, const std::string& text) {
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p) << text;
}

// Every path under dir (relative), for "nothing left behind" comparisons.
std::set<std::string> tree(const std::string& dir) {
    std::set<std::string> out;
    if (!fs::exists(dir))
        return out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        out.insert(fs::relative(e.path(), dir).string());
    return out;
}

// The API server: canned claims by path, faults, a count of GETs, and optionally a gate that
// holds every GET until `gate` of them are waiting at once (proof they do not serialize).
class FakeApi : public KubeApi {
public:
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, ApiResponse> answers;
    std::string fault;  // "hang": no answer within the timeout
    std::atomic<int> gets{0};
    std::chrono::milliseconds last_timeout{0};
    size_t last_max_body = 0;
    int gate = 0, waiting = 0, max_waiting = 0;

    void put(const json& claim) {
        std::lock_guard<std::mutex> l(mu);
        answers[path_of(claim["metadata"]["namespace"], claim["metadata"]["name"])] = {200, claim.dump(), ""};
    }
    static std::string path_of(const std::string& ns, const std::string& name) {
        return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name;
    }

    using KubeApi::request;
    ApiResponse request(const std::string& method, const std::string& path, const std::string&,
                        std::chrono::milliseconds timeout, size_t max_body) override {
        ++gets;
        std::unique_lock<std::mutex> l(mu);
        last_timeout = timeout;
        last_max_body = max_body;
        if (method != "GET")
            return {405, "", ""};
        if (fault == "hang") {
            cv.wait_for(l, timeout, [] { return false; });
            return {0, "", "Operation timed out after " + std::to_string(timeout.count()) + " ms"};
        }
        if (gate > 0) {
            max_waiting = std::max(max_waiting, ++waiting);
            cv.notify_all();
            cv.wait_for(l, std::chrono::seconds(120), [&] { return max_waiting >= gate; });
            --waiting;
        }
        auto it = answers.find(path);
        if (it == answers.end())
            return {404, R"({"kind":"Status","message":"resourceclaims \"x\" not found"})", ""};
        return it->second;
    }
    ApiResponse watch(const std::string&, const std::function<bool(const std::string&)>&,
                      const std::atomic<bool>&, std::chrono::milliseconds) override {
        return {0, "", "no watch here"};
    }
};

json result(const std::string& request, const std::string& device,
            const std::string& driver = kDriver, const std::string& pool = kNode) {
    return {{"request", request}, {"driver", driver}, {"pool", pool}, {"device", device}};
}

json make_claim(const std::string& uid, const std::string& ns, const std::string& name,
                const json& results, const std::string& pod_claim = "") {
    json c = {{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata", {{"uid", uid}, {"namespace", ns}, {"name", name}, {"generation", 3},
                            {"resourceVersion", "77"}}},
              {"spec", {{"devices", {{"requests", json::array()}}}}}};
    if (!pod_claim.empty())
        c["metadata"]["annotations"] = {{"resource.kubernetes.io/pod-claim-name", pod_claim}};
    if (!results.is_null())
        c["status"] = {{"allocation", {{"devices", {{"results", results}}}}}};
    return c;
}

// An inventory by hand: the devices given, each group's functions for the device nodes.
std::shared_ptr<const DraInventory> inventory_of(std::vector<DraDevice> devices) {
    auto inv = std::make_shared<DraInventory>();
    std::sort(devices.begin(), devices.end(),
              [](const DraDevice& a, const DraDevice& b) { return a.name < b.name; });
    for (const auto& d : devices)
        if (!d.is_mdev())
            inv->snapshot.group_functions[d.group].push_back(d.address);
    inv->devices = std::move(devices);
    return inv;
}

class Prepare : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/test_dra_prepare.XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        root = tmpl;
        // Group 13: two functions; 01:00.0 has an iommufd node, the kernel has /dev/iommu.
        for (const char* f : {"dev/vfio/vfio", "dev/vfio/13", "dev/vfio/14", "dev/iommu",
                              "dev/vfio/devices/vfio0", "sys/bus/pci/devices/0000:01:00.0/vfio-dev/vfio0/dev"})
            write_text(root + "/" + f, "");
        host = std::make_unique<KernelHostFs>(root);
        inv = inventory_of({dra_device("0000:01:00.0", 13), dra_device("0000:01:00.1", 13),
                            dra_device("0000:02:00.0", 14)});
        prepare_testing::set_write_hook(nullptr);
    }
    void TearDown() override {
        prepare_testing::set_write_hook(nullptr);
        fs::permissions(root, fs::perms::owner_all, fs::perm_options::add);
        std::error_code ec;
        for (const auto& e : fs::recursive_directory_iterator(root, ec))
            fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(root);
    }

    Preparer::Options options() const {
        Preparer::Options o;
        o.driver = kDriver;
        o.node = kNode;
        o.cdi_dir = "/var/run/cdi";
        o.state_dir = "/var/lib/vfiod-dra-plugin";
        o.request_timeout = std::chrono::milliseconds(2000);
        return o;
    }
    std::unique_ptr<Preparer> make(Preparer::Options o) {
        auto p = std::make_unique<Preparer>(o, api, [this] {
            std::lock_guard<std::mutex> l(inv_mu);
            return inv;
        }, *host);
        std::string err;
        EXPECT_TRUE(p->load(&err)) << err;
        return p;
    }
    std::unique_ptr<Preparer> make() { return make(options()); }

    std::string cdi_file(const std::string& uid) const {
        return root + "/var/run/cdi/vfiod.io-vfio-" + uid + ".json";
    }
    std::string checkpoint(const std::string& uid) const {
        return root + "/var/lib/vfiod-dra-plugin/claims/" + uid + ".json";
    }

    std::string root;
    std::unique_ptr<KernelHostFs> host;
    std::mutex inv_mu;
    std::shared_ptr<const DraInventory> inv;
    FakeApi api;
};

// KubeVirt's pkg/dra reading, in C++: in the container's base directory, glob
// <resourceclaims|resourceclaimtemplates>/<claim>/<request>/*-metadata.json (exactly one), read
// it as a stream of JSON objects and take the first whose apiVersion it knows, find the request
// by name, require exactly one device, and return its unqualified mdevUUID string when it has
// one (virt-launcher asks for it first: an mdev), else its resource.kubernetes.io/pciBusID.
std::string kubevirt_device(const std::string& base, bool from_template,
                                const std::string& claim, const std::string& request) {
    const std::string dir = base + (from_template ? "/resourceclaimtemplates/" : "/resourceclaims/") +
                            claim + "/" + request;
    std::vector<std::string> matches;
    if (fs::is_directory(dir))
        for (const auto& e : fs::directory_iterator(dir)) {
            std::string n = e.path().filename();
            if (n.size() > 14 && n.compare(n.size() - 14, 14, "-metadata.json") == 0)
                matches.push_back(e.path());
        }
    if (matches.size() != 1)
        return "error: " + std::to_string(matches.size()) + " metadata files in " + dir;
    std::ifstream in(matches[0]);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A JSON stream: objects one after the other.
    size_t pos = 0;
    while (pos < all.size()) {
        while (pos < all.size() && std::isspace(static_cast<unsigned char>(all[pos])))
            ++pos;
        if (pos >= all.size())
            break;
        int depth = 0;
        bool in_str = false, esc = false;
        size_t start = pos;
        for (; pos < all.size(); ++pos) {
            char c = all[pos];
            if (in_str) {
                if (esc)
                    esc = false;
                else if (c == '\\')
                    esc = true;
                else if (c == '"')
                    in_str = false;
                continue;
            }
            if (c == '"')
                in_str = true;
            else if (c == '{')
                ++depth;
            else if (c == '}' && --depth == 0) {
                ++pos;
                break;
            }
        }
        json md = json::parse(all.substr(start, pos - start), nullptr, false);
        if (!md.is_object() || md.value("apiVersion", "") != "metadata.resource.k8s.io/v1alpha1")
            continue;
        for (const auto& r : md["requests"]) {
            if (r["name"] != request)
                continue;
            if (r["devices"].size() != 1)
                return "error: not exactly one device";
            const json& a = r["devices"][0]["attributes"];
            if (auto uuid = a.find("mdevUUID"); uuid != a.end() && uuid->contains("string"))
                return (*uuid)["string"];
            auto it = a.find("resource.kubernetes.io/pciBusID");
            if (it == a.end() || !it->contains("string"))
                return "error: no pciBusID";
            return (*it)["string"];
        }
        return "error: request not found";
    }
    return "error: no compatible metadata";
}

// What the container runtime does with the spec's mounts: each hostPath (under the root)
// appears at its containerPath, here under `container`.
void mount_like_runtime(const std::string& root, const json& spec, const std::string& container) {
    for (const auto& d : spec["devices"])
        for (const auto& m : d["containerEdits"]["mounts"]) {
            std::string to = container + m["containerPath"].get<std::string>();
            fs::create_directories(fs::path(to).parent_path());
            fs::copy_file(root + m["hostPath"].get<std::string>(), to,
                          fs::copy_options::overwrite_existing);
        }
}

TEST_F(Prepare, HappyPathWritesSpecMetadataAndCheckpoint) {
    api.put(make_claim("uid-a", "vms", "gpu-claim", json::array({result("nic", "pci-0000-01-00-0")})));
    auto p = make();
    PrepareResult r = p->prepare({"uid-a", "vms", "gpu-claim"});
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.devices.size(), 1u);
    EXPECT_EQ(r.devices[0].device, "pci-0000-01-00-0");
    EXPECT_EQ(r.devices[0].pool, kNode);
    EXPECT_EQ(r.devices[0].requests, std::vector<std::string>{"nic"});
    EXPECT_EQ(r.devices[0].cdi_ids, std::vector<std::string>{"vfiod.io/vfio=uid-a-pci-0000-01-00-0"});
    EXPECT_EQ(p->prepared(), std::vector<std::string>{"uid-a"});

    json spec = json::parse(read_text(cdi_file("uid-a")));
    EXPECT_EQ(spec["cdiVersion"], "0.5.0");
    EXPECT_EQ(spec["kind"], "vfiod.io/vfio");
    ASSERT_EQ(spec["devices"].size(), 1u);
    EXPECT_EQ(spec["devices"][0]["name"], "uid-a-pci-0000-01-00-0");
    std::vector<std::string> nodes;
    for (const auto& n : spec["devices"][0]["containerEdits"]["deviceNodes"]) {
        nodes.push_back(n["path"]);
        EXPECT_TRUE(fs::exists(root + n["path"].get<std::string>())) << n["path"];
    }
    EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/13", "/dev/iommu",
                                                "/dev/vfio/devices/vfio0"}));
    const json& mounts = spec["devices"][0]["containerEdits"]["mounts"];
    ASSERT_EQ(mounts.size(), 1u);
    EXPECT_EQ(mounts[0]["containerPath"],
              "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/gpu-claim/nic/"
              "vfio.vfiod.io-metadata.json");
    const std::string host_path = mounts[0]["hostPath"];
    ASSERT_EQ(host_path.rfind("/var/lib/vfiod-dra-plugin/", 0), 0u) << host_path;

    json md = json::parse(read_text(root + host_path));
    EXPECT_EQ(md["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
    EXPECT_EQ(md["kind"], "DeviceMetadata");
    EXPECT_EQ(md["metadata"], (json{{"name", "gpu-claim"}, {"namespace", "vms"}, {"uid", "uid-a"},
                                    {"generation", 3}}));
    EXPECT_FALSE(md.contains("podClaimName"));
    ASSERT_EQ(md["requests"].size(), 1u);
    EXPECT_EQ(md["requests"][0]["name"], "nic");
    const json& dev = md["requests"][0]["devices"][0];
    EXPECT_EQ(dev["driver"], kDriver);
    EXPECT_EQ(dev["pool"], kNode);
    EXPECT_EQ(dev["name"], "pci-0000-01-00-0");
    std::vector<std::string> omitted;
    EXPECT_EQ(dev["attributes"], device_attributes(inv->devices[0], &omitted));
    EXPECT_EQ(dev["attributes"]["resource.kubernetes.io/pciBusID"], (json{{"string", "0000:01:00.0"}}));

    const std::string container = root + "/container";
    mount_like_runtime(root, spec, container);
    EXPECT_EQ(kubevirt_device(container + "/var/run/kubernetes.io/dra-device-attributes",
                                  false, "gpu-claim", "nic"),
              "0000:01:00.0");

    json ck = json::parse(read_text(checkpoint("uid-a")));
    EXPECT_EQ(ck["state"], "prepared");
    EXPECT_EQ(ck["files"].size(), 2u);
}

TEST_F(Prepare, TemplateClaimMountsUnderPodClaimName) {
    api.put(make_claim("uid-t", "vms", "virt-launcher-x-gpu-abcde",
                       json::array({result("nic", "pci-0000-02-00-0")}), "gpu"));
    auto p = make();
    PrepareResult r = p->prepare({"uid-t", "vms", "virt-launcher-x-gpu-abcde"});
    ASSERT_EQ(r.error, "");
    json spec = json::parse(read_text(cdi_file("uid-t")));
    const json& m = spec["devices"][0]["containerEdits"]["mounts"][0];
    EXPECT_EQ(m["containerPath"], "/var/run/kubernetes.io/dra-device-attributes/"
                                  "resourceclaimtemplates/gpu/nic/vfio.vfiod.io-metadata.json");
    json md = json::parse(read_text(root + m["hostPath"].get<std::string>()));
    EXPECT_EQ(md["podClaimName"], "gpu");
    const std::string container = root + "/container";
    mount_like_runtime(root, spec, container);
    EXPECT_EQ(kubevirt_device(container + "/var/run/kubernetes.io/dra-device-attributes",
                                  true, "gpu", "nic"),
              "0000:02:00.0");
}

TEST_F(Prepare, RefusesUidMismatchUnallocatedOtherPoolAndReleasedDevice) {
    api.put(make_claim("uid-new", "vms", "c1", json::array({result("r", "pci-0000-01-00-0")})));
    api.put(make_claim("uid-2", "vms", "c2", json()));
    api.put(make_claim("uid-3", "vms", "c3", json::array({result("r", "pci-0000-01-00-0", kDriver, "node-9")})));
    api.put(make_claim("uid-4", "vms", "c4", json::array({result("r", "pci-0000-03-00-0")})));
    api.put(make_claim("uid-5", "vms", "c5", json::array({result("r", "gpu-0", "gpu.example.com", "x")})));
    auto p = make();
    auto before = tree(root + "/var");

    PrepareResult r = p->prepare({"uid-old", "vms", "c1"});
    EXPECT_NE(r.error.find("vms/c1 (uid-old)"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("uid-new"), std::string::npos) << r.error;
    r = p->prepare({"uid-2", "vms", "c2"});
    EXPECT_NE(r.error.find("not allocated"), std::string::npos) << r.error;
    r = p->prepare({"uid-3", "vms", "c3"});
    EXPECT_NE(r.error.find("allocated to node node-9's pool"), std::string::npos) << r.error;
    r = p->prepare({"uid-4", "vms", "c4"});
    EXPECT_NE(r.error.find("pci-0000-03-00-0 (0000:03:00.0) was released between scheduling and Prepare"),
              std::string::npos) << r.error;
    r = p->prepare({"uid-5", "vms", "c5"});
    EXPECT_NE(r.error.find("no device of it is allocated by driver vfio.vfiod.io"), std::string::npos)
        << r.error;
    r = p->prepare({"uid-6", "vms", "missing"});
    EXPECT_NE(r.error.find("HTTP 404"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("vms/missing"), std::string::npos) << r.error;
    EXPECT_TRUE(p->prepared().empty());
    EXPECT_EQ(tree(root + "/var"), before);
}

TEST_F(Prepare, OtherDriversResultsAreIgnored) {
    api.put(make_claim("uid-m", "vms", "mixed",
                       json::array({result("gpu", "gpu-0", "gpu.example.com", "elsewhere"),
                                    result("nic", "pci-0000-02-00-0")})));
    auto p = make();
    PrepareResult r = p->prepare({"uid-m", "vms", "mixed"});
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.devices.size(), 1u);
    EXPECT_EQ(r.devices[0].device, "pci-0000-02-00-0");
}

// A prioritized list's subrequest ("nic/fast"): the answer keeps it, the metadata file and its
// container path belong to the request the pod names ("nic").
TEST_F(Prepare, SubrequestsMountUnderTheirRequest) {
    api.put(make_claim("uid-s", "vms", "sub", json::array({result("nic/fast", "pci-0000-02-00-0")})));
    auto p = make();
    PrepareResult r = p->prepare({"uid-s", "vms", "sub"});
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.devices[0].requests, std::vector<std::string>{"nic/fast"});
    json spec = json::parse(read_text(cdi_file("uid-s")));
    const std::string container = root + "/container";
    mount_like_runtime(root, spec, container);
    EXPECT_EQ(kubevirt_device(container + "/var/run/kubernetes.io/dra-device-attributes",
                                  false, "sub", "nic"),
              "0000:02:00.0");
    // A claim the API names differently from the kubelet is refused.
    json other = make_claim("uid-w", "vms", "evil/../x", json::array({result("r", "pci-0000-01-00-0")}));
    api.answers[FakeApi::path_of("vms", "w")] = {200, other.dump(), ""};
    EXPECT_NE(p->prepare({"uid-w", "vms", "w"}).error.find("answered for vms/evil"), std::string::npos);
}

TEST_F(Prepare, GroupRuleNamesBothClaimsAndTheGroup) {
    api.put(make_claim("uid-a", "ns1", "first", json::array({result("r", "pci-0000-01-00-0")})));
    api.put(make_claim("uid-b", "ns2", "second", json::array({result("r", "pci-0000-01-00-1")})));
    auto p = make();
    ASSERT_EQ(p->prepare({"uid-a", "ns1", "first"}).error, "");
    PrepareResult r = p->prepare({"uid-b", "ns2", "second"});
    EXPECT_NE(r.error.find("ns1/first (uid-a)"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("ns2/second (uid-b)"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("IOMMU group 13"), std::string::npos) << r.error;
    EXPECT_FALSE(fs::exists(cdi_file("uid-b")));
    // Once the first claim is gone, the group is free (still bound: never released).
    EXPECT_EQ(p->unprepare({"uid-a", "ns1", "first"}), "");
    EXPECT_EQ(p->prepare({"uid-b", "ns2", "second"}).error, "");
}

TEST_F(Prepare, RetriedAndRestartedPrepareAnswerTheSameIds) {
    api.put(make_claim("uid-a", "vms", "c", json::array({result("r", "pci-0000-01-00-0"),
                                                         result("r", "pci-0000-01-00-1")})));
    auto p = make();
    PrepareResult first = p->prepare({"uid-a", "vms", "c"});
    ASSERT_EQ(first.error, "");
    ASSERT_EQ(first.devices.size(), 2u);
    PrepareResult again = p->prepare({"uid-a", "vms", "c"});
    EXPECT_EQ(again.error, "");
    EXPECT_EQ(again.devices, first.devices);
    EXPECT_EQ(api.gets.load(), 1);  // answered from the checkpoint

    p.reset();
    {
        std::lock_guard<std::mutex> l(inv_mu);
        inv = nullptr;  // a restart before vfiod's inventory is read: still answered
    }
    auto restarted = make();
    EXPECT_EQ(restarted->prepared(), std::vector<std::string>{"uid-a"});
    PrepareResult after = restarted->prepare({"uid-a", "vms", "c"});
    EXPECT_EQ(after.error, "");
    EXPECT_EQ(after.devices, first.devices);
    EXPECT_EQ(api.gets.load(), 1);
}

// A SIGKILL between the CDI spec and the final checkpoint, in a child process: the files and the
// intent are left; a new Preparer finishes with the same IDs, and Unprepare cleans everything.
TEST_F(Prepare, KilledAfterTheCdiWriteIsFinishedOrCleaned) {
    api.put(make_claim("uid-k", "vms", "c", json::array({result("r", "pci-0000-01-00-0")})));
    fs::create_directories(root + "/var/run/cdi");
    make();  // the state directories, as a first start makes them
    const auto before = tree(root + "/var");
    for (bool retry : {true, false}) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            Preparer p(options(), api, [this] { return inv; }, *host);
            std::string e;
            if (!p.load(&e))
                _exit(3);
            const std::string cdi = "/var/run/cdi/vfiod.io-vfio-uid-k.json";
            prepare_testing::set_write_hook([&](const std::string& path) {
                if (path == "/var/lib/vfiod-dra-plugin/claims/uid-k.json" && fs::exists(root + cdi))
                    kill(getpid(), SIGKILL);
                return 0;
            });
            p.prepare({"uid-k", "vms", "c"});
            _exit(4);  // not reached
        }
        int status = 0;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT_TRUE(WIFSIGNALED(status)) << status;
        ASSERT_TRUE(fs::exists(cdi_file("uid-k")));
        EXPECT_EQ(json::parse(read_text(checkpoint("uid-k")))["state"], "preparing");

        auto p = make();
        EXPECT_TRUE(p->prepared().empty());
        if (retry) {
            PrepareResult r = p->prepare({"uid-k", "vms", "c"});
            ASSERT_EQ(r.error, "");
            EXPECT_EQ(r.devices[0].cdi_ids, std::vector<std::string>{"vfiod.io/vfio=uid-k-pci-0000-01-00-0"});
            EXPECT_EQ(json::parse(read_text(checkpoint("uid-k")))["state"], "prepared");
        } else {
            // The intent still holds the group: another claim cannot take it meanwhile.
            api.put(make_claim("uid-o", "vms", "o", json::array({result("r", "pci-0000-01-00-1")})));
            EXPECT_NE(p->prepare({"uid-o", "vms", "o"}).error.find("vms/c (uid-k)"), std::string::npos);
        }
        EXPECT_EQ(p->unprepare({"uid-k", "vms", "c"}), "");
        EXPECT_EQ(tree(root + "/var"), before);
    }
}

// An mdev (DESIGN §12): its CDI device opens the container node, its own group's node and its
// iommufd node; the metadata file gives KubeVirt its UUID (mdevUUID first, never a pciBusID).
// The checkpoint keeps it across a restart; once vfiod withdraws an mdev, Prepare refuses it.
TEST_F(Prepare, AnMdevGetsItsOwnNodesAndKubeVirtReadsItsUuid) {
    const std::string uuid = "6d966230-f3a1-5551-97f3-4aec0da0213a";
    const std::string other = "0b1e1e5a-8f2c-5d7a-9b7e-2f1c3d4e5f60";
    const std::vector<std::string> files = {
        "dev/vfio/21", "dev/vfio/22", "dev/vfio/devices/vfio3",
        "sys/bus/mdev/devices/" + uuid + "/vfio-dev/vfio3/dev"};
    for (const auto& f : files)
        write_text(root + "/" + f, "");
    inv = inventory_of({dra_device("0000:01:00.0", 13), dra_mdev(uuid, 21), dra_mdev(other, 22)});
    const std::string dev = "mdev-" + uuid;
    api.put(make_claim("uid-m", "vms", "vgpu", json::array({result("gpu", dev)})));
    auto p = make();
    PrepareResult r = p->prepare({"uid-m", "vms", "vgpu"});
    ASSERT_EQ(r.error, "");
    ASSERT_EQ(r.devices.size(), 1u);
    EXPECT_EQ(r.devices[0].cdi_ids, std::vector<std::string>{"vfiod.io/vfio=uid-m-" + dev});

    json spec = json::parse(read_text(cdi_file("uid-m")));
    std::vector<std::string> nodes;
    for (const auto& n : spec["devices"][0]["containerEdits"]["deviceNodes"])
        nodes.push_back(n["path"]);
    EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/21", "/dev/iommu",
                                                "/dev/vfio/devices/vfio3"}));
    const std::string container = root + "/container";
    mount_like_runtime(root, spec, container);
    EXPECT_EQ(kubevirt_device(container + "/var/run/kubernetes.io/dra-device-attributes", false,
                              "vgpu", "gpu"),
              uuid);
    json cp = json::parse(read_text(checkpoint("uid-m")));
    EXPECT_EQ(cp["devices"][0]["address"], uuid);
    EXPECT_EQ(cp["devices"][0]["group"], 21);

    // Restarted after vfiod withdrew it: the prepared claim is still answered the same.
    p.reset();
    {
        std::lock_guard<std::mutex> l(inv_mu);
        inv = inventory_of({dra_device("0000:01:00.0", 13)});
    }
    p = make();
    EXPECT_EQ(p->prepared(), std::vector<std::string>{"uid-m"});
    EXPECT_EQ(p->prepare({"uid-m", "vms", "vgpu"}).devices, r.devices);
    // A new claim on a withdrawn mdev is refused, naming it; an mdev without iommufd node gets
    // just its group's.
    api.put(make_claim("uid-w", "vms", "w", json::array({result("gpu", "mdev-" + other)})));
    std::string err = p->prepare({"uid-w", "vms", "w"}).error;
    EXPECT_NE(err.find("mdev-" + other + " was withdrawn"), std::string::npos) << err;
    {
        std::lock_guard<std::mutex> l(inv_mu);
        inv = inventory_of({dra_mdev(uuid, 21), dra_mdev(other, 22)});
    }
    ASSERT_EQ(p->prepare({"uid-w", "vms", "w"}).error, "");
    nodes.clear();
    spec = json::parse(read_text(cdi_file("uid-w")));
    for (const auto& n : spec["devices"][0]["containerEdits"]["deviceNodes"])
        nodes.push_back(n["path"]);
    EXPECT_EQ(nodes, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/22"}));
    EXPECT_EQ(p->unprepare({"uid-m", "vms", "vgpu"}), "");
    EXPECT_EQ(p->unprepare({"uid-w", "vms", "w"}), "");
    EXPECT_FALSE(fs::exists(cdi_file("uid-m")));
    EXPECT_FALSE(fs::exists(checkpoint("uid-w")));
}

TEST_F(Prepare, UnprepareLeavesTheDirectoriesAsBefore) {
    fs::create_directories(root + "/var/run/cdi");
    write_text(root + "/var/run/cdi/other-vendor.json", "{}");
    api.put(make_claim("uid-a", "vms", "c", json::array({result("a", "pci-0000-01-00-0"),
                                                         result("b", "pci-0000-02-00-0")})));
    auto p = make();
    const auto before = tree(root + "/var");
    ASSERT_EQ(p->prepare({"uid-a", "vms", "c"}).error, "");
    EXPECT_NE(tree(root + "/var"), before);
    EXPECT_EQ(p->unprepare({"uid-a", "vms", "c"}), "");
    EXPECT_EQ(tree(root + "/var"), before);
    EXPECT_TRUE(p->prepared().empty());
    // Idempotent, and unknown claims are no error.
    EXPECT_EQ(p->unprepare({"uid-a", "vms", "c"}), "");
    EXPECT_EQ(p->unprepare({"uid-never", "vms", "x"}), "");
    // The groups stay as vfiod bound them: nothing under dev/ or sys/ was touched.
    EXPECT_TRUE(fs::exists(root + "/dev/vfio/13"));
}

TEST_F(Prepare, CdiDirMissingIsCreatedUnwritableIsAClearError) {
    api.put(make_claim("uid-a", "vms", "c", json::array({result("r", "pci-0000-01-00-0")})));
    auto p = make();
    ASSERT_FALSE(fs::exists(root + "/var/run/cdi"));
    // A regular file where the directory should be: fails as root too.
    write_text(root + "/var/run/cdi", "not a directory");
    const auto before = tree(root + "/var");
    PrepareResult r = p->prepare({"uid-a", "vms", "c"});
    EXPECT_NE(r.error.find(root + "/var/run/cdi"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("errno"), std::string::npos) << r.error;
    EXPECT_TRUE(p->prepared().empty());
    EXPECT_EQ(tree(root + "/var"), before);

    fs::remove(root + "/var/run/cdi");
    if (geteuid() != 0) {
        fs::create_directories(root + "/var/run/cdi");
        fs::permissions(root + "/var/run/cdi", fs::perms(0555));
        r = p->prepare({"uid-a", "vms", "c"});
        EXPECT_NE(r.error.find("Permission denied"), std::string::npos) << r.error;
        EXPECT_NE(r.error.find(root + "/var/run/cdi/"), std::string::npos) << r.error;
        EXPECT_TRUE(p->prepared().empty());
        EXPECT_TRUE(tree(root + "/var/run/cdi").empty());
        fs::permissions(root + "/var/run/cdi", fs::perms(0755));
        fs::remove(root + "/var/run/cdi");
    }
    // Missing: made. And the group was given back by the failures.
    r = p->prepare({"uid-a", "vms", "c"});
    EXPECT_EQ(r.error, "");
    EXPECT_TRUE(fs::exists(cdi_file("uid-a")));
}

TEST_F(Prepare, FullDiskIsAClearErrorAndLeavesNothing) {
    api.put(make_claim("uid-a", "vms", "c", json::array({result("r", "pci-0000-01-00-0")})));
    auto p = make();
    const auto before = tree(root + "/var");
    for (const char* which : {"/var/run/cdi/", "/metadata/", "/claims/"}) {
        int calls = 0;
        prepare_testing::set_write_hook([&](const std::string& path) {
            // For the checkpoint: the final write fails, after every other file was written.
            if (path.find(which) == std::string::npos)
                return 0;
            return std::string(which) == "/claims/" && ++calls == 1 ? 0 : ENOSPC;
        });
        PrepareResult r = p->prepare({"uid-a", "vms", "c"});
        EXPECT_NE(r.error.find("No space left on device"), std::string::npos) << which << r.error;
        EXPECT_NE(r.error.find(root + "/var/"), std::string::npos) << r.error;
        EXPECT_TRUE(p->prepared().empty());
        auto now = tree(root + "/var");
        // Directories Prepare made may stay; no file of the claim does.
        for (const auto& f : now)
            EXPECT_FALSE(fs::is_regular_file(root + "/var/" + f)) << which << ": " << f;
        for (const auto& f : before)
            EXPECT_TRUE(now.count(f)) << f;
    }
    prepare_testing::set_write_hook(nullptr);
    EXPECT_EQ(p->prepare({"uid-a", "vms", "c"}).error, "");
}

TEST_F(Prepare, ApiFaultsAreClearErrors) {
    auto p = make();
    api.answers[FakeApi::path_of("vms", "c")] = {500, R"({"kind":"Status","message":"etcd is sad"})", ""};
    PrepareResult r = p->prepare({"uid-a", "vms", "c"});
    EXPECT_NE(r.error.find("vms/c (uid-a)"), std::string::npos) << r.error;
    EXPECT_NE(r.error.find("HTTP 500: etcd is sad"), std::string::npos) << r.error;

    for (const char* garbage : {"{not json", "[]", R"({"metadata":{"uid":7}})", ""}) {
        api.answers[FakeApi::path_of("vms", "c")] = {200, garbage, ""};
        r = p->prepare({"uid-a", "vms", "c"});
        EXPECT_NE(r.error.find("the API server's answer"), std::string::npos) << garbage << r.error;
    }
    api.answers[FakeApi::path_of("vms", "c")] = {200, std::string(100000, '[') , ""};
    r = p->prepare({"uid-a", "vms", "c"});
    EXPECT_NE(r.error.find("nests deeper"), std::string::npos) << r.error;

    api.fault = "hang";
    auto o = options();
    o.request_timeout = std::chrono::milliseconds(100);
    auto quick = make(o);
    r = quick->prepare({"uid-a", "vms", "c"});
    EXPECT_NE(r.error.find("timed out"), std::string::npos) << r.error;
    EXPECT_TRUE(p->prepared().empty());
}

// Issue 37: a kubelet call that is over starts no API request, and a request gets at most the
// time the call has left, so no work outlives the caller.
TEST_F(Prepare, TheKubeletsCallBoundsTheClaimsRead) {
    auto p = make();  // request_timeout 2 s
    api.put(make_claim("uid-a", "vms", "c", json::array({result("gpu", "pci-0000-02-00-0")})));
    CallLimit soon;
    soon.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
    PrepareResult r = p->prepare({"uid-a", "vms", "c"}, soon);
    EXPECT_EQ(r.error, "");
    EXPECT_EQ(api.gets.load(), 1);
    EXPECT_EQ(api.last_max_body, 4u << 20) << "a claim is cut off at 4 MiB as it streams in";
    EXPECT_LE(api.last_timeout.count(), 700);
    EXPECT_GT(api.last_timeout.count(), 0);

    CallLimit roomy;  // no deadline: the plugin's own bound
    EXPECT_EQ(p->unprepare({"uid-a", "vms", "c"}, roomy), "");
    EXPECT_EQ(p->prepare({"uid-a", "vms", "c"}, roomy).error, "");
    EXPECT_EQ(api.last_timeout, std::chrono::milliseconds(2000));
    EXPECT_EQ(p->unprepare({"uid-a", "vms", "c"}), "");

    CallLimit past;
    past.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
    CallLimit cancelled;
    cancelled.cancelled = [] { return true; };
    for (const auto& [limit, why] : {std::pair{past, "past its deadline"},
                                     std::pair{cancelled, "cancelled"}}) {
        const int gets = api.gets.load();
        r = p->prepare({"uid-a", "vms", "c"}, limit);
        EXPECT_EQ(api.gets.load(), gets) << why;
        EXPECT_NE(r.error.find("vms/c (uid-a)"), std::string::npos) << r.error;
        EXPECT_NE(r.error.find(why), std::string::npos) << r.error;
    }
    EXPECT_TRUE(p->prepared().empty());
}

TEST(ParseClaim, StrictWhereItMattersLenientElsewhere) {
    Claim c;
    std::string err;
    json ok = make_claim("u", "n", "c", json::array({result("r", "d")}));
    ok["spec"]["unknown"] = {{"anything", json::array({1, 2, 3})}};
    ok["metadata"]["generation"] = "not a number";  // not relied on: 0
    ASSERT_TRUE(parse_claim(ok.dump(), &c, &err)) << err;
    EXPECT_EQ(c.generation, 0);
    EXPECT_TRUE(c.allocated);
    ASSERT_EQ(c.results.size(), 1u);
    EXPECT_EQ(c.results[0].device, "d");

    json bad = ok;
    bad["status"]["allocation"]["devices"]["results"][0]["device"] = 5;
    EXPECT_FALSE(parse_claim(bad.dump(), &c, &err));
    EXPECT_NE(err.find("results[0].device"), std::string::npos) << err;
    bad = ok;
    bad["status"]["allocation"]["devices"]["results"] = "x";
    EXPECT_FALSE(parse_claim(bad.dump(), &c, &err));
    bad = ok;
    bad["metadata"].erase("namespace");
    EXPECT_FALSE(parse_claim(bad.dump(), &c, &err));
    EXPECT_NE(err.find("metadata.namespace"), std::string::npos) << err;
    bad = ok;
    bad["metadata"]["annotations"] = {{"resource.kubernetes.io/pod-claim-name", "../../etc"}};
    EXPECT_FALSE(parse_claim(bad.dump(), &c, &err));
    json many = ok;
    for (int i = 0; i < 300; ++i)
        many["status"]["allocation"]["devices"]["results"].push_back(result("r", "d"));
    EXPECT_FALSE(parse_claim(many.dump(), &c, &err));
    json unallocated = make_claim("u", "n", "c", json());
    ASSERT_TRUE(parse_claim(unallocated.dump(), &c, &err)) << err;
    EXPECT_FALSE(c.allocated);
}

TEST_F(Prepare, DamagedCheckpointsAreSetAsideNeverTrusted) {
    const std::string dir = root + "/var/lib/vfiod-dra-plugin/claims/";
    write_text(dir + "uid-x.json", "{garbage");
    json evil = {{"version", 1}, {"state", "prepared"}, {"uid", "uid-y"}, {"namespace", "n"},
                 {"name", "c"}, {"devices", json::array()}, {"files", {"/etc/passwd"}}};
    write_text(dir + "uid-y.json", evil.dump());
    write_text(dir + ".uid-z.json.tmp", "half");
    auto p = make();
    EXPECT_TRUE(p->prepared().empty());
    EXPECT_TRUE(tree(dir).empty());
    EXPECT_EQ(tree(root + "/var/lib/vfiod-dra-plugin/damaged").size(), 2u);
    EXPECT_EQ(p->unprepare({"uid-y", "n", "c"}), "");
}

// Two calls for one claim: one GET and one set of writes; the other answers from the checkpoint.
TEST_F(Prepare, ConcurrentCallsForOneClaimWriteOnce) {
    api.put(make_claim("uid-a", "vms", "c", json::array({result("r", "pci-0000-01-00-0")})));
    auto p = make();
    std::atomic<int> writes{0};
    prepare_testing::set_write_hook([&](const std::string& path) {
        if (path.find("/var/run/cdi/") == 0)
            ++writes;
        return 0;
    });
    std::vector<std::thread> threads;
    std::vector<PrepareResult> results(8);
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&, i] { results[i] = p->prepare({"uid-a", "vms", "c"}); });
    for (auto& t : threads)
        t.join();
    for (const auto& r : results) {
        EXPECT_EQ(r.error, "");
        EXPECT_EQ(r.devices, results[0].devices);
    }
    EXPECT_EQ(writes.load(), 1);
    EXPECT_EQ(api.gets.load(), 1);
}

// A thousand claims at once, two per IOMMU group: every GET is in flight at the same time (no
// lock held over it), exactly one claim of each group is prepared, the other refused by name.
TEST_F(Prepare, ThousandConcurrentClaimsKeepTheGroupRule) {
    constexpr int kClaims = 1000;
    std::vector<DraDevice> devices;
    for (int i = 0; i < kClaims; ++i) {
        char addr[16];
        std::snprintf(addr, sizeof addr, "0000:%02x:00.%d", 0x10 + i / 8, i % 8);
        devices.push_back(dra_device(addr, 100 + static_cast<unsigned>(i / 2)));
        api.put(make_claim("uid-" + std::to_string(i), "ns", "c" + std::to_string(i),
                           json::array({result("r", devices.back().name)})));
    }
    inv = inventory_of(devices);
    api.gate = kClaims;
    auto p = make();
    std::vector<PrepareResult> results(kClaims);
    std::vector<std::thread> threads;
    threads.reserve(kClaims);
    for (int i = 0; i < kClaims; ++i)
        threads.emplace_back([&, i] {
            results[i] = p->prepare({"uid-" + std::to_string(i), "ns", "c" + std::to_string(i)});
        });
    for (auto& t : threads)
        t.join();
    EXPECT_EQ(api.max_waiting, kClaims);
    std::map<unsigned, int> winners;
    for (int i = 0; i < kClaims; ++i) {
        unsigned g = 100 + static_cast<unsigned>(i / 2);
        if (results[i].error.empty()) {
            ++winners[g];
            ASSERT_EQ(results[i].devices.size(), 1u);
            EXPECT_EQ(results[i].devices[0].cdi_ids[0],
                      "vfiod.io/vfio=uid-" + std::to_string(i) + "-" + devices[static_cast<size_t>(i)].name);
            EXPECT_TRUE(fs::exists(cdi_file("uid-" + std::to_string(i))));
        } else {
            EXPECT_NE(results[i].error.find("IOMMU group " + std::to_string(g)), std::string::npos)
                << results[i].error;
            int mate = i ^ 1;
            EXPECT_NE(results[i].error.find("ns/c" + std::to_string(mate) + " (uid-" +
                                            std::to_string(mate) + ")"),
                      std::string::npos)
                << results[i].error;
        }
    }
    EXPECT_EQ(winners.size(), static_cast<size_t>(kClaims / 2));
    for (const auto& [g, n] : winners)
        EXPECT_EQ(n, 1) << "group " << g;
    EXPECT_EQ(p->prepared().size(), static_cast<size_t>(kClaims / 2));
}

// --root is a fence: a link in the tree that leads out of it (absolute, or ".." past the root) is
// refused where Prepare, Unprepare and the start would write, rename or remove, never followed.
TEST_F(Prepare, LinksOutOfTheRootAreRefusedNeverFollowed) {
    char tmpl[] = "/tmp/test_dra_prepare_outside.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string outside = tmpl;
    struct Cleanup {
        std::string dir;
        ~Cleanup() { fs::remove_all(dir); }
    } cleanup{outside};
    api.put(make_claim("uid-a", "vms", "c", json::array({result("r", "pci-0000-01-00-0")})));

    // The state directory's checkpoints, linked out: the start fails and names the directory.
    fs::create_directories(root + "/var/lib/vfiod-dra-plugin");
    fs::create_directory_symlink(outside, root + "/var/lib/vfiod-dra-plugin/claims");
    {
        Preparer p(options(), api, [this] { return inv; }, *host);
        std::string err;
        EXPECT_FALSE(p.load(&err));
        EXPECT_NE(err.find(root + "/var/lib/vfiod-dra-plugin/claims"), std::string::npos) << err;
        EXPECT_NE(err.find("errno 18"), std::string::npos) << err;  // EXDEV
    }
    fs::remove(root + "/var/lib/vfiod-dra-plugin/claims");
    auto p = make();

    // The CDI directory, absolute and relative: Prepare fails and writes nothing there. It cannot
    // look behind the link either, so its intent stays for a retry or Unprepare to finish.
    fs::create_directories(root + "/var/run");
    for (const std::string& link : {outside, "../../../../../../../../.." + outside}) {
        fs::create_directory_symlink(link, root + "/var/run/cdi");
        PrepareResult r = p->prepare({"uid-a", "vms", "c"});
        EXPECT_NE(r.error.find("cannot create directory " + root + "/var/run/cdi: Invalid cross-device link"),
                  std::string::npos) << r.error;
        EXPECT_TRUE(p->prepared().empty());
        EXPECT_TRUE(tree(outside).empty()) << link;
        EXPECT_EQ(json::parse(read_text(checkpoint("uid-a")))["state"], "preparing");
        fs::remove(root + "/var/run/cdi");
    }

    // Prepared, then the directory swapped for a link to one holding a file of the same name:
    // Unprepare says it cannot remove the spec, and the file outside stays.
    ASSERT_EQ(p->prepare({"uid-a", "vms", "c"}).error, "");
    fs::rename(root + "/var/run/cdi", root + "/var/run/cdi.real");
    fs::create_directory_symlink(outside, root + "/var/run/cdi");
    write_text(outside + "/vfiod.io-vfio-uid-a.json", "not ours");
    std::string e = p->unprepare({"uid-a", "vms", "c"});
    EXPECT_NE(e.find("cannot remove " + root + "/var/run/cdi/vfiod.io-vfio-uid-a.json"),
              std::string::npos) << e;
    EXPECT_EQ(read_text(outside + "/vfiod.io-vfio-uid-a.json"), "not ours");
    // The link gone again, Unprepare finishes.
    fs::remove(root + "/var/run/cdi");
    fs::rename(root + "/var/run/cdi.real", root + "/var/run/cdi");
    EXPECT_EQ(p->unprepare({"uid-a", "vms", "c"}), "");
    EXPECT_FALSE(fs::exists(cdi_file("uid-a")));
}

}  // namespace
