// vfiod-device-plugin's figures (issue 12), measured, not asserted in timed tests:
//   1. latency from vfiod's PropertiesChanged (State bound/released, as this process receives
//      it) to the first ListAndWatch list at the fake kubelet that shows the change, over 200
//      state changes (goal: median <= 20 ms, p99 <= 100 ms). Both ends are taken for the change
//      in flight only: a signal time left over from the previous change of the same kind, read
//      when this process's bus thread had not yet received the new one, once made one
//      bind/release cycle (100-200 ms on a loaded machine) look like the plugin's latency;
//   2. the plugin's RSS serving 256 devices (goal <= 16 MiB);
//   3. idle for 10 s: log lines, CPU, and wakeups (context switches of all its threads);
//   4. vfiod frozen in the middle of a re-read (issue 23; a fake vfiod that holds the call): a
//      kubelet restart re-registered, 5 times, and SIGTERM with the read pending to exit
//      (goal: each <= 1 s; tests/integration asserts only 3 s);
//   5. issue 22, 4,000 objects (the tests' fake vfiod: 2,000 one-function groups of one
//      resource): the plugin's RSS serving them, and PropertiesChanged (State with its value)
//      -> the ListAndWatch list showing it, over 40 changes; then 10 groups removed one at a
//      time (InterfacesRemoved) -> the list without the device, and the whole reads they cost.
//      VFIOD_BENCH_PLUGIN=PATH measures another build of the plugin (main's, for the figure
//      before).
// VFIOD_BENCH_ONLY=frozen or =4000 runs measure 4 or 5 alone.
// Private bus, the test build of vfiod on the fake kernel, the real plugin binary, and the
// tests' fake kubelet. Run with `meson test -C build --benchmark device-plugin` or directly.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>

#include <sdbus-c++/sdbus-c++.h>

#include "dbus_client.hpp"
#include "fake_kubelet.hpp"
#include "fake_vfiod_peer.hpp"
#include "plugin_env.hpp"
#include "proc_stats.hpp"
#include "state_watch.hpp"

using namespace vfiod::test;
using namespace vfiod::bench;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const char kConfig[] = R"([daemon]
mode = "enforce"
[[device]]
selector = "8086:1533"
resource_name = "intel.com/I210"
)";
const char* const kRes = "intel.com/I210";


struct World {
    PluginEnv env;
    Proc vfiod, plugin;
    std::unique_ptr<FakeKubelet> kubelet;
    std::string root;

    // Ready when the kubelet has a list with `healthy` Healthy devices.
    bool start(const char* scenario, long healthy) {
        if (!env.start_bus())
            return false;
        spit(env.work + "/vfiod.toml", kConfig);
        root = env.start_fake_vfiod(&vfiod, scenario, env.work + "/vfiod.toml", 180s);
        if (root.empty())
            return false;
        kubelet = std::make_unique<FakeKubelet>(env.kubelet_dir, env.work + "/pods.sock");
        if (!kubelet->start())
            return false;
        plugin = Proc({VFIOD_DEVICE_PLUGIN, "--kubelet-dir", env.kubelet_dir, "--pod-resources",
                       env.work + "/pods.sock", "--root", root},
                      env.work + "/plugin.log");
        return eventually([&] {
            auto l = kubelet->latest(kRes);
            return std::count_if(l.health.begin(), l.health.end(), [](const auto& h) {
                       return h.second == "Healthy";
                   }) == healthy;
        }, 120s);
    }
    ~World() {
        plugin.stop();
        kubelet.reset();
        vfiod.stop();
        env.bus.stop();
        std::filesystem::remove_all(env.work);
    }
};

// The tests' fake vfiod publishing `functions` (each group bound, its /dev/vfio/N present), the
// fake kubelet and the plugin `binary`.
struct PeerWorld {
    PluginEnv env;
    FakeVfiodPeer peer;
    std::unique_ptr<FakeKubelet> kubelet;
    Proc plugin;

    bool start(std::vector<FakeVfiodPeer::Function> functions, const std::string& binary) {
        if (!env.start_bus())
            return false;
        std::string root = env.work + "/root";
        std::filesystem::create_directories(root + "/dev/vfio");
        for (const auto& f : functions)
            spit(root + "/dev/vfio/" + std::to_string(f.group), "");
        peer.set_inventory(std::move(functions));
        kubelet = std::make_unique<FakeKubelet>(env.kubelet_dir, env.work + "/pods.sock");
        if (!peer.start() || !kubelet->start())
            return false;
        plugin = Proc({binary, "--kubelet-dir", env.kubelet_dir, "--pod-resources",
                       env.work + "/pods.sock", "--root", root},
                      env.work + "/plugin.log");
        return true;
    }
    ~PeerWorld() {
        plugin.stop();
        if (kubelet)
            kubelet->stop();
        peer.stop();
        env.bus.stop();
        std::filesystem::remove_all(env.work);
    }
};

// Measure 4: the fake vfiod publishes two devices, serves them, then freezes mid-read.
bool frozen_vfiod() {
    PeerWorld w;
    if (!w.start({{"0000:03:00.0", 15, kRes}, {"0000:05:00.0", 16, kRes}}, VFIOD_DEVICE_PLUGIN))
        return false;
    FakeVfiodPeer& peer = w.peer;
    FakeKubelet& kubelet = *w.kubelet;
    Proc& plugin = w.plugin;
    auto registered = [&](size_t n) {
        return eventually([&] { return kubelet.registrations().size() >= n; }, 10s);
    };
    if (!registered(1))
        return false;
    peer.set_mode(FakeVfiodPeer::Mode::Freeze);
    peer.emit_changed(15);
    if (!eventually([&] { return peer.held() >= 1; }, 5s))
        return false;
    std::vector<double> restarts;
    for (size_t i = 2; i <= 6; ++i) {
        auto t0 = Clock::now();
        if (!kubelet.restart() || !registered(i))
            return false;
        restarts.push_back(ms(kubelet.registrations().back().at - t0));
    }
    std::sort(restarts.begin(), restarts.end());
    auto t0 = Clock::now();
    int code = plugin.stop(SIGTERM);
    double term = ms(Clock::now() - t0);
    std::printf("vfiod frozen mid-read: kubelet restart -> registered: median %.1f ms, max %.1f ms "
                "over %zu; SIGTERM -> exit %.1f ms, status %d (goal: each <= 1000 ms)\n",
                restarts[restarts.size() / 2], restarts.back(), restarts.size(), term, code);
    return restarts.back() <= 1000 && term <= 1000 && code == 0;
}

// Measure 5's removals: 10 groups dropped one at a time, as a Reload drops them (InterfacesRemoved
// for the function, then for the group). Time from the signal to the first list without the
// device; empty when one never came.
std::vector<double> removal_latencies(FakeVfiodPeer& peer, FakeKubelet& kubelet,
                                      const std::vector<std::string>& ids) {
    std::vector<double> lat;
    for (unsigned g = 1100; g < 1110; ++g) {  // groups the State changes leave alone
        auto t0 = Clock::now();
        peer.emit_removed(g);
        std::optional<Clock::time_point> at;
        auto gone = [&] {
            auto l = kubelet.latest(kRes);
            if (l.health.count(ids[g - 100]))
                return false;
            at = l.at;
            return true;
        };
        if (!eventually(gone, 10s))
            return {};
        lat.push_back(ms(*at - t0));
    }
    std::sort(lat.begin(), lat.end());
    return lat;
}

// Measure 5: 4,000 objects, one State change at a time.
bool at_4000_objects() {
    const char* other = std::getenv("VFIOD_BENCH_PLUGIN");
    const std::string binary = other ? other : VFIOD_DEVICE_PLUGIN;
    std::vector<FakeVfiodPeer::Function> fns;
    std::vector<std::string> ids;
    for (unsigned n = 0; n < 2000; ++n) {
        char addr[16];
        std::snprintf(addr, sizeof addr, "0000:%02x:%02x.0", n / 32 + 1, n % 32);
        fns.push_back({addr, 100 + n, kRes, "bound"});
        ids.push_back(addr);
    }
    PeerWorld w;
    if (!w.start(std::move(fns), binary))
        return false;
    FakeVfiodPeer& peer = w.peer;
    FakeKubelet& kubelet = *w.kubelet;
    Proc& plugin = w.plugin;
    auto shows = [&](const std::string& id, const char* health) {
        auto l = kubelet.latest(kRes);
        auto it = l.health.find(id);
        return it != l.health.end() && it->second == health ? std::optional(l.at) : std::nullopt;
    };
    if (!eventually([&] { return kubelet.latest(kRes).health.size() == 2000; }, 60s))
        return false;
    std::this_thread::sleep_for(1s);  // the first read's trim done
    long rss = status_kb(plugin.pid(), "VmRSS:"), hwm = status_kb(plugin.pid(), "VmHWM:");
    std::vector<double> lat;
    for (int i = 0; i < 40; ++i) {
        unsigned g = 100 + static_cast<unsigned>(i / 2);
        bool release = i % 2 == 0;
        const char* want = release ? "Unhealthy" : "Healthy";
        auto t0 = Clock::now();
        peer.emit_state(g, release ? "released" : "bound");
        std::optional<Clock::time_point> at;
        if (!eventually([&] { return (at = shows(ids[g - 100], want)).has_value(); }, 10s))
            return false;
        lat.push_back(ms(*at - t0));
    }
    std::sort(lat.begin(), lat.end());
    long rss_after = status_kb(plugin.pid(), "VmRSS:");
    std::printf("4,000 objects (%s): RSS %ld KiB serving them (peak %ld KiB), %ld KiB after 40 "
                "changes; PropertiesChanged -> ListAndWatch: median %.1f ms, max %.1f ms over "
                "%zu; %d inventory reads\n",
                other ? other : "this build", rss, hwm, rss_after, lat[lat.size() / 2],
                lat.back(), lat.size(), peer.reads());
    const int reads = peer.reads();
    auto removed = removal_latencies(peer, kubelet, ids);
    if (removed.empty())
        return false;
    std::printf("4,000 objects (%s): InterfacesRemoved -> ListAndWatch: median %.1f ms, max %.1f "
                "ms over %zu removed groups; %d inventory reads for them\n",
                other ? other : "this build", removed[removed.size() / 2], removed.back(),
                removed.size(), peer.reads() - reads);
    return true;
}

}  // namespace

int main() {
    // VFIOD_BENCH_ONLY=frozen or =4000: that measure alone.
    if (const char* only = std::getenv("VFIOD_BENCH_ONLY"))
        return (std::string(only) == "frozen" ? frozen_vfiod() : at_4000_objects()) ? 0 : 1;
    bool good = true;
    {
        World w;
        if (!w.start("k8s-host", 2)) {  // 04:00.0 is refused (enslaved to bond0)
            std::fprintf(stderr, "setup failed; logs in %s\n", w.env.work.c_str());
            return 1;
        }
        StateWatch watch(15);
        std::vector<double> lat, by_kind[2];  // all; binds, releases
        int early = 0;  // lists that reached the kubelet before this process had the signal
        for (int i = 0; i < 200; ++i) {
            bool release = i % 2 == 0;
            const char* state = release ? "released" : "bound";
            watch.expect(state);
            size_t before = w.kubelet->list_count(kRes);
            if (!vfiod::client::call_group_method(release ? "Release" : "Bind", "0000:03:00.0").ok()) {
                std::fprintf(stderr, "call %d failed\n", i);
                return 1;
            }
            const char* want = release ? "Unhealthy" : "Healthy";
            // The first list after the call that says so (a later one may follow it).
            std::optional<Clock::time_point> listed;
            if (!w.kubelet->wait([&](const std::vector<FakeKubelet::Stream>& ss) {
                    if (ss.empty())
                        return false;
                    const auto& lists = ss.back().lists;
                    for (size_t k = before; k < lists.size(); ++k)
                        if (lists[k].health.count("0000:03:00.0") &&
                            lists[k].health.at("0000:03:00.0") == want) {
                            listed = lists[k].at;
                            return true;
                        }
                    return false;
                }, 5s)) {
                std::fprintf(stderr, "no list after change %d\n", i);
                return 1;
            }
            auto seen = watch.wait(5s);
            if (!seen) {
                std::fprintf(stderr, "no PropertiesChanged State=%s after change %d\n", state, i);
                return 1;
            }
            // Negative when the plugin's list beat this process's copy of the signal (both
            // leave dbus-daemon together; a release is also seen earlier through /dev/vfio).
            lat.push_back(ms(*listed - seen->steady));
            by_kind[release].push_back(lat.back());
            early += lat.back() < 0;
        }
        auto [median, p99, max] = summary(lat);
        std::printf("PropertiesChanged -> ListAndWatch over %zu changes: median %.2f ms, p99 "
                    "%.2f ms, max %.2f ms (goal: median <= 20, p99 <= 100)\n",
                    lat.size(), median, p99, max);
        for (int k : {0, 1}) {
            auto [m, p, x] = summary(by_kind[k]);
            std::printf("  %zu %s: median %.2f ms, p99 %.2f ms, max %.2f ms\n", by_kind[k].size(),
                        k ? "releases" : "binds", m, p, x);
        }
        // Both copies of the signal leave dbus-daemon together; a release is also seen earlier
        // through /dev/vfio/N vanishing, before vfiod publishes `released`.
        std::printf("  %d lists reached the kubelet before this process had its copy of the "
                    "signal (negative latency)\n", early);
        good = good && median <= 20 && p99 <= 100;
    }
    {
        World w;
        if (!w.start("many-nics", 256)) {
            std::fprintf(stderr, "256-device setup failed; logs in %s\n", w.env.work.c_str());
            return 1;
        }
        std::this_thread::sleep_for(1s);  // let start-up settle before the idle window
        pid_t pid = w.plugin.pid();
        long rss = status_kb(pid, "VmRSS:"), hwm = status_kb(pid, "VmHWM:");
        // File-backed pages are mostly gRPC's, protobuf's and abseil's code, shared with any
        // other process mapping them; anonymous memory is the plugin's own.
        std::printf("RSS serving 256 devices: %ld KiB (peak %ld KiB; anonymous %ld KiB, "
                    "file-backed %ld KiB) (goal <= 16384)\n",
                    rss, hwm, status_kb(pid, "RssAnon:"), status_kb(pid, "RssFile:"));
        std::printf("  threads: %ld\n", status_kb(pid, "Threads:"));
        print_largest_mappings(pid, 12);
        good = good && rss <= 16384;
        long l0 = lines(w.env.work + "/plugin.log"), s0 = switches(pid), c0 = cpu_ticks(pid);
        std::this_thread::sleep_for(10s);
        long l1 = lines(w.env.work + "/plugin.log"), s1 = switches(pid), c1 = cpu_ticks(pid);
        double cpu = 100.0 * (c1 - c0) / sysconf(_SC_CLK_TCK) / 10.0;
        std::printf("idle 10 s: %ld log lines, %.2f%% CPU, %ld wakeups (context switches, all "
                    "threads) (goal: 0 lines, < 0.5%% CPU)\n",
                    l1 - l0, cpu, s1 - s0);
        good = good && l1 == l0 && cpu < 0.5;
    }
    if (!frozen_vfiod()) {
        std::fprintf(stderr, "vfiod frozen mid-read: setup failed or goal missed\n");
        good = false;
    }
    if (!at_4000_objects()) {
        std::fprintf(stderr, "4,000 objects: setup failed\n");
        good = false;
    }
    return good ? 0 : 1;
}
