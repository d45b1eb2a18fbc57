// vfiod-device-plugin end to end (DESIGN §9): a private dbus-daemon, vfiod on a synthetic host
// (enforce mode on the fake kernel, or the real vfiod in observe mode), the real plugin binary,
// and a fake kubelet speaking the device plugin protocol over real unix sockets.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sdbus-c++/sdbus-c++.h>

#include "core/mdev.hpp"
#include "dbus_client.hpp"
#include "fake_kubelet.hpp"
#include "fake_vfiod_peer.hpp"
#include "plugin_env.hpp"
#include "poll_sleep.hpp"
#include "scenarios.hpp"

namespace vfiod::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The README promises a change or a kubelet restart served within a second; that goal is judged
// in bench/ (vfiod-bench-plugin) and in the VM (bench/vm_latency.sh). A test on a loaded two-core
// CI machine fails only at three times the goal: a change missed, or one that waits for a poll, a
// backed-off retry or a blocked Register (its deadline is 5 s). The measured time is printed.
constexpr auto kServedLimit = 3s;

long ms_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

const char* const kGpu = "nvidia.com/GH100";
const char* const kNic = "intel.com/I210";
const char* const kNvme = "samsung.com/PM9A1";

std::vector<FakeVfiodPeer::Function> peer_functions(int resources, int per);  // below

class DevicePluginTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(env.start_bus());
        work = env.work;
        kubelet_dir = env.kubelet_dir;
        config = work + "/vfiod.toml";
        spit(config, kK8sHostConfig);
        kubelet = std::make_unique<FakeKubelet>(kubelet_dir, work + "/pod-resources.sock");
    }

    void TearDown() override {
        plugin.stop();
        peer.stop();
        kubelet.reset();
        vfiod.stop();
        env.bus.stop();
        if (HasFailure()) {
            std::cerr << "--- plugin log ---\n" << slurp(work + "/plugin.log");
            std::cerr << "--- vfiod log ---\n" << slurp(work + "/vfiod.log");
        } else {
            fs::remove_all(work);
        }
    }

    // vfiod (the test build on the fake kernel) in enforce mode; sets root.
    void start_fake_vfiod() {
        root = env.start_fake_vfiod(&vfiod, "k8s-host", config);
        ASSERT_FALSE(root.empty());
    }

    void start_plugin() {
        plugin = Proc({VFIOD_DEVICE_PLUGIN, "--kubelet-dir", kubelet_dir, "--pod-resources",
                       work + "/pod-resources.sock", "--root", root, "--verbose"},
                      work + "/plugin.log");
    }

    // Waits until every named resource has a stream with at least one list.
    bool listed(std::vector<std::string> resources, std::chrono::milliseconds t = 10s) {
        return kubelet->wait([&](const std::vector<FakeKubelet::Stream>& ss) {
            for (const auto& r : resources) {
                bool any = false;
                for (const auto& s : ss)
                    any = any || (s.resource == r && !s.lists.empty());
                if (!any)
                    return false;
            }
            return true;
        }, t);
    }

    // A fake vfiod (tests/support/fake_vfiod_peer.hpp) publishing `functions`, each group bound
    // with its /dev/vfio/N under a fresh root; sets root.
    void start_peer(std::vector<FakeVfiodPeer::Function> functions) {
        root = work + "/root";
        fs::create_directories(root + "/dev/vfio");
        for (const auto& f : functions)
            spit(root + "/dev/vfio/" + std::to_string(f.group), "");
        peer.set_inventory(std::move(functions));
        ASSERT_TRUE(peer.start());
    }

    // The fake vfiod with three one-function groups of example.com/r0: 100 without Health (an
    // older vfiod's), 101 with `health` and `reason`, 102 ok.
    void start_health_peer(const char* health, const char* reason) {
        auto functions = peer_functions(1, 3);
        functions[1].health = health;
        functions[1].health_reason = reason;
        functions[2].health = "ok";
        start_peer(functions);
    }

    // The fake vfiod with 2,000 one-function groups (4,000 objects), read whole, as the plugin
    // reads it, on a connection of the test's own; a failure is the test's.
    std::unique_ptr<sdbus::IConnection> read_fleet(client::Inventory* inv);

    // The plugin's log from byte `from` on.
    std::string log_since(size_t from) { return slurp(work + "/plugin.log").substr(from); }
    size_t log_size() { return slurp(work + "/plugin.log").size(); }
    size_t log_count(const std::string& needle) {
        std::string log = slurp(work + "/plugin.log");
        size_t n = 0;
        for (auto at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1))
            ++n;
        return n;
    }

    std::string health(const std::string& resource, const std::string& id) {
        auto l = kubelet->latest(resource);
        auto it = l.health.find(id);
        return it == l.health.end() ? "absent" : it->second;
    }

    PluginEnv env;
    std::string work, kubelet_dir, config, root;
    Proc vfiod, plugin;
    std::unique_ptr<FakeKubelet> kubelet;
    FakeVfiodPeer peer;
};

// `per` functions of each of `resources` resources ("example.com/r0", ...), one IOMMU group each.
std::vector<FakeVfiodPeer::Function> peer_functions(int resources, int per) {
    std::vector<FakeVfiodPeer::Function> out;
    for (int r = 0; r < resources; ++r)
        for (int i = 0; i < per; ++i) {
            unsigned n = static_cast<unsigned>(r * per + i);
            char addr[24];  // room for any unsigned, so -Og sees no truncation
            std::snprintf(addr, sizeof addr, "0000:%02x:%02x.0", n / 32 + 1, n % 32);
            out.push_back({addr, 100 + n, "example.com/r" + std::to_string(r), "bound"});
        }
    return out;
}

// SIGTERM and how long the plugin took to exit; its exit status in *code.
long stop_timed(Proc& p, int* code) {
    auto t0 = Clock::now();
    *code = p.stop(SIGTERM);
    return ms_since(t0);
}

// SIGTERM exits 0 without waiting for vfiod: within kServedLimit (its goal, 1 s, is bench/'s).
void expect_prompt_exit(Proc& p, const char* what) {
    int code = -1;
    long took = stop_timed(p, &code);
    std::printf("# %s: SIGTERM -> exit: %ld ms\n", what, took);
    EXPECT_EQ(code, 0) << what;
    EXPECT_LT(took, std::chrono::duration_cast<std::chrono::milliseconds>(kServedLimit).count())
        << what;
}

TEST_F(DevicePluginTest, RegistersEachResourceAndListsHealthAndNuma) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic, kNvme}));
    auto regs = kubelet->registrations();
    ASSERT_EQ(regs.size(), 3u);
    std::map<std::string, std::string> endpoints;
    for (const auto& r : regs) {
        EXPECT_EQ(r.request.version(), "v1beta1");
        EXPECT_TRUE(r.request.options().get_preferred_allocation_available());
        EXPECT_FALSE(r.request.options().pre_start_required());
        endpoints[r.request.resource_name()] = r.request.endpoint();
    }
    EXPECT_EQ(endpoints[kGpu], "vfiod-nvidia_com_GH100.sock");
    EXPECT_EQ(endpoints[kNic], "vfiod-intel_com_I210.sock");
    EXPECT_EQ(endpoints[kNvme], "vfiod-samsung_com_PM9A1.sock");
    for (const auto& s : kubelet->streams()) {
        EXPECT_TRUE(s.options_ok);
        EXPECT_TRUE(s.preferred_available);
    }
    // Two functions of group 13 under one name: both listed, both usable.
    auto gpu = kubelet->latest(kGpu);
    EXPECT_EQ(gpu.health, (std::map<std::string, std::string>{
                              {"0000:01:00.0", "Healthy"}, {"0000:01:00.1", "Healthy"}}));
    auto nic = kubelet->latest(kNic);
    // 04:00.0 is enslaved to bond0: refused, so listed but Unhealthy.
    EXPECT_EQ(nic.health, (std::map<std::string, std::string>{{"0000:03:00.0", "Healthy"},
                                                              {"0000:04:00.0", "Unhealthy"},
                                                              {"0000:05:00.0", "Healthy"}}));
    EXPECT_EQ(nic.numa["0000:03:00.0"], std::vector<int64_t>{0});
    EXPECT_EQ(nic.numa["0000:05:00.0"], std::vector<int64_t>{1});
    EXPECT_EQ(health(kNvme, "0000:02:00.0"), "Unhealthy");
    EXPECT_FALSE(env.activated());
}

TEST_F(DevicePluginTest, AllocateAnswersExactPathsAndEnv) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    // An iommufd kernel: the function has a vfio-dev cdev and /dev/iommu exists.
    fs::create_directories(root + "/sys/bus/pci/devices/0000:05:00.0/vfio-dev/vfio3");
    fs::create_directories(root + "/dev/vfio/devices");
    spit(root + "/dev/vfio/devices/vfio3", "");
    spit(root + "/dev/iommu", "");
    // Linux 6.1: vfio-dev in sysfs, but no character device behind it.
    fs::create_directories(root + "/sys/bus/pci/devices/0000:03:00.0/vfio-dev/vfio4");
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic}));

    v1beta1::AllocateResponse r;
    ASSERT_TRUE(kubelet->allocate(kGpu, {{"0000:01:00.1", "0000:01:00.0"}}, &r).ok());
    ASSERT_EQ(r.container_responses_size(), 1);
    const auto& c = r.container_responses(0);
    std::vector<std::string> got;
    for (const auto& d : c.devices())
        got.push_back(d.container_path() + "|" + d.host_path() + "|" + d.permissions());
    EXPECT_EQ(got, (std::vector<std::string>{"/dev/vfio/vfio|/dev/vfio/vfio|mrw",
                                             "/dev/vfio/13|/dev/vfio/13|mrw"}));
    ASSERT_EQ(c.envs_size(), 1);
    EXPECT_EQ(c.envs().at("PCI_RESOURCE_NVIDIA_COM_GH100"), "0000:01:00.1,0000:01:00.0");

    v1beta1::AllocateResponse n;
    ASSERT_TRUE(kubelet->allocate(kNic, {{"0000:05:00.0"}, {"0000:03:00.0"}}, &n).ok());
    ASSERT_EQ(n.container_responses_size(), 2);
    got.clear();
    for (const auto& d : n.container_responses(0).devices())
        got.push_back(d.host_path());
    EXPECT_EQ(got, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/17", "/dev/iommu",
                                             "/dev/vfio/devices/vfio3"}));
    EXPECT_EQ(n.container_responses(0).envs().at("PCI_RESOURCE_INTEL_COM_I210"), "0000:05:00.0");
    EXPECT_EQ(n.container_responses(1).envs().at("PCI_RESOURCE_INTEL_COM_I210"), "0000:03:00.0");
    got.clear();
    for (const auto& d : n.container_responses(1).devices())
        got.push_back(d.host_path());
    EXPECT_EQ(got, (std::vector<std::string>{"/dev/vfio/vfio", "/dev/vfio/15"}));
}

TEST_F(DevicePluginTest, AllocateRefusesBadIdsAndSplitGroups) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic}));
    v1beta1::AllocateResponse r;
    auto s = kubelet->allocate(kNic, {{"0000:09:00.0"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("0000:09:00.0"), std::string::npos) << s.error_message();
    s = kubelet->allocate(kNic, {{"../../etc\n"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    s = kubelet->allocate(kNic, {{"0000:03:00.0", "0000:03:00.0"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("twice"), std::string::npos) << s.error_message();
    s = kubelet->allocate(kNic, {{"0000:04:00.0"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("0000:04:00.0"), std::string::npos) << s.error_message();
    // Two containers of one pod, one function of group 13 each.
    s = kubelet->allocate(kGpu, {{"0000:01:00.0"}, {"0000:01:00.1"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // The audio function is already held by another pod: the GPU alone would split group 13.
    kubelet->hold(kGpu, "0000:01:00.1", "default/vm-a", "compute");
    s = kubelet->allocate(kGpu, {{"0000:01:00.0"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(s.error_message().find("default/vm-a/compute"), std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find("0000:01:00.1"), std::string::npos);
    // A single-function group needs no PodResources answer at all.
    EXPECT_TRUE(kubelet->allocate(kNic, {{"0000:03:00.0"}}, &r).ok());

    std::vector<std::string> pref;
    ASSERT_TRUE(kubelet->preferred(kGpu, {"0000:01:00.0", "0000:01:00.1"}, {}, 2, &pref).ok());
    EXPECT_EQ(pref, (std::vector<std::string>{"0000:01:00.0", "0000:01:00.1"}));
    ASSERT_TRUE(kubelet->preferred(kNic, {"0000:03:00.0", "0000:05:00.0"}, {"0000:05:00.0"}, 2,
                                   &pref).ok());
    EXPECT_EQ(pref, (std::vector<std::string>{"0000:05:00.0", "0000:03:00.0"}));
}

TEST_F(DevicePluginTest, ReleaseTurnsUnhealthyAndBindHealthyPromptly) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kNic}));
    ASSERT_EQ(health(kNic, "0000:03:00.0"), "Healthy");
    auto t0 = Clock::now();
    ASSERT_TRUE(client::call_group_method("Release", "0000:03:00.0").ok());
    EXPECT_TRUE(eventually([&] { return health(kNic, "0000:03:00.0") == "Unhealthy"; }, 5s));
    std::printf("# Release -> listed Unhealthy: %ld ms\n", ms_since(t0));
    EXPECT_LT(Clock::now() - t0, kServedLimit);
    t0 = Clock::now();
    ASSERT_TRUE(client::call_group_method("Bind", "0000:03:00.0").ok());
    EXPECT_TRUE(eventually([&] { return health(kNic, "0000:03:00.0") == "Healthy"; }, 5s));
    std::printf("# Bind -> listed Healthy: %ld ms\n", ms_since(t0));
    EXPECT_LT(Clock::now() - t0, kServedLimit);
    // The other devices' lines did not move.
    EXPECT_EQ(health(kNic, "0000:05:00.0"), "Healthy");
}

TEST_F(DevicePluginTest, KubeletRestartRegistersAgainPromptly) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic, kNvme}));
    auto t0 = Clock::now();
    ASSERT_TRUE(kubelet->restart());
    ASSERT_TRUE(eventually([&] { return kubelet->registrations().size() >= 6; }, 5s));
    auto regs = kubelet->registrations();
    std::printf("# kubelet restart -> registered again: %ld ms\n",
                static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      regs.back().at - t0).count()));
    for (size_t i = 3; i < regs.size(); ++i)
        EXPECT_LT(regs[i].at - t0, kServedLimit) << regs[i].request.resource_name();
    EXPECT_TRUE(kubelet->wait([](const std::vector<FakeKubelet::Stream>& ss) {
        return ss.size() >= 6 && !ss[3].lists.empty() && !ss[4].lists.empty() &&
               !ss[5].lists.empty();
    }, 2s));
    EXPECT_EQ(health(kGpu, "0000:01:00.0"), "Healthy");
}

TEST_F(DevicePluginTest, WaitsForTheKubeletAndSurvivesARefusal) {
    start_fake_vfiod();
    start_plugin();  // no kubelet.sock yet
    ASSERT_TRUE(eventually([&] {
        return slurp(work + "/plugin.log").find("waiting for the kubelet") != std::string::npos;
    }, 5s));
    kubelet->refuse_registrations("resource name already taken");
    ASSERT_TRUE(kubelet->start());
    ASSERT_TRUE(eventually([&] {
        return slurp(work + "/plugin.log").find("resource name already taken") !=
               std::string::npos;
    }, 5s));
    EXPECT_TRUE(kubelet->registrations().empty());
    kubelet->refuse_registrations("");
    ASSERT_TRUE(kubelet->restart());
    EXPECT_TRUE(listed({kGpu, kNic, kNvme}, 2s));
}

// kubelet.sock exists but nobody listens on it (a kubelet between bind() and listen(), or one
// that died): Register is tried again from the loop's timer, never waited for, so the loop keeps
// serving meanwhile; after about 3 s it gives up with one error per resource, and a kubelet that
// then starts gets every registration.
TEST_F(DevicePluginTest, RetriesAKubeletThatDoesNotListenWithoutBlocking) {
    start_fake_vfiod();
    std::string sock = kubelet_dir + "/kubelet.sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
    int dead = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(bind(dead, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);  // no listen()
    start_plugin();
    ASSERT_TRUE(eventually([&] { return log_count("trying again") >= 3; }, 5s));
    const std::string gave_up = "error kubelet (";
    EXPECT_EQ(log_count(gave_up), 0u);  // still trying
    // The loop is not inside a Register: vfiod's change is taken at once.
    auto t0 = Clock::now();
    ASSERT_TRUE(client::call_group_method("Release", "0000:03:00.0").ok());
    EXPECT_TRUE(eventually([&] {
        return log_count("0000:03:00.0 (IOMMU group 15) Unhealthy") == 1;
    }, 5s));
    std::printf("# Release -> logged Unhealthy while Register retries: %ld ms\n", ms_since(t0));
    EXPECT_LT(Clock::now() - t0, kServedLimit);
    // Given up: one error per resource, and no more tries. Settled: the loop sleeps with no
    // timer set, and a try to come would be one.
    ASSERT_TRUE(eventually([&] { return log_count(gave_up) == 3; }, 6s));
    size_t tries = log_count("trying again");
    EXPECT_TRUE(eventually([&] { return poll_sleep_ms(plugin.pid()) == -1; }, 5s))
        << "a try is still scheduled";
    EXPECT_EQ(log_count("trying again"), tries);
    EXPECT_EQ(log_count(gave_up), 3u);
    close(dead);
    ASSERT_TRUE(kubelet->start());  // replaces the dead socket
    EXPECT_TRUE(listed({kGpu, kNic, kNvme}, 2s));
    EXPECT_EQ(health(kNic, "0000:03:00.0"), "Unhealthy");
}

TEST_F(DevicePluginTest, ReloadAddsAndRemovesResources) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic, kNvme}));
    std::string renamed = kK8sHostConfig;
    renamed.replace(renamed.find("intel.com/I210"), 14, "intel.com/igb");
    renamed.erase(renamed.find("[[device]]\nselector = \"144d"),
                  std::string("[[device]]\nselector = \"144d:a808\"\nresource_name = "
                              "\"samsung.com/PM9A1\"\n").size());
    spit(config, renamed);
    vfiod.signal(SIGHUP);
    ASSERT_TRUE(listed({"intel.com/igb"}, 5s));
    EXPECT_EQ(health("intel.com/igb", "0000:05:00.0"), "Healthy");
    // The vanished resources got an empty list and a closed stream, their sockets removed.
    EXPECT_TRUE(kubelet->wait([](const std::vector<FakeKubelet::Stream>& ss) {
        int closed = 0;
        for (const auto& s : ss)
            if ((s.resource == kNic || s.resource == kNvme) && s.ended &&
                s.lists.back().health.empty())
                ++closed;
        return closed == 2;
    }, 5s));
    EXPECT_FALSE(fs::exists(kubelet_dir + "/vfiod-samsung_com_PM9A1.sock"));
    EXPECT_FALSE(fs::exists(kubelet_dir + "/vfiod-intel_com_I210.sock"));
    EXPECT_TRUE(fs::exists(kubelet_dir + "/vfiod-intel_com_igb.sock"));
}

TEST_F(DevicePluginTest, SigtermSendsEmptyListsAndExitsZero) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu, kNic, kNvme}));
    EXPECT_EQ(plugin.stop(SIGTERM), 0);
    auto ss = kubelet->streams();
    ASSERT_EQ(ss.size(), 3u);
    EXPECT_TRUE(kubelet->wait([](const std::vector<FakeKubelet::Stream>& all) {
        for (const auto& s : all)
            if (!s.ended || !s.lists.back().health.empty())
                return false;
        return true;
    }, 2s));
}

TEST_F(DevicePluginTest, SecondInstanceExitsAndTheFirstKeepsServing) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu}));
    Proc second({VFIOD_DEVICE_PLUGIN, "--kubelet-dir", kubelet_dir, "--root", root},
                work + "/second.log");
    EXPECT_EQ(second.wait_exit(5s), 1);
    EXPECT_NE(slurp(work + "/second.log").find("another vfiod-device-plugin"), std::string::npos);
    v1beta1::AllocateResponse r;
    EXPECT_TRUE(kubelet->allocate(kGpu, {{"0000:01:00.0", "0000:01:00.1"}}, &r).ok());
    EXPECT_EQ(kubelet->registrations().size(), 3u);
}

TEST_F(DevicePluginTest, GarbageAndOversizedMessagesGetErrorsNotACrash) {
    start_fake_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kGpu}));
    // Oversized: more IDs than the plugin accepts in one message.
    std::vector<std::string> many(100000, "0000:01:00.0");  // 1.4 MB
    v1beta1::AllocateResponse r;
    auto s = kubelet->allocate(kGpu, {many}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    // Garbage: bytes that are no protobuf message, sent raw on the Allocate method.
    auto ch = kubelet->channel(kGpu);
    grpc::GenericStub generic(ch);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Slice junk(std::string("\xff\xff\xff\xff\x0f garbage", 14));
    grpc::ByteBuffer req(&junk, 1), resp;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status gs;
    generic.UnaryCall(&ctx, "/v1beta1.DevicePlugin/Allocate", grpc::StubOptions(), &req, &resp,
                      [&](grpc::Status st) {
                          std::lock_guard l(mu);
                          gs = st;
                          done = true;
                          cv.notify_all();
                      });
    std::unique_lock l(mu);
    ASSERT_TRUE(cv.wait_for(l, 5s, [&] { return done; }));
    EXPECT_FALSE(gs.ok());
    l.unlock();
    // Still serving, stream still open.
    EXPECT_TRUE(kubelet->allocate(kGpu, {{"0000:01:00.0", "0000:01:00.1"}}, &r).ok());
    EXPECT_FALSE(kubelet->streams()[0].ended);
}

// The real vfiod in observe mode on a tree where group 15 is already on vfio-pci: stopped, the
// plugin keeps its list, follows /dev/vfio for health and never starts vfiod; started again, a
// full re-sync (here with a resource renamed meanwhile).
TEST_F(DevicePluginTest, VfiodStopAndStartResyncsAndNeverActivates) {
    root = work + "/root";
    Proc mk({VFIOD_MKFIXTURE, "k8s-host", root}, work + "/mkfixture.log");
    ASSERT_EQ(mk.wait_exit(10s), 0);
    fs::path nic = fs::canonical(root + "/sys/bus/pci/devices/0000:03:00.0");
    fs::remove(nic / "driver");
    fs::create_directory_symlink(fs::relative(root + "/sys/bus/pci/drivers/vfio-pci", nic),
                                 nic / "driver");
    fs::create_directories(root + "/dev/vfio");
    spit(root + "/dev/vfio/15", "");
    auto start_vfiod = [&] {
        vfiod = Proc({VFIOD_BIN, "--root", root, "--config", config, "--observe"},
                     work + "/vfiod.log");
        ASSERT_TRUE(eventually([] { return client::daemon_running(); }, 10s));
    };
    start_vfiod();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({kNic}));
    EXPECT_EQ(health(kNic, "0000:03:00.0"), "Healthy");
    EXPECT_EQ(health(kNic, "0000:05:00.0"), "Unhealthy");  // pending: observe mode binds nothing

    vfiod.stop();
    ASSERT_TRUE(eventually([&] { return log_count("vfiod left the bus") == 1; }, 5s));
    size_t lists = kubelet->list_count(kNic);
    EXPECT_EQ(health(kNic, "0000:03:00.0"), "Healthy");  // bindings outlive vfiod
    fs::remove(root + "/dev/vfio/15");
    EXPECT_TRUE(eventually([&] { return health(kNic, "0000:03:00.0") == "Unhealthy"; }, 1s));
    spit(root + "/dev/vfio/15", "");
    EXPECT_TRUE(eventually([&] { return health(kNic, "0000:03:00.0") == "Healthy"; }, 1s));
    EXPECT_EQ(kubelet->list_count(kNic), lists + 2);
    EXPECT_FALSE(env.activated()) << "the plugin D-Bus-activated vfiod";

    std::string renamed = kK8sHostConfig;
    renamed.replace(renamed.find("intel.com/I210"), 14, "intel.com/igb");
    spit(config, renamed);
    start_vfiod();
    EXPECT_TRUE(listed({"intel.com/igb"}, 2s));
    EXPECT_EQ(health("intel.com/igb", "0000:03:00.0"), "Healthy");
    EXPECT_TRUE(eventually([&] {
        for (const auto& st : kubelet->streams())
            if (st.resource == kNic && st.ended)
                return true;
        return false;
    }, 2s));
    EXPECT_FALSE(env.activated());
}

// Issue 23, finding 3 (a): vfiod frozen (SIGSTOP) before the plugin starts. The plugin's first
// read of the inventory gets no answer; SIGTERM must not wait for it (it once took 22 s: the
// read was a synchronous call with sd-bus's 25 s timeout, on the plugin's only loop).
TEST_F(DevicePluginTest, SigtermWhileVfiodIsFrozenAtStartExitsPromptly) {
    start_fake_vfiod();
    ASSERT_EQ(vfiod.signal(SIGSTOP), 0);
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(eventually([&] { return log_count("starting") == 1; }, 5s));
    // Inside its first read: its loop sleeps until that read's timeout, the only deadline it has.
    ASSERT_TRUE(eventually([&] { return poll_sleep_ms(plugin.pid()).value_or(-1) > 0; }, 5s));
    expect_prompt_exit(plugin, "vfiod frozen since start");
    vfiod.signal(SIGCONT);
}

// Finding 3 (b): vfiod freezes right after a change, the plugin's re-read of the inventory hangs,
// and the kubelet restarts meanwhile: registration must not wait for vfiod (it took 23.6 s), nor
// must SIGTERM with that read still pending.
TEST_F(DevicePluginTest, KubeletRestartWhileVfiodIsFrozenMidResyncRegistersAtOnce) {
    start_peer(peer_functions(2, 2));
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0", "example.com/r1"}));
    peer.set_mode(FakeVfiodPeer::Mode::Freeze);
    peer.emit_changed(100);
    ASSERT_TRUE(eventually([&] { return peer.held() >= 1; }, 5s));
    auto t0 = Clock::now();
    ASSERT_TRUE(kubelet->restart());
    EXPECT_TRUE(eventually([&] { return kubelet->registrations().size() >= 4; }, 10s));
    long took = ms_since(t0);
    std::printf("# vfiod frozen mid-resync: kubelet restart -> registered again: %ld ms\n", took);
    EXPECT_LT(took, 3000);
    // Served from what was known: the lists did not change.
    EXPECT_TRUE(listed({"example.com/r0", "example.com/r1"}, 3s));
    EXPECT_EQ(health("example.com/r0", "0000:01:00.0"), "Healthy");
    ASSERT_GE(peer.held(), 1u);  // the read is still pending
    expect_prompt_exit(plugin, "a read pending");
}

// A vfiod that never answers is asked again after a backoff, not in a loop, with one warning for
// the whole episode; once it answers, its inventory is served.
TEST_F(DevicePluginTest, FrozenVfiodIsAskedAgainAfterABackoffAndServedWhenItAnswers) {
    peer.set_mode(FakeVfiodPeer::Mode::Freeze);
    auto fns = peer_functions(1, 2);
    start_peer(fns);
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(eventually([&] { return peer.reads() == 1; }, 5s));
    // The read's timeout (5 s), then a first retry 1 s later.
    ASSERT_TRUE(eventually([&] { return log_count("did not answer") == 1; }, 10s));
    EXPECT_TRUE(eventually([&] { return peer.reads() == 2; }, 3s));
    // Settled: the loop sleeps until that read's timeout, seconds away, with nothing due sooner;
    // a read in a loop, or on a short timer, would be.
    EXPECT_TRUE(eventually([&] { return poll_sleep_ms(plugin.pid()).value_or(0) > 1500; }, 3s));
    EXPECT_EQ(peer.reads(), 2);
    EXPECT_EQ(log_count("did not answer"), 1u);
    EXPECT_TRUE(kubelet->registrations().empty());  // nothing known, nothing to register
    auto t0 = Clock::now();
    peer.thaw();  // answers the pending read
    EXPECT_TRUE(listed({"example.com/r0"}, 3s));
    std::printf("# frozen vfiod answers -> listed: %ld ms\n", ms_since(t0));
    EXPECT_EQ(log_count("vfiod answers again"), 1u);
    // And no read went uncounted: the plugin's calls reach the fake in order, so the read a
    // change asks for now comes after every read before it, and it is the third.
    fns[1].state = "released";
    peer.set_inventory(fns);
    peer.emit_changed(100);
    EXPECT_TRUE(eventually([&] { return health("example.com/r0", fns[1].address) == "Unhealthy"; },
                           5s));
    EXPECT_EQ(peer.reads(), 3);
}

// vfiod answering garbage: the last good inventory stays served, a burst of signals costs a few
// reads rather than one each, and a good answer later is taken.
TEST_F(DevicePluginTest, GarbageInventoryKeepsTheLastGoodOneAndBacksOff) {
    auto fns = peer_functions(1, 2);
    start_peer(fns);
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0"}));
    const int reads = peer.reads();
    const size_t lists = kubelet->list_count("example.com/r0");
    peer.set_mode(FakeVfiodPeer::Mode::Garbage);
    for (int i = 0; i < 50; ++i) {
        peer.emit_changed(100);
        std::this_thread::sleep_for(10ms);
    }
    // A good answer ends the episode. Once it is served, every read the burst cost has reached
    // the fake (the plugin's calls arrive in order, the good one last), and every list sent
    // meanwhile has reached the kubelet (a stream's lists arrive in order too).
    fns[0].state = "released";
    peer.set_inventory(fns);
    peer.set_mode(FakeVfiodPeer::Mode::Answer);
    EXPECT_TRUE(eventually([&] { return health("example.com/r0", "0000:01:00.0") == "Unhealthy"; },
                           5s));
    std::printf("# 50 signals from a vfiod answering garbage, then a good answer: %d reads\n",
                peer.reads() - reads);
    EXPECT_LE(peer.reads() - reads, 3);  // the backed-off ones and the good one, not one a signal
    EXPECT_EQ(log_count("cannot read vfiod's inventory"), 1u);  // one warning, not one a read
    // The last good inventory stayed served: the one list since is the good answer's.
    EXPECT_EQ(kubelet->list_count("example.com/r0"), lists + 1);
    EXPECT_EQ(health("example.com/r0", fns[1].address), "Healthy");
    EXPECT_FALSE(kubelet->streams()[0].ended);
}

// vfiod restarting over and over, frozen each time: every new owner is read once, each read
// abandoned when its owner goes; the last one, answering, is served; SIGTERM stays prompt.
TEST_F(DevicePluginTest, VfiodRestartingRepeatedlyWhileFrozen) {
    start_peer(peer_functions(1, 2));
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0"}));
    peer.set_mode(FakeVfiodPeer::Mode::Freeze);
    const int reads = peer.reads();
    const size_t lists = kubelet->list_count("example.com/r0");
    const size_t owners = log_count("vfiod is on the bus");
    for (int i = 0; i < 30; ++i) {
        peer.own_name(false);
        std::this_thread::sleep_for(5ms);
        peer.own_name(true);
        std::this_thread::sleep_for(20ms);
    }
    // Every restart taken: the plugin names each new owner.
    ASSERT_TRUE(eventually([&] { return log_count("vfiod is on the bus") == owners + 30; }, 5s));
    EXPECT_EQ(health("example.com/r0", "0000:01:00.0"), "Healthy");
    auto fns = peer_functions(1, 2);
    fns[1].state = "failed";
    peer.set_inventory(fns);
    peer.thaw();
    peer.own_name(false);
    peer.own_name(true);
    EXPECT_TRUE(eventually([&] { return health("example.com/r0", fns[1].address) == "Unhealthy"; },
                           5s));
    peer.set_mode(FakeVfiodPeer::Mode::Freeze);
    peer.emit_changed(100);
    ASSERT_TRUE(eventually([&] { return peer.held() >= 1; }, 5s));
    // That read reached the fake after every read before it (the plugin's calls arrive in
    // order): 31 owners, each read once at most, and the change.
    std::printf("# 31 owners of a frozen vfiod, then a change: %d reads\n", peer.reads() - reads);
    EXPECT_LE(peer.reads() - reads, 32);
    // Nothing was served meanwhile but the answer that failed a function.
    EXPECT_EQ(kubelet->list_count("example.com/r0"), lists + 1);
    expect_prompt_exit(plugin, "frozen again after a restart");
}

// Finding 7a: an Allocate is one log line, however many IDs or containers it carries (10,000
// empty containers once logged 10,000 lines, 5,000 IDs one 65 KB line). All 2,000 functions of a
// large inventory, read and served, in one Allocate.
TEST_F(DevicePluginTest, AllocateLogsOneBoundedLine) {
    start_peer(peer_functions(1, 2000));
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0"}, 20s));
    ASSERT_EQ(kubelet->latest("example.com/r0").health.size(), 2000u);
    ASSERT_TRUE(eventually([&] { return log_count("registered with the kubelet") == 1; }, 5s));
    std::vector<std::string> ids;
    for (const auto& f : peer_functions(1, 2000))
        ids.push_back(f.address);
    size_t at = log_size();
    v1beta1::AllocateResponse r;
    auto t0 = Clock::now();
    grpc::Status s = kubelet->allocate("example.com/r0", {ids}, &r);
    std::printf("# Allocate of 2,000 IDs took %ld ms\n", ms_since(t0));
    ASSERT_TRUE(s.ok()) << s.error_message();
    std::string added = log_since(at);
    std::printf("# Allocate of 2,000 IDs: %zu log lines, %zu bytes\n",
                static_cast<size_t>(std::count(added.begin(), added.end(), '\n')), added.size());
    EXPECT_EQ(std::count(added.begin(), added.end(), '\n'), 1);
    EXPECT_LT(added.size(), 1024u);
    EXPECT_NE(added.find("2000 devices to 1 container: 0000:01:00.0, "), std::string::npos)
        << added;
    EXPECT_NE(added.find(" and 1992 more"), std::string::npos) << added;
    at = log_size();
    std::vector<std::vector<std::string>> empty(10000);
    ASSERT_TRUE(kubelet->allocate("example.com/r0", empty, &r).ok());
    added = log_since(at);
    std::printf("# Allocate of 10,000 empty containers: %zu log lines, %zu bytes\n",
                static_cast<size_t>(std::count(added.begin(), added.end(), '\n')), added.size());
    EXPECT_EQ(std::count(added.begin(), added.end(), '\n'), 1);
    EXPECT_LT(added.size(), 1024u);
}

// Finding 7c: SIGTERM with several endpoints whose ListAndWatch stream the kubelet never reads.
// Lists of 300 devices, sent a few times, fill each stream's flow-control window, so the last
// (empty) list cannot be written and each server's Shutdown waits out its deadline: 1 s each,
// one endpoint after the other (6 s here). One deadline is shared now: about 1 s, plus the
// exit itself, which took up to 1.3 s more on a loaded machine; so the check is at 4 s, and the
// time must show that the deadline was needed at all (the windows did fill).
TEST_F(DevicePluginTest, SigtermWithStuckStreamsTakesOneDeadlineNotOneEach) {
    // Not thousands: each change is read whole, and sdbus-c++ decodes 6,000 objects slowly
    // enough under meson's MALLOC_PERTURB_ on a loaded machine to miss the 10 s below.
    auto fns = peer_functions(6, 300);
    start_peer(fns);
    kubelet->never_read_streams();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(eventually([&] { return kubelet->registrations().size() == 6; }, 20s));
    for (int round = 0; round < 4; ++round) {  // every list differs from the one before
        for (auto& f : fns)
            f.state = round % 2 ? "bound" : "released";
        peer.set_inventory(fns);
        // Read, and published before the next change (two changes in one read would cancel
        // out): publishing a read, the plugin logs each device's new health, this inventory's
        // last device last, then hands the lists to the streams before it takes the next signal.
        const std::string last = "(IOMMU group " + std::to_string(fns.back().group) + ") " +
                                 (round % 2 ? "Healthy" : "Unhealthy");
        const size_t seen = log_count(last);
        peer.emit_changed(100);
        ASSERT_TRUE(eventually([&] { return log_count(last) > seen; }, 10s));
    }
    int code = -1;
    long took = stop_timed(plugin, &code);
    std::printf("# SIGTERM with 6 unread streams -> exit: %ld ms\n", took);
    EXPECT_EQ(code, 0);
    EXPECT_GE(took, 900) << "no stream was stuck: the test did not test anything";
    EXPECT_LT(took, 4000);
}

// gRPC++ completes a Register on one of its own threads. The plugin once freed the call's channel
// there; when that channel was gRPC++'s last user of its shared callback queue (no endpoint
// serving any more), freeing it shut the queue down and freed it under the very thread running
// on it: ASan's double free in grpc_cq_internal_unref, an abort (CI, 2026-12). Here the only
// resource goes while its Register waits in the kubelet, and the kubelet answers afterwards.
TEST_F(DevicePluginTest, ARegistrationAnsweredAfterItsResourceWentIsNoCrash) {
    start_peer(peer_functions(1, 1));
    kubelet->hold_registrations();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(eventually([&] { return kubelet->held_registrations() == 1; }, 10s));
    peer.set_inventory({});
    peer.emit_changed(100);
    ASSERT_TRUE(eventually([&] { return log_count("no longer published") == 1; }, 5s));
    kubelet->release_registrations();
    ASSERT_TRUE(eventually([&] { return kubelet->registrations().size() == 1; }, 5s));
    EXPECT_EQ(plugin.wait_exit(1s), -1) << "the plugin died when the kubelet answered";
    // It serves again when the resource comes back, and registers it.
    peer.set_inventory(peer_functions(1, 1));
    peer.emit_changed(100);
    EXPECT_TRUE(eventually([&] { return kubelet->registrations().size() == 2; }, 5s));
    expect_prompt_exit(plugin, "after a late registration answer");
}

// SIGTERM while a Register waits in the kubelet: the call is cancelled, its completion awaited
// and freed before the plugin exits, promptly and with status 0.
TEST_F(DevicePluginTest, SigtermWhileARegistrationWaitsCancelsItAndExitsZero) {
    start_peer(peer_functions(2, 1));
    kubelet->hold_registrations();
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(eventually([&] { return kubelet->held_registrations() == 2; }, 10s));
    expect_prompt_exit(plugin, "two registrations waiting");
    EXPECT_EQ(log_count("registration cancelled"), 2u);
    kubelet->release_registrations();
}

// A bus that refuses the plugin's subscriptions (here: one match rule per connection, so the
// second addMatch fails with LimitsExceeded). The sdbus::Error once escaped main() into
// std::terminate (SIGABRT, a core dump, no word of why); now the plugin says why and exits 1,
// its "runtime failure".
TEST_F(DevicePluginTest, ABusThatRefusesASubscriptionIsAnExitNotAnAbort) {
    env.bus.stop();
    // The private bus's own configuration, on another socket, with that limit.
    const std::string socket = work + "/limited-bus";
    std::string conf = slurp(work + "/bus.conf");
    const std::string listen = work + "/bus</listen>";
    ASSERT_NE(conf.find(listen), std::string::npos);
    conf.replace(conf.find(listen), listen.size(), socket + "</listen>");
    conf.insert(conf.find("</busconfig>"),
                "  <limit name=\"max_match_rules_per_connection\">1</limit>\n");
    spit(work + "/limited.conf", conf);
    Proc bus({"/usr/bin/dbus-daemon", "--config-file=" + work + "/limited.conf", "--nofork",
              "--nopidfile"},
             work + "/limited-bus.log");
    ASSERT_TRUE(eventually([&] { return accepts_connections(socket); }, 5s));
    setenv("DBUS_SYSTEM_BUS_ADDRESS", ("unix:path=" + socket).c_str(), 1);
    root = work + "/root";
    fs::create_directories(root + "/dev/vfio");
    start_plugin();
    int code = plugin.wait_exit(10s);
    EXPECT_EQ(code, 1) << "128 + 6 is the abort of std::terminate";
    EXPECT_EQ(log_count("cannot follow vfiod's signals on the bus"), 1u);
}

// Processes `bus`'s messages on this thread until `done` or `timeout`.
bool pump(sdbus::IConnection& bus, const std::function<bool()>& done,
          std::chrono::milliseconds timeout) {
    auto end = Clock::now() + timeout;
    while (!done() && Clock::now() < end) {
        while (bus.processPendingRequest()) {
        }
        auto pd = bus.getEventLoopPollData();
        pollfd p{pd.fd, static_cast<short>(pd.events), 0};
        poll(&p, 1, 10);
    }
    return done();
}

// The whole inventory on `bus`, as the plugin reads it; false when the read does not end well.
bool read_whole(sdbus::IConnection& bus, client::Inventory* inv) {
    client::ViewReader reader(bus, 5s);
    bool read = false, ok = false;
    if (!reader
             .start([&](const client::ClientResult& r, client::Inventory&& got) {
                 EXPECT_TRUE(r.ok()) << r.message;
                 ok = r.ok();
                 *inv = std::move(got);
                 read = true;
             })
             .ok())
        return false;
    return pump(bus, [&] { return read; }, 20s) && ok;
}

std::unique_ptr<sdbus::IConnection> DevicePluginTest::read_fleet(client::Inventory* inv) {
    start_peer(peer_functions(1, 2000));
    auto bus = sdbus::createSystemBusConnection();
    EXPECT_TRUE(read_whole(*bus, inv));
    EXPECT_EQ(inv->decoded(), 4000u);
    return bus;
}

// Issue 22: a change costs the objects it names, not the inventory. 2,000 one-function groups
// (4,000 objects): the whole read decodes each object once; after it each single-group State
// change decodes one object, and a change without its value is refused (a whole read is due).
TEST_F(DevicePluginTest, AChangeDecodesTheObjectsItNamesNotTheInventory) {
    client::Inventory inv;
    auto bus = read_fleet(&inv);
    ASSERT_FALSE(HasFailure());
    int applied = 0, refused = 0;
    auto watch = client::watch_inventory(
        *bus, [&](sdbus::Message& m) { ++(inv.apply(m) ? applied : refused); }, [](bool) {});

    const size_t before = inv.decoded();
    for (unsigned g : {100u, 1500u, 2099u})
        peer.emit_state(g, "released");
    ASSERT_TRUE(pump(*bus, [&] { return applied == 3; }, 5s));
    EXPECT_EQ(inv.decoded() - before, 3u) << "one object per single-group change";
    auto view = inv.view();
    ASSERT_EQ(view.groups.size(), 2000u);
    EXPECT_EQ(view.groups[0].state_value, GroupState::Released);  // group 100
    EXPECT_EQ(view.groups[1].state_value, GroupState::Bound);
    EXPECT_EQ(view.groups[1999].state, "released");

    peer.emit_changed(101);  // State invalidated, no value
    ASSERT_TRUE(pump(*bus, [&] { return refused == 1; }, 5s));
    EXPECT_EQ(inv.decoded() - before, 3u);
    EXPECT_EQ(inv.view().groups[1].state_value, GroupState::Bound);
}

// Issue 22: the plugin serves a change that carries its value without reading the inventory
// again (it read all of it for every signal); a new owner still gets a whole read.
TEST_F(DevicePluginTest, AStateChangeIsServedWithoutReadingTheInventoryAgain) {
    start_peer(peer_functions(1, 4));
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0"}));
    const std::string r0 = "example.com/r0", fn = "0000:01:00.0";  // group 100
    ASSERT_TRUE(eventually([&] { return health(r0, fn) == "Healthy"; }, 5s));
    const int reads = peer.reads();
    peer.emit_state(100, "released");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Unhealthy"; }, kServedLimit));
    peer.emit_state(100, "bound");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Healthy"; }, kServedLimit));
    EXPECT_EQ(peer.reads(), reads) << "a change with its value read the inventory again";

    peer.own_name(false);
    peer.own_name(true);
    EXPECT_TRUE(eventually([&] { return peer.reads() == reads + 1; }, kServedLimit));
}

// DESIGN §13: Health and HealthReason of functions and Health of groups, decoded from a whole
// read and from the PropertiesChanged that carry them; a vfiod that publishes none reads "".
TEST_F(DevicePluginTest, HealthIsDecodedFromAReadAndFromItsSignals) {
    start_health_peer("degraded", "aer-correctable: 3 since start");
    auto bus = sdbus::createSystemBusConnection();
    client::Inventory inv;
    ASSERT_TRUE(read_whole(*bus, &inv));
    // "Health | HealthReason" of function `a` of the g-th group.
    auto device_health = [&](size_t g, const char* a) -> std::string {
        const auto dh = inv.view().groups.at(g).device_health;
        auto it = dh.find(*PciAddress::parse(a));
        return it == dh.end() ? "absent" : it->second.state + " | " + it->second.reason;
    };
    auto view = inv.view();
    EXPECT_EQ(view.groups[0].health, "");
    EXPECT_EQ(device_health(0, "0000:01:00.0"), " | ");
    EXPECT_EQ(view.groups[1].health, "degraded");
    EXPECT_EQ(device_health(1, "0000:01:01.0"), "degraded | aer-correctable: 3 since start");
    EXPECT_EQ(view.groups[2].health, "ok");

    int applied = 0;
    auto watch = client::watch_inventory(
        *bus, [&](sdbus::Message& m) { applied += inv.apply(m); }, [](bool) {});
    peer.emit_health(101, "failed", "aer-fatal: recovery failed");
    ASSERT_TRUE(pump(*bus, [&] { return applied == 2; }, 5s));  // the function, then the group
    EXPECT_EQ(inv.view().groups[1].health, "failed");
    EXPECT_EQ(device_health(1, "0000:01:01.0"), "failed | aer-fatal: recovery failed");
    peer.emit_health(101, "ok", "");
    ASSERT_TRUE(pump(*bus, [&] { return applied == 4; }, 5s));
    EXPECT_EQ(inv.view().groups[1].health, "ok");
    EXPECT_EQ(device_health(1, "0000:01:01.0"), "ok | ");
}

// `vfioctl ARGS` on the test's bus: its stdout, and its exit status in *code.
std::string vfioctl(const std::string& args, int* code) {
    FILE* p = popen((std::string(VFIOCTL) + " " + args + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;)
        out.append(buf, n);
    int status = p ? pclose(p) : -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

// DESIGN §13 in vfioctl status, against the fake vfiod (the real one publishes no Health yet):
// the JSON has each function's health and reason and each group's health, null where vfiod
// publishes none; the text names a failed or degraded group and function, and says nothing of
// an ok one; an mdev has its parent's.
TEST_F(DevicePluginTest, VfioctlStatusShowsWhatVfiodSaysOfHealth) {
    const std::string mdev = mdev_uuid("0000:3b:00.0", "t", 0);
    peer.set_mdevs({{mdev, "0000:3b:00.0", 40, "example.com/vgpu", "failed",
                     "gone: config space reads all ones"}});
    start_health_peer("failed", "aer-fatal: recovery failed");
    int code = -1;
    std::string json = vfioctl("status --json", &code);
    EXPECT_EQ(code, 0) << json;
    auto has = [](const std::string& out, const std::string& what) {
        return out.find(what) != std::string::npos;
    };
    // Each object's members in order: a function's after its resource_name, a group's last.
    EXPECT_TRUE(has(json, R"("resource_name": "example.com/r0",
          "health": null,
          "health_reason": null
        }
      ],
      "health": null
    },)")) << json;
    EXPECT_TRUE(has(json, R"("health": "failed",
          "health_reason": "aer-fatal: recovery failed"
        }
      ],
      "health": "failed")")) << json;
    EXPECT_TRUE(has(json, R"("health": "ok",
          "health_reason": ""
        }
      ],
      "health": "ok")")) << json;
    EXPECT_TRUE(has(json, R"("blockers": [],
      "health": "failed",
      "health_reason": "gone: config space reads all ones"
    })")) << json;
    std::string text = vfioctl("status", &code);
    EXPECT_EQ(code, 0) << text;
    EXPECT_TRUE(has(text, "group 101: bound, health failed\n")) << text;
    EXPECT_TRUE(has(text, "  health of 0000:01:01.0: failed (aer-fatal: recovery failed)\n"))
        << text;
    EXPECT_TRUE(has(text, "group 102: bound\n")) << text;
    EXPECT_FALSE(has(text, "health ok")) << text;
    EXPECT_FALSE(has(text, "of 0000:01:02.0")) << text;
    EXPECT_TRUE(has(text, "  health of its parent: failed (gone: config space reads all ones)\n"))
        << text;
}

// DESIGN §13: a group whose Health turns failed is Unhealthy within the served limit, from the
// signal alone (no read), its other groups untouched; cleared, Healthy again. A degraded one
// stays Healthy.
TEST_F(DevicePluginTest, AFailedGroupIsUnhealthyAndHealthyOnceCleared) {
    start_peer(peer_functions(1, 2));  // groups 100 and 101, no Health published
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({"example.com/r0"}));
    const std::string r0 = "example.com/r0", fn = "0000:01:00.0", other = "0000:01:01.0";
    ASSERT_TRUE(eventually([&] { return health(r0, fn) == "Healthy"; }, 5s));
    const int reads = peer.reads();
    auto t0 = Clock::now();
    peer.emit_health(100, "failed", "aer-fatal: recovery failed");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Unhealthy"; }, kServedLimit));
    std::printf("# failed health -> Unhealthy: %ld ms\n", ms_since(t0));
    EXPECT_EQ(health(r0, other), "Healthy");
    peer.emit_health(100, "degraded", "aer-recovered: an uncorrectable error, recovered by the "
                                      "kernel");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Healthy"; }, kServedLimit));
    peer.emit_health(100, "failed", "gone: config space reads all ones");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Unhealthy"; }, kServedLimit));
    peer.emit_health(100, "ok", "");
    EXPECT_TRUE(eventually([&] { return health(r0, fn) == "Healthy"; }, kServedLimit));
    EXPECT_EQ(peer.reads(), reads) << "a health change with its value read the inventory again";
    EXPECT_EQ(log_count(r0 + ": " + fn + " (IOMMU group 100) Unhealthy"), 2u);
}

// DESIGN §13: an mdev whose parent fails stays listed, Unhealthy (a running VM's device shows
// it), from the signal alone; cleared, Healthy again. The other mdev is untouched.
TEST_F(DevicePluginTest, AnMdevOnAFailedParentIsListedUnhealthyAndHealthyOnceCleared) {
    const std::string vgpu = "example.com/vgpu", a = mdev_uuid("0000:3b:00.0", "t", 0),
                      b = mdev_uuid("0000:3b:00.0", "t", 1);
    peer.set_mdevs({{a, "0000:3b:00.0", 40, vgpu}, {b, "0000:3b:00.0", 41, vgpu}});
    start_peer(peer_functions(1, 1));
    for (unsigned g : {40, 41})  // start_peer makes the functions' group nodes only
        spit(root + "/dev/vfio/" + std::to_string(g), "");
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    ASSERT_TRUE(listed({vgpu}));
    ASSERT_TRUE(eventually([&] { return health(vgpu, a) == "Healthy"; }, 5s));
    const int reads = peer.reads();
    peer.emit_mdev_health(a, "failed", "aer-fatal: recovery failed");
    EXPECT_TRUE(eventually([&] { return health(vgpu, a) == "Unhealthy"; }, kServedLimit));
    EXPECT_EQ(health(vgpu, b), "Healthy");
    peer.emit_mdev_health(a, "ok", "");
    EXPECT_TRUE(eventually([&] { return health(vgpu, a) == "Healthy"; }, kServedLimit));
    EXPECT_EQ(peer.reads(), reads) << "a health change with its value read the inventory again";
    EXPECT_EQ(log_count(vgpu + ": mdev " + a + " (IOMMU group 40) Unhealthy"), 1u);
}

// Issue 22: a removal costs the objects it names, not the inventory. 2,000 one-function groups:
// two groups dropped by a Reload are four InterfacesRemoved, four objects, and no read.
TEST_F(DevicePluginTest, ARemovalDecodesTheObjectsItNamesNotTheInventory) {
    client::Inventory inv;
    auto bus = read_fleet(&inv);
    ASSERT_FALSE(HasFailure());
    int applied = 0;
    auto watch = client::watch_inventory(
        *bus, [&](sdbus::Message& m) { applied += inv.apply(m); }, [](bool) {});
    const int reads = peer.reads();

    peer.emit_removed(100);
    peer.emit_removed(2099);
    ASSERT_TRUE(pump(*bus, [&] { return applied == 4; }, 5s));
    EXPECT_EQ(inv.decoded() - 4000u, 4u) << "one object per function and group removed";
    auto view = inv.view();
    ASSERT_EQ(view.groups.size(), 1998u);
    EXPECT_EQ(view.groups.front().plan.group.value_or(0), 101u);
    EXPECT_EQ(view.groups.back().plan.group.value_or(0), 2098u);
    EXPECT_EQ(peer.reads(), reads);
}

// Issue 22: a Reload that drops a resource, and a group of another, is served from the removals
// alone: the dropped resource's stream gets its empty list, the other loses one device, and the
// inventory is not read again.
TEST_F(DevicePluginTest, AReloadThatDropsGroupsIsServedWithoutReadingTheInventoryAgain) {
    start_peer(peer_functions(2, 2));  // r0: groups 100, 101; r1: 102, 103
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    const std::string r0 = "example.com/r0", r1 = "example.com/r1";
    ASSERT_TRUE(listed({r0, r1}));
    ASSERT_TRUE(eventually([&] { return health(r0, "0000:01:01.0") == "Healthy"; }, 5s));
    const int reads = peer.reads();

    peer.emit_removed(102);
    peer.emit_removed(103);
    peer.emit_removed(100);
    EXPECT_TRUE(kubelet->wait([&](const std::vector<FakeKubelet::Stream>& ss) {
        for (const auto& s : ss)
            if (s.resource == r1 && s.ended && s.lists.back().health.empty())
                return true;
        return false;
    }, kServedLimit));
    EXPECT_TRUE(eventually([&] { return health(r0, "0000:01:00.0") == "absent"; }, kServedLimit));
    EXPECT_EQ(health(r0, "0000:01:01.0"), "Healthy");
    EXPECT_TRUE(eventually([&] { return !fs::exists(kubelet_dir + "/vfiod-example_com_r1.sock"); },
                           kServedLimit));
    EXPECT_EQ(peer.reads(), reads) << "a removal read the inventory again";
}

// A stopping vfiod removes every object, then leaves the bus: the plugin keeps serving what it
// knew (bindings outlive vfiod), and says so once.
TEST_F(DevicePluginTest, AStoppingVfiodsRemovalsAreNotServed) {
    start_peer(peer_functions(2, 2));
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    const std::string r0 = "example.com/r0", r1 = "example.com/r1";
    ASSERT_TRUE(listed({r0, r1}));
    ASSERT_TRUE(eventually([&] { return health(r1, "0000:01:03.0") == "Healthy"; }, 5s));
    const size_t lists = kubelet->list_count(r0) + kubelet->list_count(r1);

    peer.stop_as_vfiod_does();
    EXPECT_TRUE(eventually([&] { return log_count("vfiod left the bus") == 1; }, kServedLimit));
    // Settled: a change after the removals, one device of each resource gone from /dev/vfio
    // (followed without vfiod), is served on the same streams, so after anything they caused.
    fs::remove(root + "/dev/vfio/100");
    fs::remove(root + "/dev/vfio/102");
    EXPECT_TRUE(eventually([&] {
        return health(r0, "0000:01:00.0") == "Unhealthy" && health(r1, "0000:01:02.0") == "Unhealthy";
    }, kServedLimit));
    // Those are the only lists since: the removals were not served.
    EXPECT_EQ(kubelet->list_count(r0) + kubelet->list_count(r1), lists + 2);
    EXPECT_EQ(health(r0, "0000:01:01.0"), "Healthy");
    EXPECT_EQ(health(r1, "0000:01:03.0"), "Healthy");
    for (const auto& s : kubelet->streams())
        EXPECT_FALSE(s.ended) << s.resource;
}

// Mediated devices (DESIGN §12): vfiod on the fake kernel with the sample parent mbochs makes
// three mdevs of one resource; the plugin lists them by UUID, Allocate answers their nodes and
// MDEV_PCI_RESOURCE_, and a Reload that lowers the count withdraws the removed one. Its goal is
// a second (DESIGN §9); this fails at 5 s and prints the time.
const char* const kVgpu = "example.com/vgpu";

// The IDs of resource's newest list among `ss`, as FakeKubelet::latest() (which wait()'s
// predicate must not call: it holds the kubelet's lock).
std::map<std::string, std::string> newest(const std::vector<FakeKubelet::Stream>& ss,
                                          const std::string& resource) {
    for (auto s = ss.rbegin(); s != ss.rend(); ++s)
        if (s->resource == resource && !s->lists.empty())
            return s->lists.back().health;
    return {};
}

std::string mdev_config(unsigned count) {
    return std::string(kK8sHostConfig) + "[[mdev]]\nparent = \"mbochs\"\ntype = \"mbochs-small\"\n"
           "count = " + std::to_string(count) + "\nresource_name = \"" + kVgpu + "\"\n";
}

TEST_F(DevicePluginTest, ServesVfiodsMdevsAndWithdrawsOneAReloadRemoves) {
    spit(config, mdev_config(3));
    root = env.start_fake_vfiod(&vfiod, "k8s-host+mbochs", config);
    ASSERT_FALSE(root.empty());
    ASSERT_TRUE(kubelet->start());
    start_plugin();
    std::vector<std::string> uuids;
    for (unsigned i = 0; i < 3; ++i)
        uuids.push_back(mdev_uuid("mbochs", "mbochs-small", i));
    ASSERT_TRUE(kubelet->wait([&](const std::vector<FakeKubelet::Stream>& ss) {
        return newest(ss, kVgpu).size() == 3;
    }, 20s)) << "the three mdevs never listed";
    ASSERT_TRUE(listed({kGpu, kNic}));  // the functions' resources beside them
    auto l = kubelet->latest(kVgpu);
    for (const auto& u : uuids) {
        EXPECT_EQ(l.health[u], "Healthy") << u;
        EXPECT_TRUE(l.numa[u].empty()) << u;  // a virtual parent has no NUMA node
    }
    auto group_of = [&](const std::string& uuid) {
        return fs::read_symlink(root + "/sys/bus/mdev/devices/" + uuid + "/iommu_group")
            .filename()
            .string();
    };

    v1beta1::AllocateResponse r;
    ASSERT_TRUE(kubelet->allocate(kVgpu, {{uuids[2], uuids[0]}}, &r).ok());
    ASSERT_EQ(r.container_responses_size(), 1);
    const auto& c = r.container_responses(0);
    std::vector<std::string> got;
    for (const auto& d : c.devices())
        got.push_back(d.container_path() + "|" + d.host_path() + "|" + d.permissions());
    const std::string g2 = "/dev/vfio/" + group_of(uuids[2]);
    const std::string g0 = "/dev/vfio/" + group_of(uuids[0]);
    EXPECT_EQ(got, (std::vector<std::string>{"/dev/vfio/vfio|/dev/vfio/vfio|mrw",
                                             g2 + "|" + g2 + "|mrw", g0 + "|" + g0 + "|mrw"}));
    ASSERT_EQ(c.envs_size(), 1);
    EXPECT_EQ(c.envs().at("MDEV_PCI_RESOURCE_EXAMPLE_COM_VGPU"), uuids[2] + "," + uuids[0]);
    std::vector<std::string> preferred;
    ASSERT_TRUE(kubelet->preferred(kVgpu, uuids, {uuids[1]}, 2, &preferred).ok());
    ASSERT_EQ(preferred.size(), 2u);
    EXPECT_EQ(preferred[0], uuids[1]);
    // A function's address is no device of this resource.
    auto s = kubelet->allocate(kVgpu, {{"0000:03:00.0"}}, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();

    // count 3 -> 2: vfiod removes the highest index; the plugin withdraws it.
    spit(config, mdev_config(2));
    auto t0 = Clock::now();
    vfiod.signal(SIGHUP);
    EXPECT_TRUE(kubelet->wait([&](const std::vector<FakeKubelet::Stream>& ss) {
        auto now = newest(ss, kVgpu);
        return now.size() == 2 && !now.count(uuids[2]);
    }, 5s)) << "the removed mdev is still listed";
    std::printf("# Reload (count 3 -> 2) -> the mdev withdrawn: %ld ms\n", ms_since(t0));
    EXPECT_EQ(kubelet->latest(kVgpu).health,
              (std::map<std::string, std::string>{{uuids[0], "Healthy"}, {uuids[1], "Healthy"}}));
    s = kubelet->allocate(kVgpu, {{uuids[2]}}, &r);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_message().find(uuids[2]), std::string::npos) << s.error_message();
    EXPECT_TRUE(kubelet->allocate(kVgpu, {{uuids[1]}}, &r).ok());
    EXPECT_NE(slurp(work + "/plugin.log").find("mdev " + uuids[2] + " withdrawn"),
              std::string::npos);
}

}  // namespace
}  // namespace vfiod::test
