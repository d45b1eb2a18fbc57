// vfiod-bench-mdev [--smoke]: mediated devices at scale (issue 40), on the fake kernel
// (tests/support/fake_mdev), the service in enforce mode driven as the event loop drives it (an
// entry, then publish; the mdev uevents heard handed on burst by burst), with no workers. The
// host has 8 virtual parents (class vgpu, types vgpu-1q and vgpu-2q at 1 and 2 of 64 units):
//   create   Service::start on a config of 8 [[mdev]] entries, 32 vgpu-1q each, then the
//            uevents of what it made, until all 256 exist and are published ready ("runs":
//            the bursts)
//   event    one parent's MDEV_STATE=registered change (Service::handle_mdev_events)
//   change   one of its mdevs' own event, its bind say (Service::handle_mdev_changes)
//   reload   a Reload
// the last three with nothing to make, measured with 8, 64 and 256 mdevs on the host, the
// event's parent (vgpu0) holding 1 of them throughout, so what grows is the mdevs of OTHER
// parents; and once more on the create host (vgpu0 holding 32 of 256). Each is the median of
// runs: wall and CPU time ("cpu" this thread's, "kernel" the fake kernel's writes, on threads of
// their own, "vfiod" the loop's less any write run on it), and what vfiod asked the host through
// HostFs (calls, directory entries listed, listings of the mdev bus sys/bus/mdev/devices),
// counted on the kernel's outermost calls (not the fake's own). RSS (VmRSS, RssAnon of this
// process, fake kernel included) before and after the create, and after malloc_trim.
// Prints one table; exits 1 when a check fails (the mdevs, their UUIDs and states, and a
// trigger's host reads not growing with the mdevs of other parents). --smoke: 3 runs, not 21.
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/mdev.hpp"
#include "core/state.hpp"
#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "io/mdev_reader.hpp"
#include "log_capture.hpp"
#include "service/service.hpp"
#include "thread_clock.hpp"

using namespace vfiod;

namespace {

using bench::thread_cpu_ms;

constexpr unsigned kParents = 8;
constexpr unsigned kPerParent = 32;
const char* const kType = "vgpu-1q";

bool failed = false;

// A "Key: N kB" line of this process's /proc status (VmRSS, RssAnon); -1 without it. Not
// proc_stats.hpp's: that one comes with the plugin benches' process helpers.
long self_kb(const std::string& key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind(key + ":", 0) == 0)
            return std::atol(line.c_str() + key.size() + 1);
    return -1;
}

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "mdev_bench: FAILED: %s\n", what.c_str());
        failed = true;
    }
}

// What vfiod asked the host for.
struct Ops {
    unsigned long calls = 0;   // every HostFs call that reads
    unsigned long listed = 0;  // directory entries the listings returned
    unsigned long bus = 0;     // listings of sys/bus/mdev/devices
};

// The fake kernel, counting vfiod's reads of it and timing its writes (the kernel's work on a
// real host). Only the outermost call counts: the fake's own reads inside a write or a read are
// not vfiod's.
class CountingKernel final : public test::FakeKernel {
public:
    using FakeKernel::FakeKernel;

private:
    // f(), counted as a read of vfiod's when no other call of this kernel is under way here.
    template <typename F>
    auto counted(F&& f, bool is_read = true) const {
        if (depth_ == 0 && is_read) {
            std::lock_guard lock(m_);
            ++ops_.calls;
        }
        ++depth_;
        struct Leave {
            ~Leave() { --depth_; }
        } leave;
        return f();
    }

public:

    std::optional<std::string> read(std::string_view rel, size_t max, std::string* why,
                                    const Dir* in) const override {
        return counted([&] { return FakeKernel::read(rel, max, why, in); });
    }
    std::optional<std::string> readlink(std::string_view rel, const Dir* in) const override {
        return counted([&] { return FakeKernel::readlink(rel, in); });
    }
    std::vector<std::string> list(std::string_view rel, int* err) const override {
        auto out = counted([&] { return FakeKernel::list(rel, err); });
        std::lock_guard lock(m_);
        ops_.listed += depth_ == 0 ? out.size() : 0;
        ops_.bus += depth_ == 0 && rel == mdev_paths::kDevices;
        return out;
    }
    std::optional<std::string> resolve(std::string_view rel) const override {
        return counted([&] { return FakeKernel::resolve(rel); });
    }
    bool exists(std::string_view rel, const Dir* in) const override {
        return counted([&] { return FakeKernel::exists(rel, in); });
    }
    Dir open_dir(std::string_view rel) const override {
        return counted([&] { return FakeKernel::open_dir(rel); });
    }
    std::vector<Link> links(std::string_view rel, std::string_view prefix) const override {
        return counted([&] { return FakeKernel::links(rel, prefix); });
    }
    // The executor runs each write on a thread of its own (write_within): its CPU time there is
    // the kernel's, and is not in the loop's.
    int write(std::string_view rel, std::string_view value) override {
        const double c0 = thread_cpu_ms();
        const int r = counted([&] { return FakeKernel::write(rel, value); }, false);
        std::lock_guard lock(m_);
        write_ms_[std::this_thread::get_id() == loop_] += thread_cpu_ms() - c0;
        return r;
    }
    // The reads since the last call.
    Ops take() {
        std::lock_guard lock(m_);
        return std::exchange(ops_, {});
    }
    // The CPU time of every write so far, and of those run on the loop's thread.
    std::pair<double, double> write_ms() {
        std::lock_guard lock(m_);
        return {write_ms_[0] + write_ms_[1], write_ms_[1]};
    }

private:
    static thread_local unsigned depth_;
    mutable std::mutex m_;
    mutable Ops ops_;
    const std::thread::id loop_ = std::this_thread::get_id();  // made on the loop's thread
    double write_ms_[2] = {0, 0};                               // elsewhere, on the loop
};
thread_local unsigned CountingKernel::depth_ = 0;

std::string config(const std::vector<unsigned>& counts) {
    std::string toml = "[daemon]\nmode = \"enforce\"\n";
    for (unsigned i = 0; i < counts.size(); ++i)
        toml += "\n[[mdev]]\nparent = \"vgpu" + std::to_string(i) + "\"\ntype = \"" + kType +
                "\"\ncount = " + std::to_string(counts[i]) + "\n";
    return toml;
}

// total mdevs, vgpu0 holding `own` of them, the rest spread over the other parents.
std::vector<unsigned> spread(unsigned total, unsigned own) {
    std::vector<unsigned> counts(kParents, (total - own) / (kParents - 1));
    counts[0] = own;
    for (unsigned i = 0; i < (total - own) % (kParents - 1); ++i)
        ++counts[kParents - 1 - i];
    return counts;
}

// The host: the fake kernel with its parents registered before vfiod starts, and what a udev
// monitor would hear of the mdev side (as app/udev_monitor sorts it).
struct Host {
    test::FakeTree tree;
    CountingKernel kernel;
    std::mutex mu;
    std::set<std::string> parents;  // MDEV_STATE changes
    std::set<std::string> mdevs;    // mdevs' own add, bind, unbind, remove

    Host() : kernel(tree.enable_iommu()) {
        for (unsigned i = 0; i < kParents; ++i)
            kernel.register_mdev_parent(test::vgpu_parent(i), false);
        kernel.on_device_uevent([this](const test::Uevent& ev) {
            const std::string name = ev.devpath.substr(ev.devpath.rfind('/') + 1);
            std::lock_guard lock(mu);
            if (ev.action == "change" && !ev.get("MDEV_STATE").empty())
                parents.insert(name);
            if (ev.subsystem == "mdev" && is_canonical_uuid(name))
                mdevs.insert(name);
        });
    }
    void write_config(const std::vector<unsigned>& counts) {
        tree.write_file("etc/vfiod/vfiod.toml", config(counts));
    }
    // The event loop's part: each burst heard handed to the service, then publish, until the
    // kernel stays quiet. Returns the bursts.
    unsigned pump(Service& s) {
        for (unsigned round = 0; round < 16; ++round) {
            std::set<std::string> p, m;
            {
                std::lock_guard lock(mu);
                p.swap(parents);
                m.swap(mdevs);
            }
            if (p.empty() && m.empty())
                return round;
            if (!p.empty())
                s.handle_mdev_events(p);
            if (!m.empty())
                s.handle_mdev_changes(m);
            s.publish();
        }
        check(false, "the service kept raising mdev events of its own");
        return 16;
    }
};

// Every mdev the config asks for is there, with its UUID, its type, its group and its driver,
// and published ready; no other is there.
void check_mdevs(const Host& h, const Service& s, const std::vector<unsigned>& counts) {
    KernelHostFs fs(h.tree.root());
    const MdevHost host = read_mdev_host(fs, nullptr);
    const auto& published = s.inventory().mdevs;
    unsigned want = 0;
    for (unsigned p = 0; p < counts.size(); ++p)
        for (unsigned i = 0; i < counts[p]; ++i, ++want) {
            const std::string parent = "vgpu" + std::to_string(p);
            const std::string uuid = mdev_uuid(parent, kType, i);
            auto m = host.mdevs.find(uuid);
            auto info = published.find(uuid);
            check(m != host.mdevs.end() && m->second.parent == parent &&
                      m->second.type == kType && m->second.iommu_group &&
                      m->second.driver == "vgpu" && info != published.end() &&
                      info->second.state == MdevState::Ready,
                  parent + "/" + kType + "/" + std::to_string(i) + ": missing or not ready");
        }
    check(host.mdevs.size() == want && published.size() == want,
          std::to_string(host.mdevs.size()) + " mdevs on the host, " +
              std::to_string(published.size()) + " published, " + std::to_string(want) +
              " wanted");
}

struct Cost {
    double wall = 0, cpu = 0, kernel = 0, vfiod = 0;
    Ops ops;
};

double wall_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

Cost timed(CountingKernel& k, const std::function<void()>& f) {
    k.take();
    const double w0 = wall_ms(), c0 = thread_cpu_ms();
    const auto [k0, l0] = k.write_ms();
    f();
    const double cpu = thread_cpu_ms() - c0;
    const auto [k1, l1] = k.write_ms();
    return {wall_ms() - w0, cpu, k1 - k0, cpu - (l1 - l0), k.take()};
}

// The median run of f by CPU time; the host reads must be the same in every run.
Cost median(CountingKernel& k, unsigned runs, const std::function<void()>& f) {
    std::vector<Cost> all;
    for (unsigned i = 0; i < runs; ++i)
        all.push_back(timed(k, f));
    for (const Cost& c : all)
        check(c.ops.calls == all[0].ops.calls, "a repeated run read the host differently");
    std::sort(all.begin(), all.end(), [](const Cost& a, const Cost& b) { return a.cpu < b.cpu; });
    return all[all.size() / 2];
}

void row(const char* name, unsigned mdevs, unsigned own, const Cost& c, unsigned runs) {
    std::printf("%-8s %5u %4u %9.2f %9.2f %9.2f %9.2f %7lu %7lu %4lu %4u\n", name, mdevs, own,
                c.wall, c.cpu, c.kernel, c.vfiod, c.ops.calls, c.ops.listed, c.ops.bus,
                runs);
    std::fflush(stdout);
}

// What a running service pays, with nothing to make: one parent's registration, one of its
// mdevs' own event (its bind, say), and a Reload.
struct Triggers {
    Cost event, change, reload;
};

Triggers triggers(Host& h, Service& s, unsigned runs) {
    const size_t writes = h.kernel.writes().size();
    Triggers t;
    t.event = median(h.kernel, runs, [&] {
        s.handle_mdev_events({"vgpu0"});
        s.publish();
    });
    t.change = median(h.kernel, runs, [&] {
        s.handle_mdev_changes({mdev_uuid("vgpu0", kType, 0)});
        s.publish();
    });
    t.reload = median(h.kernel, runs, [&] {
        check(s.reload().ok(), "a Reload that changes nothing failed");
        s.publish();
    });
    check(h.kernel.writes().size() == writes && h.pump(s) == 0,
          "an event or a Reload wrote to the host");
    return t;
}

void rows(const Triggers& t, unsigned mdevs, unsigned own, unsigned runs) {
    row("event", mdevs, own, t.event, runs);
    row("change", mdevs, own, t.change, runs);
    row("reload", mdevs, own, t.reload, runs);
}

// The create: 8 parents x 32 from start, and the mdevs' events handled as the loop would,
// until every mdev is ready; then the triggers on that host.
void bench_create(unsigned runs) {
    Host h;
    const std::vector<unsigned> counts(kParents, kPerParent);
    h.write_config(counts);
    const long rss0 = self_kb("VmRSS"), anon0 = self_kb("RssAnon");
    Service s(h.kernel, {});
    unsigned bursts = 0;
    Cost create = timed(h.kernel, [&] {
        check(s.start(), "service start");
        s.publish();
        bursts = h.pump(s);
    });
    const long rss1 = self_kb("VmRSS"), anon1 = self_kb("RssAnon");
    ::malloc_trim(0);  // as vfiod's loop does after a Reload: what the passes freed goes back
    const long rss2 = self_kb("VmRSS"), anon2 = self_kb("RssAnon");
    check_mdevs(h, s, counts);
    row("create", kParents * kPerParent, kPerParent, create, bursts);
    std::printf("rss %ld %ld %ld %ld %ld %ld\n", rss0, rss1, anon0, anon1, rss2, anon2);
    rows(triggers(h, s, runs), kParents * kPerParent, kPerParent, runs);
}

// What one trigger read with 64 mdevs and with 256 must be the same.
void check_flat(const char* what, const Cost& at64, const Cost& at256) {
    check(at256.ops.calls <= at64.ops.calls && at256.ops.listed <= at64.ops.listed,
          std::string(what) + " read the host " + std::to_string(at64.ops.calls) + " times (" +
              std::to_string(at64.ops.listed) + " entries listed) with 64 mdevs, " +
              std::to_string(at256.ops.calls) + " (" + std::to_string(at256.ops.listed) +
              ") with 256: it grows with other parents' mdevs");
}

// vgpu0 with one mdev, the others with the rest of 8, 64, 256: its triggers must read the same.
void bench_growth(unsigned runs) {
    Host h;
    Service s(h.kernel, {});
    std::vector<Triggers> at;
    for (unsigned total : {8u, 64u, 256u}) {
        const auto counts = spread(total, 1);
        h.write_config(counts);
        if (total == 8)
            check(s.start(), "service start");
        else
            check(s.reload().ok(), "the Reload to " + std::to_string(total) + " mdevs failed");
        s.publish();
        h.pump(s);
        check_mdevs(h, s, counts);
        at.push_back(triggers(h, s, runs));
        rows(at.back(), total, 1, runs);
    }
    check_flat("one parent's registration", at[1].event, at[2].event);
    check_flat("one mdev's event", at[1].change, at[2].change);
}

// vfiod's own UUIDs of one pair, made as a planning pass makes them when it first meets one of
// the pair's mdevs (OwnMdevUuids: all 4096 of the pair, version-5 UUIDs, at once).
void bench_uuids(unsigned runs) {
    std::vector<Cost> all;
    for (unsigned i = 0; i < runs; ++i) {
        OwnMdevUuids own;
        const std::string uuid = mdev_uuid("vgpu0", kType, 0);
        const double w0 = wall_ms(), c0 = thread_cpu_ms();
        check(own.index_of("vgpu0", kType, uuid) == 0u, "mdev 0 is not vfiod's own");
        const double cpu = thread_cpu_ms() - c0;
        all.push_back({wall_ms() - w0, cpu, 0, cpu, {}});
    }
    std::sort(all.begin(), all.end(), [](const Cost& a, const Cost& b) { return a.cpu < b.cpu; });
    row("uuids", kMaxMdevCount, 1, all[all.size() / 2], runs);
}

}  // namespace

int main(int argc, char** argv) {
    // vfiod's warnings are kept, not printed, and counted at the end.
    spdlog::set_level(spdlog::level::warn);
    spdlog::default_logger()->sinks().clear();
    test::LogCapture log;
    // The trees on tmpfs, as sysfs and /run/vfiod (the journal) are on a real host: on a disk
    // the journal's fsyncs would be measured instead of vfiod (run.sh sets TMPDIR the same way).
    if (!std::getenv("TMPDIR") && ::access("/dev/shm", W_OK) == 0)
        ::setenv("TMPDIR", "/dev/shm", 1);
    const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
    const unsigned runs = smoke ? 3 : 21;
    std::printf("# %-6s %5s %4s %9s %9s %9s %9s %7s %7s %4s %4s\n", "measure", "mdevs", "own",
                "wall_ms", "cpu_ms", "kernel_ms", "vfiod_ms", "reads", "listed", "bus", "runs");
    bench_create(runs);
    bench_growth(runs);
    bench_uuids(runs);
    const auto lines = log.lines();
    std::printf("# vfiod logged %zu warnings%s%s\n", lines.size(),
                lines.empty() ? "" : "; the first: ", lines.empty() ? "" : lines.front().c_str());
    return failed ? 1 : 0;
}
