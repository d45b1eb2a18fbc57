// vfiod-dra-plugin's DRAResourceHealth streams (dra-plugin/health_stream.cpp, DESIGN §13)
// against the fake DRA kubelet's FakeHealthWatch on real unix sockets: the service picked from
// the registration as the kubelet picks it, both versions on their literal paths, every device's
// health in each message, the lease kept by re-sending (and lost by a plugin that would send only
// on change), a cut stream opened again and answered at once, a kubelet that never opens one,
// bounded streams, and shutdown with a stream open.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "eventually.hpp"
#include "fake_dra_kubelet.hpp"
#include "kubelet.hpp"

namespace {

using vfiod::dra::DraDevice;
using vfiod::dra::KubeletServers;
using vfiod::test::FakeDraKubelet;
using vfiod::test::FakeHealthWatch;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kDriver = "vfio.vfiod.io";
constexpr const char* kNode = "node-a";

DraDevice device(const std::string& name, const std::string& state, const std::string& reason) {
    DraDevice d;
    d.name = name;
    d.health = {state, reason};
    return d;
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds within = 30s) {
    return vfiod::test::eventually(pred, within);
}

class DraHealthTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/vfiod-dra-health-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        opts_.driver = kDriver;
        opts_.registrar_dir = dir_ + "/plugins_registry";
        opts_.plugin_dir = dir_ + "/plugins/" + kDriver;
        opts_.dra_endpoint = opts_.plugin_dir + "/dra.sock";
        opts_.health.pool = kNode;
        opts_.health.resend = 200ms;
        opts_.health.lease_seconds = 2;
        reg_ = opts_.registrar_dir + "/" + std::string(kDriver) + "-reg.sock";
    }
    void TearDown() override {
        watch_.reset();
        servers_.reset();
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    void start() {
        servers_ = std::make_unique<KubeletServers>(
            opts_,
            [](const vfiod::dra::ClaimRef&, const vfiod::dra::CallLimit&) {
                vfiod::dra::PrepareResult r;
                r.devices = {{{"vm"}, kNode, "pci-0000-01-00-0", {}}};
                return r;
            },
            [](const vfiod::dra::ClaimRef&, const vfiod::dra::CallLimit&) {
                return std::string();
            });
        std::string err;
        ASSERT_TRUE(servers_->start(&err)) << err;
    }
    // Registers as the kubelet does and opens the stream of the service it picks.
    void watch() {
        FakeDraKubelet k;
        vfiod::test::DraPluginInfo info;
        std::string err;
        ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;
        service_ = vfiod::test::pick_health_service(info.supported_versions);
        ASSERT_EQ(service_, "v1.DRAResourceHealth");
        watch_ = std::make_unique<FakeHealthWatch>(k.dra_socket(), service_, 100ms);
    }
    int health(const std::string& name, std::string* message = nullptr) {
        return watch_->health(kNode, name, message);
    }

    std::string dir_, reg_, service_;
    KubeletServers::Options opts_;
    std::unique_ptr<KubeletServers> servers_;
    std::unique_ptr<FakeHealthWatch> watch_;
};

TEST(DraHealthPick, TheKubeletsServicePicker) {
    using vfiod::test::pick_health_service;
    EXPECT_EQ(pick_health_service({"v1.DRAPlugin"}), "");
    EXPECT_EQ(pick_health_service({}), "");
    EXPECT_EQ(pick_health_service({"v1.DRAPlugin", "v1alpha1.DRAResourceHealth"}),
              "v1alpha1.DRAResourceHealth");
    EXPECT_EQ(pick_health_service({"v1alpha1.DRAResourceHealth", "v1.DRAResourceHealth"}),
              "v1.DRAResourceHealth");
}

TEST_F(DraHealthTest, EveryDevicesHealthInEachMessageAndChangesAtOnce) {
    opts_.health.resend = 1h;  // only the first state and the change below go out
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "ok", ""),
                              device("pci-0000-02-00-0", "degraded",
                                     "aer-correctable: 3 since start"),
                              device("pci-0000-03-00-0", "failed", "aer-fatal: recovery failed"),
                              device("pci-0000-04-00-0", "unknown", "no-aer"),
                              device("mdev-6c8f2a4e-0b5d-4a5e-9d3c-1f2e3d4c5b6a", "", "")});
    watch();
    ASSERT_TRUE(eventually([&] { return watch_->messages() >= 1; }));
    EXPECT_EQ(watch_->last_size(), 5u);
    std::string m;
    EXPECT_EQ(health("pci-0000-01-00-0", &m), FakeHealthWatch::Healthy);
    EXPECT_EQ(m, "");
    EXPECT_EQ(health("pci-0000-02-00-0", &m), FakeHealthWatch::Healthy);
    EXPECT_EQ(m, "degraded: aer-correctable: 3 since start");
    EXPECT_EQ(health("pci-0000-03-00-0", &m), FakeHealthWatch::Unhealthy);
    EXPECT_EQ(m, "aer-fatal: recovery failed");
    EXPECT_EQ(health("pci-0000-04-00-0", &m), FakeHealthWatch::Unknown);
    EXPECT_EQ(m, "no-aer");
    for (const auto& [key, seen] : watch_->devices()) {
        EXPECT_EQ(key.rfind(std::string(kNode) + "/", 0), 0u) << key;  // the node's pool
        EXPECT_EQ(seen.timeout, 2) << key;
        EXPECT_LE(std::abs(seen.last_updated - static_cast<int64_t>(time(nullptr))), 2) << key;
    }

    // A change goes out at once, not at the next resend.
    const auto before = watch_->messages();
    const auto t0 = std::chrono::steady_clock::now();
    servers_->publish_health({device("pci-0000-01-00-0", "failed", "gone: config reads all ones")});
    ASSERT_TRUE(
        eventually([&] { return health("pci-0000-01-00-0") == FakeHealthWatch::Unhealthy; }));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // goal 1 s: bench/
    EXPECT_EQ(watch_->messages(), before + 1);
    EXPECT_EQ(watch_->last_size(), 1u);  // the whole state: the others are no longer published
    EXPECT_EQ(servers_->health_stats().open, 1u);
}

// The lease: re-sent every `resend`, a device stays known past its lease; a plugin that spoke
// only on change (resend far beyond the lease) would see it turn UNKNOWN at the kubelet.
TEST_F(DraHealthTest, ResendingKeepsTheLeaseAndOnlyOnChangeLosesIt) {
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "ok", "")});
    watch();
    ASSERT_TRUE(
        eventually([&] { return health("pci-0000-01-00-0") == FakeHealthWatch::Healthy; }));
    std::this_thread::sleep_for(3500ms);  // past the 2 s lease
    EXPECT_EQ(health("pci-0000-01-00-0"), FakeHealthWatch::Healthy);
    EXPECT_GE(watch_->messages(), 8u);  // every 200 ms

    watch_.reset();
    servers_.reset();
    opts_.health.resend = 1h;
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "ok", "")});
    watch();
    ASSERT_TRUE(
        eventually([&] { return health("pci-0000-01-00-0") == FakeHealthWatch::Healthy; }));
    EXPECT_TRUE(eventually([&] { return health("pci-0000-01-00-0") == FakeHealthWatch::Unknown; },
                           10s));
    EXPECT_EQ(watch_->messages(), 1u);
}

// A cut stream (a kubelet restarting) is opened again and answered at once, not at the next
// resend; the plugin forgets the cut one.
TEST_F(DraHealthTest, ACutStreamIsOpenedAgainAndAnsweredAtOnce) {
    opts_.health.resend = 1h;
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "failed", "quarantine: x")});
    watch();
    ASSERT_TRUE(eventually([&] { return watch_->messages() == 1; }));
    for (int i = 0; i < 3; ++i) {
        const auto opened = watch_->opens();
        watch_->cut();
        ASSERT_TRUE(eventually([&] { return watch_->opens() > opened && watch_->open_now(); }));
    }
    EXPECT_EQ(watch_->last_end().error_code(), grpc::StatusCode::CANCELLED);
    EXPECT_EQ(watch_->messages(), 4u);
    EXPECT_EQ(health("pci-0000-01-00-0"), FakeHealthWatch::Unhealthy);
    EXPECT_TRUE(eventually([&] { return servers_->health_stats().open == 1; }));
    EXPECT_EQ(servers_->health_stats().opened, 4u);
}

// The v1alpha1 service (an older kubelet's pick) says the same on its own path.
TEST_F(DraHealthTest, TheV1alpha1ServiceSaysTheSame) {
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "failed", "aer-fatal: recovery failed")});
    FakeHealthWatch old(opts_.dra_endpoint, vfiod::test::kHealthV1alpha1);
    ASSERT_TRUE(eventually([&] { return old.messages() >= 1; }));
    EXPECT_EQ(old.health(kNode, "pci-0000-01-00-0"), FakeHealthWatch::Unhealthy);
    // A service the plugin does not serve is UNIMPLEMENTED, as to the kubelet.
    FakeHealthWatch wrong(opts_.dra_endpoint, "v1beta1.DRAResourceHealth", 1h);
    ASSERT_TRUE(eventually([&] { return wrong.opens() == 1 && !wrong.last_end().ok(); }));
    EXPECT_EQ(wrong.last_end().error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_EQ(wrong.messages(), 0u);
}

// A kubelet that never opens a stream: everything else works and publishing costs nothing
// that grows; streams beyond the bound are refused and the others go on.
TEST_F(DraHealthTest, NoStreamIsFineAndStreamsAreBounded) {
    opts_.health.max_streams = 2;
    start();
    for (int i = 0; i < 1000; ++i)
        servers_->publish_health({device("pci-0000-01-00-0", i % 2 ? "ok" : "failed", "x: y")});
    FakeDraKubelet k;
    auto r = k.prepare(opts_.dra_endpoint, {{"uid-1", "ns", "claim"}});
    ASSERT_TRUE(r.all_ok({{"uid-1", "ns", "claim"}})) << r.status.error_message();
    EXPECT_EQ(servers_->health_stats().messages, 0u);

    FakeHealthWatch a(opts_.dra_endpoint, vfiod::test::kHealthV1, 1h);
    FakeHealthWatch b(opts_.dra_endpoint, vfiod::test::kHealthV1, 1h);
    ASSERT_TRUE(eventually([&] { return a.open_now() && b.open_now(); }));
    FakeHealthWatch c(opts_.dra_endpoint, vfiod::test::kHealthV1, 1h);
    ASSERT_TRUE(eventually([&] { return c.opens() == 1 && !c.last_end().ok(); }));
    EXPECT_EQ(c.last_end().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(servers_->health_stats().refused, 1u);
    EXPECT_EQ(a.health(kNode, "pci-0000-01-00-0"), FakeHealthWatch::Healthy);  // the last one
}

// Shutdown with a stream open ends it (UNAVAILABLE) within the server's deadline; a new start
// serves streams again.
TEST_F(DraHealthTest, ShutdownEndsOpenStreamsAndARestartServesAgain) {
    start();
    servers_->publish_health({device("pci-0000-01-00-0", "ok", "")});
    watch();
    ASSERT_TRUE(eventually([&] { return watch_->open_now(); }));
    const auto t0 = std::chrono::steady_clock::now();
    servers_->shutdown();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    ASSERT_TRUE(eventually([&] { return !watch_->open_now() && watch_->opens() >= 1; }));
    EXPECT_EQ(servers_->health_stats().open, 0u);

    std::string err;
    ASSERT_TRUE(servers_->start(&err)) << err;
    servers_->publish_health({device("pci-0000-01-00-0", "failed", "gone: x")});
    EXPECT_TRUE(
        eventually([&] { return health("pci-0000-01-00-0") == FakeHealthWatch::Unhealthy; }));
}

// A kubelet that opens a stream and never reads it: the plugin's write to it stays in flight
// (4,080 devices are far beyond the window), later states wait as one, a reading stream beside
// it gets every change, and shutdown still ends within the server's deadline.
TEST_F(DraHealthTest, AStreamNeverReadHoldsOneWriteAndBlocksNothing) {
    opts_.health.resend = 1h;  // only the changes: each write counted
    start();
    std::vector<DraDevice> many;
    for (int i = 0; i < 4080; ++i) {
        char name[32];
        std::snprintf(name, sizeof name, "pci-0000-%02x-%02x-%d", 0x10 + i / 64, i % 64 / 8 * 4,
                      i % 8);
        many.push_back(device(name, "degraded", "aer-correctable: " + std::to_string(i) +
                                                    " since start"));
    }
    servers_->publish_health(many);
    FakeHealthWatch stuck(opts_.dra_endpoint, vfiod::test::kHealthV1, 1h, false);
    FakeHealthWatch live(opts_.dra_endpoint, vfiod::test::kHealthV1, 1h);
    ASSERT_TRUE(eventually([&] { return live.last_size() == 4080; }));
    // Writes to the stuck stream go on until its window is full (some MB: flow control, not
    // ours), then stop: one stays in flight, and what comes meanwhile waits as one state.
    auto change = [&](int rounds) {
        for (int i = 0; i < rounds; ++i) {
            many[0].health = {i % 2 ? "ok" : "failed", "gone: x"};
            servers_->publish_health(many);
            std::this_thread::sleep_for(50ms);
        }
        EXPECT_TRUE(eventually([&] {
            return live.health(kNode, many[0].name) == FakeHealthWatch::Healthy;
        }));
        std::this_thread::sleep_for(200ms);
        return servers_->health_stats().messages - live.messages();  // the stuck stream's
    };
    const auto stuck_before = change(40);
    const auto stuck_after = change(20);
    EXPECT_EQ(stuck_after, stuck_before) << "the stuck stream kept taking writes";
    EXPECT_LT(stuck_after, 40u);
    EXPECT_EQ(stuck.messages(), 0u);
    const auto t0 = std::chrono::steady_clock::now();
    servers_->shutdown();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_EQ(servers_->health_stats().open, 0u);
}

}  // namespace
