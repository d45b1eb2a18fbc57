// The SlicePublisher (dra-plugin/slices.hpp) against the fake API server with the real libcurl
// client: what an earlier run left is cleaned up, failures are retried without spinning, garbage
// and dropped answers are survived, and slices a kubelet deletes come back. The scenario test
// (test_dra_scenarios) covers the publisher inside the plugin; this one drives its faults.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "devices.hpp"
#include "dra_fixtures.hpp"
#include "eventually.hpp"
#include "fake_apiserver.hpp"
#include "kube_api.hpp"
#include "log_capture.hpp"
#include "slices.hpp"

namespace vfiod::dra {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using test::dra_device;

const std::string kSlices = "/apis/resource.k8s.io/v1/resourceslices";
const std::string kDriver = "vfio.vfiod.io";

// Generous: the goal is 1 s (DESIGN §10); a loaded two-core CI machine fails only at 5x.
constexpr auto kLimit = 5s;

bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit = kLimit) {
    return test::eventually(cond, limit);
}

// A slice as an earlier run (or someone) left it for `node`.
json planted(const std::string& name, const std::string& node, int64_t generation) {
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceSlice"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"driver", kDriver},
              {"nodeName", node},
              {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", 1}}},
              {"devices", json::array({{{"name", "pci-0000-09-00-0"}}})}}}};
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class PublisherTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = ::testing::TempDir() + "dra-publisher-" + std::to_string(getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
        std::filesystem::remove_all(dir_);
        ASSERT_TRUE(server_.start(dir_));
        ASSERT_TRUE(server_.add_node("n1"));
        std::string err;
        api_ = make_curl_api(server_.endpoint(), &err);
        ASSERT_TRUE(api_) << err;
    }
    void TearDown() override {
        if (publisher_)
            publisher_->stop();
        publisher_.reset();
        if (HasFailure())
            std::cerr << "--- API server ---\n" << server_.stderr_log();
        server_.stop();
        std::filesystem::remove_all(dir_);
    }

    // The API server again, started with `args` (and Node n1).
    void restart_server(const std::vector<std::string>& args) {
        server_.stop();
        std::filesystem::remove_all(dir_);
        ASSERT_TRUE(server_.start(dir_, args));
        ASSERT_TRUE(server_.add_node("n1"));
        std::string err;
        api_ = make_curl_api(server_.endpoint(), &err);
        ASSERT_TRUE(api_) << err;
    }

    void start_publisher(std::chrono::milliseconds backoff_min = 50ms,
                         std::chrono::milliseconds backoff_max = 2s) {
        SlicePublisher::Options o{kDriver, "n1"};
        o.request_timeout = 3s;
        o.backoff_min = backoff_min;
        o.backoff_max = backoff_max;
        publisher_ = std::make_unique<SlicePublisher>(*api_, o);
        publisher_->start();
    }

    // Every watch of the slices answered as kube-apiserver answers one from a compacted
    // resourceVersion (200, then ERROR 410), or with an HTTP 410; then how long the publisher
    // took to list six times. It may list again at once after the first 410, then backs off
    // (100, 200, 400, 800 ms): 1.5 s at least.
    std::chrono::milliseconds six_lists_under(const json& fault) {
        EXPECT_EQ(server_.control("POST", "/_fake/faults", fault.dump()).status, 201);
        auto t0 = Clock::now();
        start_publisher(100ms, 30s);
        EXPECT_TRUE(wait_for([&] { return publisher_->stats().lists >= 6; }, 20s))
            << publisher_->stats().lists << " lists";
        return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    }

    // The slices of `node` on the server, by name.
    std::map<std::string, json> slices(const std::string& node = "n1") {
        ApiResponse r = server_.control(
            "GET", kSlices + "?fieldSelector=" + query_escape("spec.nodeName=" + node));
        std::map<std::string, json> out;
        if (!r.ok())
            return out;
        json list = json::parse(r.body, nullptr, false);
        if (list.is_discarded() || !list.contains("items"))
            return out;
        for (auto& item : list["items"])
            out[item["metadata"]["name"].get<std::string>()] = item;
        return out;
    }

    // The pool as the scheduler takes it: every slice at one generation, resourceSliceCount
    // slices, and exactly `devices` in them.
    bool pool_is(const std::set<std::string>& devices) {
        auto all = slices();
        if (all.empty())
            return devices.empty();
        std::set<int64_t> generations;
        std::set<std::string> names;
        for (auto& [name, s] : all) {
            const json& g = s["spec"]["pool"]["generation"];
            if (!g.is_number_integer())
                return false;  // one of a broken server's slices is still there
            generations.insert(g.get<int64_t>());
            if (s["spec"]["pool"]["resourceSliceCount"].get<size_t>() != all.size())
                return false;
            for (auto& d : s["spec"]["devices"])
                names.insert(d["name"].get<std::string>());
        }
        return generations.size() == 1 && names == devices;
    }

    // The devices of the pool's slices by name, each with the slice that holds it.
    std::map<std::string, std::string> holders() {
        std::map<std::string, std::string> out;
        for (auto& [name, s] : slices())
            for (auto& d : s["spec"]["devices"])
                out[d["name"].get<std::string>()] = name;
        return out;
    }

    // The taints of `device` on the server; null when it carries none (no "taints" at all) or
    // is not there.
    json taints_of(const std::string& device) {
        for (auto& [name, s] : slices())
            for (auto& d : s["spec"]["devices"])
                if (d["name"] == device)
                    return d.value("taints", json());
        return json();
    }

    // Writes to the slices (any status) from write number `from` on.
    size_t slice_writes(size_t from = 0) {
        auto all = server_.writes();
        size_t n = 0;
        for (size_t i = from; i < all.size(); ++i)
            n += all[i]["path"].get<std::string>().rfind(kSlices, 0) == 0;
        return n;
    }

    // Waits until the publisher is in sync, then `quiet` without a write; false if it wrote.
    bool settled(std::chrono::milliseconds quiet = 700ms) {
        if (!wait_for([&] { return publisher_->stats().in_sync; }))
            return false;
        size_t before = server_.writes().size();
        std::this_thread::sleep_for(quiet);
        return server_.writes().size() == before && publisher_->stats().in_sync;
    }

    // Every slice of the pool at `generation`, and no write refused on the way.
    void expect_written_at(int64_t generation) {
        for (auto& [name, s] : slices())
            EXPECT_EQ(s["spec"]["pool"]["generation"], generation) << name;
        for (auto& w : server_.writes())
            EXPECT_LT(w["status"].get<int>(), 400) << w.dump();
    }

    std::string dir_;
    test::FakeApiServer server_;
    std::unique_ptr<KubeApi> api_;
    std::unique_ptr<SlicePublisher> publisher_;
};

TEST_F(PublisherTest, AnEarlierRunsSlicesAreReplacedAndAnotherNodesKept) {
    ASSERT_EQ(server_.control("POST", kSlices, planted("n1-leftover", "n1", 7).dump()).status,
              201);
    ASSERT_EQ(server_.control("POST", kSlices, planted("n2-theirs", "n2", 3).dump()).status, 201);
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }))
        << slices().size() << " slice(s)";
    auto mine = slices();
    EXPECT_EQ(mine.count("n1-leftover"), 0u);
    for (auto& [name, s] : mine) {
        // Above what the earlier run wrote: consumers take the highest generation.
        EXPECT_GT(s["spec"]["pool"]["generation"].get<int64_t>(), 7) << name;
        ASSERT_EQ(s["metadata"]["ownerReferences"].size(), 1u) << name;
        EXPECT_EQ(s["metadata"]["ownerReferences"][0]["kind"], "Node");
    }
    EXPECT_EQ(slices("n2").count("n2-theirs"), 1u);
}

TEST_F(PublisherTest, FailedWritesAreRetriedWithBackoff) {
    ASSERT_TRUE(server_.fault("POST", kSlices, "500", 2));
    ASSERT_TRUE(server_.fault("POST", kSlices, "429", 1));
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }, 10s));
    EXPECT_GE(publisher_->stats().failures, 3u);
    // Three failures, then one create: no write loop.
    size_t posts = 0;
    for (auto& w : server_.writes())
        posts += w["method"] == "POST" && w["path"].get<std::string>().rfind(kSlices, 0) == 0;
    EXPECT_LE(posts, 6u);
}

TEST_F(PublisherTest, GarbageAndDroppedAnswersAreSurvived) {
    ASSERT_TRUE(server_.fault("GET", kSlices, "garbage", 1));
    ASSERT_TRUE(server_.fault("GET", kSlices, "drop", 1));
    ASSERT_TRUE(server_.fault("PUT", kSlices, "drop", 1));
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }, 10s));
    // A change after the faults: the update goes through too.
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:03:00.0", 15)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-03-00-0"}); }, 10s));
}

TEST_F(PublisherTest, SlicesAKubeletDeletesComeBack) {
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }));
    // What a restarted kubelet sends: delete the node's slices.
    auto t0 = Clock::now();
    ApiResponse r = server_.control(
        "DELETE", kSlices + "?fieldSelector=" + query_escape("spec.nodeName=n1"));
    ASSERT_TRUE(r.ok()) << r.describe();
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }));
    std::cout << "slices back after "
              << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
              << " ms\n";
}

TEST_F(PublisherTest, AReleaseWithdrawsTheDevice) {
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }));
    int64_t before = slices().begin()->second["spec"]["pool"]["generation"].get<int64_t>();
    publisher_->publish({dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-02-00-0"}); }));
    EXPECT_GT(slices().begin()->second["spec"]["pool"]["generation"].get<int64_t>(), before);
    // Nothing left to publish: the pool's slices go.
    publisher_->publish({});
    ASSERT_TRUE(wait_for([&] { return slices().empty(); }));
}

TEST_F(PublisherTest, AnExpiredWatchStormBacksOff) {
    auto took = six_lists_under({{"method", "GET"}, {"path_prefix", kSlices}, {"watch", true},
                                 {"action", "expired"}, {"count", -1}});
    EXPECT_GE(took, 1500ms);
    std::cout << "6 lists in " << took.count() << " ms\n";
}

// A bookmark before each ERROR 410 does not make the watch healthy: it still ends broken.
TEST_F(PublisherTest, ABookmarkBeforeEachExpiredWatchStillBacksOff) {
    auto took =
        six_lists_under({{"method", "GET"}, {"path_prefix", kSlices}, {"watch", true},
                         {"action", "expired"}, {"bookmark", true}, {"count", -1}});
    EXPECT_GE(took, 1500ms);
}

TEST_F(PublisherTest, AnHttp410StormBacksOff) {
    auto took = six_lists_under({{"method", "GET"}, {"path_prefix", kSlices}, {"watch", true},
                                 {"action", "410"}, {"count", -1}});
    EXPECT_GE(took, 1500ms);
}

// A slice of the pool at generation 2^63-1 (a valid int64): no generation is above it, so the
// pool's slices are deleted and it starts again at 1, never overflowing to a negative one.
TEST_F(PublisherTest, APoolAtTheTopGenerationStartsAgainAtOne) {
    constexpr int64_t kTop = std::numeric_limits<int64_t>::max();
    ASSERT_EQ(server_.control("POST", kSlices, planted("n1-vfio.vfiod.io-0", "n1", kTop).dump())
                  .status,
              201);
    ASSERT_EQ(server_.control("POST", kSlices, planted("n1-other", "n1", kTop).dump()).status,
              201);
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }))
        << server_.stderr_log();
    expect_written_at(1);
    // The server shows the pool as soon as the slices are written, which may be before the
    // publisher has taken in its own answer: its generation is waited for, not read at once.
    EXPECT_TRUE(wait_for([&] { return publisher_->stats().generation == 1; }))
        << publisher_->stats().generation;
    // And on from there.
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }));
    expect_written_at(2);
}

// The way out refused (403 on the first delete): tried again after the refusal's wait, and the
// pool is published at 1 all the same.
TEST_F(PublisherTest, AClearedPoolWhoseDeleteIsRefusedIsRetried) {
    ASSERT_EQ(server_.control("POST", kSlices,
                              planted("n1-top", "n1", std::numeric_limits<int64_t>::max()).dump())
                  .status,
              201);
    ASSERT_TRUE(server_.fault("DELETE", kSlices, "403", 1));
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }, 10s));
    EXPECT_EQ(slices().begin()->second["spec"]["pool"]["generation"], 1);
    size_t refused = 0;
    for (auto& w : server_.writes())
        refused += w["status"] == 403;
    EXPECT_EQ(refused, 1u);
}

// Generations no API server can hold (a float, a string, a negative number, one past int64)
// are no generation: nothing crashes or overflows, the pool is published above the real ones.
TEST_F(PublisherTest, GenerationsNoApiServerHoldsAreIgnored) {
    const std::vector<json> odd = {json(1e300), json("9223372036854775807"), json(-5),
                                   json(std::numeric_limits<uint64_t>::max()),
                                   json(uint64_t(1) << 63), json(nullptr), json(true)};
    for (size_t i = 0; i < odd.size(); ++i) {
        json s = planted("n1-odd-" + std::to_string(i), "n1", 0);
        s["spec"]["pool"]["generation"] = odd[i];
        ASSERT_TRUE(server_.control("POST", "/_fake/slices", s.dump()).ok()) << i;
    }
    ASSERT_EQ(server_.control("POST", kSlices, planted("n1-real", "n1", 41).dump()).status, 201);
    start_publisher();
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }));
    expect_written_at(42);
}

// The kubelet rotates the projected token after the API server stopped taking the old one: the
// 401 that came first makes the writer wait 30 s, but the new token is used at once. Twice, so
// that the second rotation is seen after the first one's directory was deleted.
TEST_F(PublisherTest, ARotatedTokenIsUsedAtOnce) {
    test::ProjectedToken sa(dir_ + "/sa");
    sa.write(read_file(server_.token_file()), "..2026_12_04_21_00_00.123");
    ApiEndpoint ep = server_.endpoint();
    ep.token_file = sa.path();
    std::string err;
    api_ = make_curl_api(ep, &err);
    ASSERT_TRUE(api_) << err;
    start_publisher(50ms, 30s);
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0"}); }));
    const char* stamps[] = {"..2026_12_04_22_00_00.456", "..2026_12_04_23_00_00.789"};
    const std::string addresses[] = {"0000:02:00.0", "0000:03:00.0"};
    for (int round = 0; round < 2; ++round) {
        ASSERT_TRUE(server_.control("POST", "/_fake/rotate-token").ok());
        uint64_t failures = publisher_->stats().failures;
        publisher_->publish({dra_device("0000:01:00.0", 13), dra_device(addresses[round], 14)});
        ASSERT_TRUE(wait_for([&] { return publisher_->stats().failures > failures; }))
            << "round " << round << ": the write with the old token was not refused";
        sa.write(read_file(server_.token_file()), stamps[round]);
        auto t0 = Clock::now();
        ASSERT_TRUE(wait_for([&] {
            return pool_is({"pci-0000-01-00-0", test::dra_device(addresses[round], 14).name});
        })) << "round " << round;
        std::cout << "round " << round << ": published "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0)
                         .count()
                  << " ms after the rotation\n";
    }
}

// A refusal (here a 403) waits 30 s, but other devices to publish may cure it: they are written
// a second after the refusal, and an inventory that keeps changing is tried once a second.
TEST_F(PublisherTest, AnInventoryChangeRetriesARefusalAfterASecond) {
    auto refused_writes = [&] {
        std::vector<double> times;
        for (auto& w : server_.writes())
            if (w["status"] == 403)
                times.push_back(w["time"].get<double>());
        return times;
    };
    start_publisher(50ms, 30s);
    ASSERT_TRUE(server_.fault("POST", kSlices, "403", 1));
    publisher_->publish({dra_device("0000:01:00.0", 13)});
    ASSERT_TRUE(wait_for([&] { return refused_writes().size() == 1; }));
    publisher_->publish({dra_device("0000:01:00.0", 13), dra_device("0000:02:00.0", 14)});
    ASSERT_TRUE(wait_for([&] { return pool_is({"pci-0000-01-00-0", "pci-0000-02-00-0"}); }));
    double refused = refused_writes().at(0), next = 0;
    for (auto& w : server_.writes())
        if (w["method"] == "POST" && w["time"].get<double>() > refused && next == 0)
            next = w["time"].get<double>();
    EXPECT_GE(next - refused, 1.0);

    // Refused every time, while the inventory changes as fast as a test can publish.
    ASSERT_TRUE(server_.fault("*", kSlices, "403", -1));
    unsigned group = 20;
    ASSERT_TRUE(wait_for(
        [&] {
            publisher_->publish(
                {dra_device("0000:01:00.0", 13), dra_device("0000:04:00.0", ++group)});
            return refused_writes().size() >= 5;
        },
        20s));
    auto times = refused_writes();
    for (size_t i = 2; i < times.size(); ++i)
        EXPECT_GE(times[i] - times[i - 1], 1.0) << i;
}

// DESIGN §13: a failed device stays published, tainted vfiod.io/unhealthy=<code>:NoSchedule;
// the timeAdded the server adds makes no second write; a count moving in its reason (or
// another device going degraded) writes nothing; cleared, it loses the taint.
TEST_F(PublisherTest, AFailedDeviceIsTaintedUntilCleared) {
    const std::string a = "pci-0000-01-00-0";
    DraDevice fine = dra_device("0000:01:00.0", 13), other = dra_device("0000:02:00.0", 14);
    start_publisher();
    publisher_->publish({fine, other});
    ASSERT_TRUE(wait_for([&] { return pool_is({a, "pci-0000-02-00-0"}); }));
    ASSERT_TRUE(settled());
    EXPECT_TRUE(taints_of(a).is_null());

    DraDevice failed = fine;
    failed.health = {"failed", "aer-fatal: recovery failed, 1 since start"};
    const size_t from = server_.writes().size();
    publisher_->publish({failed, other});
    ASSERT_TRUE(wait_for([&] { return !taints_of(a).is_null(); })) << taints_of(a).dump();
    json t = taints_of(a);
    ASSERT_EQ(t.size(), 1u) << t.dump();
    EXPECT_EQ(t[0]["key"], "vfiod.io/unhealthy");
    EXPECT_EQ(t[0]["value"], "aer-fatal");
    EXPECT_EQ(t[0]["effect"], "NoSchedule");
    EXPECT_TRUE(t[0].contains("timeAdded")) << t.dump();  // the server's: no rewrite for it
    EXPECT_TRUE(pool_is({a, "pci-0000-02-00-0"}));
    EXPECT_TRUE(taints_of("pci-0000-02-00-0").is_null());
    ASSERT_TRUE(settled());
    EXPECT_EQ(slice_writes(from), 1u);  // the one slice, once

    // The count moves, the code stays; the other device degrades, then goes unknown: nothing.
    const auto stats = publisher_->stats();
    failed.health.reason = "aer-fatal: recovery failed, 2 since start";
    other.health = {"degraded", "aer-correctable: 3 since start"};
    publisher_->publish({failed, other});
    other.health = {"unknown", "no-aer"};
    publisher_->publish({failed, other});
    EXPECT_TRUE(settled());
    EXPECT_EQ(publisher_->stats().updates, stats.updates);
    EXPECT_EQ(publisher_->stats().generation, stats.generation);
    EXPECT_EQ(taints_of(a), t);

    // Another code is another taint.
    failed.health = {"failed", "gone: config space reads all ones"};
    publisher_->publish({failed, other});
    ASSERT_TRUE(wait_for([&] { return taints_of(a)[0].value("value", "") == "gone"; }));

    // Cleared (an operator's Bind): no taints key at all.
    publisher_->publish({fine, other});
    ASSERT_TRUE(wait_for([&] { return taints_of(a).is_null(); })) << taints_of(a).dump();
    EXPECT_TRUE(pool_is({a, "pci-0000-02-00-0"}));
    EXPECT_TRUE(settled());
    for (auto& w : server_.writes())
        EXPECT_LT(w["status"].get<int>(), 400) << w.dump();
}

// 65 devices: a slice of 64 and one of 1. A device of the full slice fails: the API takes a
// tainted slice of 64 (it refuses 65), and no device moves to another slice.
TEST_F(PublisherTest, ATaintInAFullSliceKeepsThePoolsCut) {
    std::vector<DraDevice> devices;
    for (unsigned i = 0; i < 65; ++i) {
        char address[16];
        std::snprintf(address, sizeof address, "0000:%02x:00.0", i + 1);
        devices.push_back(dra_device(address, 100 + i));
    }
    start_publisher();
    publisher_->publish(devices);
    ASSERT_TRUE(wait_for([&] { return holders().size() == 65 && slices().size() == 2; }));
    ASSERT_TRUE(settled());
    const auto cut = holders();
    devices[10].health = {"failed", "quarantine: its driver did not take it"};
    publisher_->publish(devices);
    ASSERT_TRUE(wait_for([&] { return !taints_of(devices[10].name).is_null(); }, 10s));
    ASSERT_TRUE(settled());
    EXPECT_EQ(holders(), cut);
    EXPECT_EQ(slices()[cut.at(devices[10].name)]["spec"]["devices"].size(), 64u);
    EXPECT_EQ(taints_of(devices[10].name)[0]["value"], "quarantine");
    for (auto& w : server_.writes())
        EXPECT_LT(w["status"].get<int>(), 400) << w.dump();
}

// An API server with the DRADeviceTaints gate off drops the taint: the failed device is
// withdrawn instead, said once, and nothing loops; a second failure is withdrawn at once; a
// cleared device comes back.
TEST_F(PublisherTest, AServerThatDropsTaintsGetsTheFailedDeviceWithdrawn) {
    restart_server({"--drop-device-taints"});
    test::LogCapture log;
    const std::string a = "pci-0000-01-00-0", b = "pci-0000-02-00-0", c = "pci-0000-03-00-0";
    DraDevice da = dra_device("0000:01:00.0", 13), db = dra_device("0000:02:00.0", 14),
              dc = dra_device("0000:03:00.0", 15);
    start_publisher();
    publisher_->publish({da, db, dc});
    ASSERT_TRUE(wait_for([&] { return pool_is({a, b, c}); }));
    ASSERT_TRUE(settled());
    EXPECT_FALSE(publisher_->stats().taints_dropped);

    size_t from = server_.writes().size();
    da.health = {"failed", "aer-fatal: recovery failed"};
    publisher_->publish({da, db, dc});
    ASSERT_TRUE(wait_for([&] { return pool_is({b, c}); })) << slices().size();
    ASSERT_TRUE(settled(1500ms));
    EXPECT_TRUE(publisher_->stats().taints_dropped);
    // The write the server dropped the taint from, and the one without the device.
    EXPECT_EQ(slice_writes(from), 2u);
    auto said = [&] {
        size_t n = 0;
        for (auto& line : log.lines())
            n += line.find("dropped the device taints") != std::string::npos;
        return n;
    };
    EXPECT_EQ(said(), 1u);
    auto warning = log.first("dropped the device taints");
    ASSERT_TRUE(warning);
    EXPECT_NE(log.lines()[*warning].find("DRADeviceTaints"), std::string::npos);
    EXPECT_NE(log.lines()[*warning].find("withdrawn"), std::string::npos);

    // Another device fails: withdrawn at once, no taint tried.
    from = server_.writes().size();
    db.health = {"failed", "gone"};
    publisher_->publish({da, db, dc});
    ASSERT_TRUE(wait_for([&] { return pool_is({c}); }));
    ASSERT_TRUE(settled());
    EXPECT_EQ(slice_writes(from), 1u);
    EXPECT_EQ(said(), 1u);

    // Cleared: back, untainted.
    da.health = db.health = {"ok", ""};
    publisher_->publish({da, db, dc});
    ASSERT_TRUE(wait_for([&] { return pool_is({a, b, c}); }));
    EXPECT_TRUE(taints_of(a).is_null());
    EXPECT_TRUE(settled());
    EXPECT_EQ(said(), 1u);
}

}  // namespace
}  // namespace vfiod::dra
