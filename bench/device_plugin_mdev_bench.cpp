// vfiod-bench-dp-mdev [--smoke]: what the device plugin's answers cost the kubelet for a pool of
// 256 mdevs (issue 41; DESIGN §12). The test build of vfiod on the fake kernel with 8 vGPU-like
// parents (fake_mdev's vgpu_parent) makes 32 vgpu-1q mdevs on each, all under one resource
// name; the real plugin binary serves them; the tests' fake kubelet calls it over the real gRPC
// protocol and unix sockets, and times each call from send to answer:
//   allocate 1     Allocate of one mdev, each of the 256 in turn;
//   allocate 256   Allocate of all 256 in one container;
//   preferred      GetPreferredAllocation of 128 of the 256, 16 of them required;
// then the plugin's VmRSS serving them, and the Reload that removes 32 mdevs (count 32 -> 28 on
// every parent) until the kubelet's list no longer has them. Median, p99 (of the 256) or max,
// in ms. Every answer is checked (nodes, variable, IDs); --smoke runs each a few times and
// judges no time. Needs what the device plugin tests need (a dbus-daemon).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/mdev.hpp"
#include "fake_kubelet.hpp"
#include "plugin_env.hpp"
#include "proc_stats.hpp"

using namespace vfiod;
using namespace vfiod::test;
using namespace vfiod::bench;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kRes = "example.com/vgpu";
const char* const kEnv = "MDEV_PCI_RESOURCE_EXAMPLE_COM_VGPU";
constexpr unsigned kParents = 8;

std::string config(unsigned per_parent) {
    std::string toml = "[daemon]\nmode = \"enforce\"\n";
    for (unsigned i = 0; i < kParents; ++i)
        toml += "[[mdev]]\nparent = \"vgpu" + std::to_string(i) + "\"\ntype = \"vgpu-1q\"\n" +
                "count = " + std::to_string(per_parent) + "\nresource_name = \"" + kRes + "\"\n";
    return toml;
}

// The IDs of the newest list of kRes (wait()'s predicate must not call FakeKubelet::latest()).
std::map<std::string, std::string> newest(const std::vector<FakeKubelet::Stream>& ss) {
    for (auto s = ss.rbegin(); s != ss.rend(); ++s)
        if (s->resource == kRes && !s->lists.empty())
            return s->lists.back().health;
    return {};
}

bool check(bool ok, const char* what) {
    if (!ok)
        std::fprintf(stderr, "vfiod-bench-dp-mdev: %s\n", what);
    return ok;
}

// One Allocate, timed; false when its answer is not `ids`' nodes and variable.
bool allocate(FakeKubelet& k, const std::vector<std::string>& ids, std::vector<double>* ms) {
    v1beta1::AllocateResponse r;
    auto t0 = Clock::now();
    grpc::Status s = k.allocate(kRes, {ids}, &r);
    ms->push_back(bench::ms(Clock::now() - t0));
    if (!s.ok() || r.container_responses_size() != 1)
        return check(false, ("Allocate failed: " + s.error_message()).c_str());
    const auto& c = r.container_responses(0);
    std::string joined;
    for (const auto& id : ids)
        joined += (joined.empty() ? "" : ",") + id;
    std::set<std::string> nodes;
    for (const auto& d : c.devices())
        nodes.insert(d.host_path());
    return check(c.devices_size() == static_cast<int>(ids.size()) + 1 &&
                     nodes.size() == ids.size() + 1 && nodes.count("/dev/vfio/vfio") &&
                     c.envs().count(kEnv) && c.envs().at(kEnv) == joined,
                 "an Allocate answer is not the mdevs' nodes and variable");
}

void row(const char* name, std::vector<double> v, const char* note = "") {
    auto [median, p99, max] = summary(std::move(v));
    std::printf("| %s | %.2f | %.2f | %.2f | %s |\n", name, median, p99, max, note);
}

}  // namespace

int main(int argc, char** argv) {
    const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
    const int runs = smoke ? 3 : 21;
    PluginEnv env;
    if (!check(env.start_bus(), "no private bus"))
        return 1;
    const std::string cfg = env.work + "/vfiod.toml";
    spit(cfg, config(32));
    Proc vfiod, plugin;
    std::string root = env.start_fake_vfiod(&vfiod, "k8s-host+vgpu", cfg, 180s);
    if (!check(!root.empty(), "vfiod did not start"))
        return 1;
    FakeKubelet kubelet(env.kubelet_dir, env.work + "/pods.sock");
    if (!check(kubelet.start(), "the fake kubelet cannot listen"))
        return 1;
    plugin = Proc({VFIOD_DEVICE_PLUGIN, "--kubelet-dir", env.kubelet_dir, "--pod-resources",
                   env.work + "/pods.sock", "--root", root},
                  env.work + "/plugin.log");
    std::vector<std::string> ids;
    for (unsigned p = 0; p < kParents; ++p)
        for (unsigned i = 0; i < 32; ++i)
            ids.push_back(mdev_uuid("vgpu" + std::to_string(p), "vgpu-1q", i));
    std::sort(ids.begin(), ids.end());
    auto listed = [&](size_t n) {
        return kubelet.wait([&](const auto& ss) { return newest(ss).size() == n; }, 120s);
    };
    if (!check(listed(256) && newest(kubelet.streams()).begin()->first == ids.front(),
               "the plugin never listed the 256 mdevs"))
        return 1;

    bool ok = true;
    std::printf("| call (256 mdevs, one pool) | median ms | p99 ms | max ms | |\n");
    std::printf("| --- | --- | --- | --- | --- |\n");
    std::vector<double> one, all, pref;
    for (const auto& id : ids)
        ok &= allocate(kubelet, {id}, &one);
    row("Allocate, 1 mdev (each of 256)", one);
    for (int r = 0; r < runs; ++r)
        ok &= allocate(kubelet, ids, &all);
    row("Allocate, all 256 in one container", all, "257 device nodes");
    std::vector<std::string> must(ids.begin() + 100, ids.begin() + 116);
    for (int r = 0; r < runs; ++r) {
        std::vector<std::string> out;
        auto t0 = Clock::now();
        ok &= check(kubelet.preferred(kRes, ids, must, 128, &out).ok() && out.size() == 128 &&
                        std::equal(must.begin(), must.end(), out.begin()),
                    "GetPreferredAllocation did not take must_include first");
        pref.push_back(ms(Clock::now() - t0));
    }
    row("GetPreferredAllocation, 128 of 256, 16 required", pref);
    std::printf("\nplugin VmRSS serving 256 mdevs: %ld KiB (RssAnon %ld KiB)\n",
                status_kb(plugin.pid(), "VmRSS:"), status_kb(plugin.pid(), "RssAnon:"));

    // 32 -> 28 on every parent: vfiod removes 32 mdevs; the kubelet's list loses them.
    spit(cfg, config(28));
    auto t0 = Clock::now();
    vfiod.signal(SIGHUP);
    ok &= check(listed(224), "the removed mdevs were never withdrawn");
    std::printf("Reload removing 32 of 256 -> the list of 224 at the kubelet: %.0f ms\n",
                ms(Clock::now() - t0));
    v1beta1::AllocateResponse r;
    const std::string gone = mdev_uuid("vgpu0", "vgpu-1q", 31);
    ok &= check(!kubelet.allocate(kRes, {{gone}}, &r).ok(), "a withdrawn mdev was handed out");
    return ok ? 0 : 1;
}
