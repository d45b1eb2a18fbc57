// What the vfiod-dra-plugin benchmarks share (dra_plugin_bench, dra_mdev_bench): a private bus,
// the fake API server with this node, vfiod (the fake-kernel build or the stand-in) and the
// plugin; the API server's write log; and the latency of a change, from the time the plugin
// was told to the first slice write that shows it.
#pragma once

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dra_cluster.hpp"
#include "fake_apiserver.hpp"
#include "fake_dra_kubelet.hpp"
#include "fake_vfiod_peer.hpp"
#include "plugin_env.hpp"
#include "proc_stats.hpp"

namespace vfiod::bench {

using namespace vfiod::test;
using namespace std::chrono_literals;

// Host paths as the kubelet names them; the plugin finds them under --root.
inline constexpr char kRegistrarDir[] = "/var/lib/kubelet/plugins_registry";
inline constexpr char kPluginDir[] = "/var/lib/kubelet/plugins/vfio.vfiod.io";
inline constexpr char kCdiDir[] = "/var/run/cdi";
inline constexpr char kStateDir[] = "/var/lib/vfiod-dra-plugin";

// --smoke (the `bench` suite, CI): every part with few repetitions and a 1 s idle window,
// every answer checked, no timing judged.
inline bool g_smoke = false;
inline int reps(int n) { return g_smoke ? std::max(n / 10, 2) : n; }

// A private bus, the fake API server with this node, vfiod (the fake-kernel build or the
// stand-in) and the plugin.
struct World {
    PluginEnv env;
    FakeApiServer api;
    FakeVfiodPeer peer;
    Proc vfiod, plugin;
    FakeDraKubelet kubelet;
    std::string root;

    ~World() {
        plugin.stop();
        peer.stop();
        vfiod.stop();
        api.stop();
        env.bus.stop();
        if (!failed)
            std::filesystem::remove_all(env.work);
    }
    bool fail(const char* what) {
        failed = true;
        std::fprintf(stderr, "%s; logs in %s\n", what, env.work.c_str());
        return false;
    }
    bool start_api(std::vector<std::string> api_args = {}) {
        if (!env.start_bus())
            return fail("no private bus");
        if (!api.start(env.work + "/api", api_args))
            return fail("the fake API server did not start");
        return add_this_node(api).ok() || fail("the Node was not added");
    }
    bool start_fake_vfiod(const char* scenario, const char* config) {
        spit(env.work + "/vfiod.toml", config);
        root = env.start_fake_vfiod(&vfiod, scenario, env.work + "/vfiod.toml", 60s);
        return !root.empty() || fail("vfiod did not get ready");
    }
    bool start_peer(std::vector<FakeVfiodPeer::Function> fns) {
        root = env.work + "/root";
        std::filesystem::create_directories(root + "/dev/vfio");
        spit(root + "/dev/vfio/vfio", "");
        for (const auto& f : fns)
            spit(root + "/dev/vfio/" + std::to_string(f.group), "");
        peer.set_inventory(std::move(fns));
        return peer.start() || fail("the stand-in vfiod did not start");
    }
    void start_plugin() {
        plugin = Proc({VFIOD_DRA_PLUGIN, "--node-name", kNode, "--driver-name", kDriver, "--root",
                       root, "--registrar-dir", kRegistrarDir, "--plugin-dir", kPluginDir,
                       "--cdi-dir", kCdiDir, "--state-dir", kStateDir, "--kubeconfig",
                       api.kubeconfig()},
                      env.work + "/plugin.log");
    }
    bool publishes(const std::set<std::string>& names, std::chrono::seconds t) {
        return eventually([&] { return pool_settled(api, names); }, t) ||
               fail("the pool never settled on the devices expected");
    }
    bool registered() {
        std::string err;
        DraPluginInfo info;
        if (!eventually([&] {
                return kubelet.register_plugin(root + kRegistrarDir + "/" + kDriver + "-reg.sock",
                                               &info, &err, root);
            }, 20s))
            return fail(("not registered: " + err).c_str());
        kubelet.keep_connection(kubelet.dra_socket());
        return true;
    }

    bool failed = false;
};

// The fake API server's write log (DIR/writes.jsonl), read from its end when made. One per
// change measured: a read takes every entry then complete, and what follows a match is dropped.
class WriteLog {
public:
    explicit WriteLog(std::string path) : path_(std::move(path)) {
        std::ifstream f(path_, std::ios::ate);
        offset_ = f ? static_cast<size_t>(f.tellg()) : 0;
    }
    // The first slice write (POST or PUT of a ResourceSlice) since then for which `pred(slice
    // name, its devices)` holds; the time the server logged it. nullopt after `timeout`.
    using Pred = std::function<bool(const std::string&, const std::set<std::string>&)>;
    std::optional<double> first_slice(const Pred& pred, std::chrono::milliseconds timeout) {
        return first_body([&](const nlohmann::json& body) {
            std::set<std::string> devices;
            for (const auto& d : body["spec"].value("devices", nlohmann::json::array()))
                devices.insert(d.value("name", ""));
            return pred(body["metadata"].value("name", ""), devices);
        }, timeout);
    }
    // The same, `pred` given the slice written whole.
    std::optional<double> first_body(const std::function<bool(const nlohmann::json&)>& pred,
                                     std::chrono::milliseconds timeout) {
        std::optional<double> at;
        eventually([&] {
            for (const nlohmann::json& e : fresh()) {
                const std::string method = e.value("method", "");
                if ((method != "PUT" && method != "POST") || !e["body"].is_object() ||
                    e["body"].value("kind", "") != "ResourceSlice")
                    continue;
                if (pred(e["body"])) {
                    at = e.value("time", 0.0);
                    return true;
                }
            }
            return false;
        }, timeout);
        return at;
    }

    // Once writes have come and then none for `quiet`: the last one's logged time (nullopt if
    // none came within `timeout`). Reads only the log, so the server does no work for it.
    std::optional<double> last_when_quiet(std::chrono::milliseconds quiet,
                                          std::chrono::milliseconds timeout) {
        std::optional<double> last;
        auto changed = std::chrono::steady_clock::now();
        auto quiet_now = [&] {
            return last && std::chrono::steady_clock::now() - changed >= quiet;
        };
        eventually([&] {
            for (const nlohmann::json& e : fresh()) {
                last = e.value("time", 0.0);
                changed = std::chrono::steady_clock::now();
            }
            return quiet_now();
        }, timeout);
        return quiet_now() ? last : std::nullopt;
    }

private:
    // The entries completed since the last read, parsed (a line still being written waits).
    std::vector<nlohmann::json> fresh() {
        std::ifstream f(path_);
        f.seekg(static_cast<std::streamoff>(offset_));
        std::string rest((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        std::vector<nlohmann::json> out;
        size_t pos = 0;
        for (size_t nl; (nl = rest.find('\n', pos)) != std::string::npos; pos = nl + 1) {
            nlohmann::json e = nlohmann::json::parse(rest.substr(pos, nl - pos), nullptr, false);
            if (e.is_object())
                out.push_back(std::move(e));
        }
        offset_ += pos;
        return out;
    }

    std::string path_;
    size_t offset_ = 0;
};

// The slice of the node's pool that lists `device` ("" when none does).
inline std::string slice_of(FakeApiServer& api, const std::string& device) {
    for (const auto& s : node_slices(api).value_or(std::vector<nlohmann::json>{}))
        for (const auto& d : s["spec"].value("devices", nlohmann::json::array()))
            if (d.value("name", "") == device)
                return s["metadata"].value("name", "");
    return "";
}

// `count` changes of `device` (reps(count)), withdrawn (even) and back (odd), on a pool of
// `all` devices.
// `change(release)` makes one and answers the wall-clock time the plugin was told (nullopt:
// failed). Each latency runs from then to the first slice write that shows the change: for a
// release, the slice that listed the device written without it; for a bind, a slice with it.
// The pool settles before the next change, so no write is taken for a later change's.
inline std::vector<double> change_latencies(
    World& w, const std::string& device, const std::set<std::string>& all,
    const std::function<std::optional<double>(bool)>& change, int count = 200) {
    std::set<std::string> without = all;
    without.erase(device);
    std::vector<double> lat;
    for (int i = 0; i < reps(count); ++i) {
        const bool release = i % 2 == 0;
        const std::string holder = release ? slice_of(w.api, device) : "";
        WriteLog log(w.api.dir() + "/writes.jsonl");
        std::optional<double> told = change(release);
        if (!told) {
            w.fail("a change was not made");
            return {};
        }
        auto written = log.first_slice([&](const std::string& slice, const auto& devices) {
            return release ? slice == holder && !devices.count(device) : devices.count(device) > 0;
        }, 5s);
        if (!written || !w.publishes(release ? without : all, 10s)) {
            w.fail("no slice write showed the change");
            return {};
        }
        lat.push_back((*written - *told) * 1000);
    }
    return lat;
}

// The even changes are withdrawals ("releases" for a function), the odd ones publications.
inline void print_latencies(const char* what, const std::vector<double>& lat,
                            const char* kinds[2] = nullptr) {
    static const char* kBindRelease[2] = {"binds", "releases"};
    kinds = kinds ? kinds : kBindRelease;
    std::vector<double> by_kind[2];  // binds, releases
    for (size_t i = 0; i < lat.size(); ++i)
        by_kind[i % 2 == 0].push_back(lat[i]);
    auto [median, p99, max] = summary(lat);
    std::printf("%s over %zu changes: median %.2f ms, p99 %.2f ms, max %.2f ms (goal: median <= "
                "50, p99 <= 200: %s)\n",
                what, lat.size(), median, p99, max,
                g_smoke                          ? "not judged with --smoke"
                : median <= 50 && p99 <= 200 ? "met"
                                             : "MISSED");
    for (int k : {0, 1}) {
        auto [m, p, x] = summary(by_kind[k]);
        std::printf("  %zu %s: median %.2f ms, p99 %.2f ms, max %.2f ms\n", by_kind[k].size(),
                    kinds[k], m, p, x);
    }
}

}  // namespace vfiod::bench
