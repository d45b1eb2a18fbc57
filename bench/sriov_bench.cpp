// vfiod-bench-sriov [--smoke] PFS...: vfiod creating and binding thousands of VFs (issue 25), on
// the fake kernel with its uevents, the service driven as the event loop drives it (handle_events
// per burst, publish after each), with no workers: every write runs on this thread. For each
// size, a host of PFS PFs (bench/fleet_tree: sriov_totalvfs 255, no VFs yet) and a config that
// asks for 255 VFs on each and allowlists every VF:
//   create     Service::start, then the kernel's uevents pumped burst by burst until none come:
//              every PF made its 255 VFs and every VF is bound to vfio-pci
//   hotplug    one more such PF hot-plugged (its add event) until its 255 VFs are bound
//   burst255   of which the one udev burst where its 255 VFs appear (their add and change events)
// Wall time of the whole phase and CPU time: "cpu" is this thread's (the event loop's), "kernel"
// the fake kernel's writes (making a VF lays out its sysfs directory), which the executor runs
// each on a thread of its own (Executor::timed_write), and "vfiod" the loop's CPU less any of
// those writes run on it: what the daemon itself spent. Per VF is vfiod's CPU over the VFs made.
// One run per size: a phase changes the host. Prints one table; --smoke checks the counts only.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "fleet_tree.hpp"
#include "thread_clock.hpp"
#include "service/service.hpp"

using namespace vfiod;

namespace {

using bench::thread_cpu_ms;

double wall_ms() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

bool failed = false;

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "sriov_bench: FAILED: %s\n", what.c_str());
        failed = true;
    }
}

// The fake kernel, with the CPU time its writes take on their threads added up: that work is
// the kernel's on a real host, not vfiod's. It also collects the uevents the writes raise (on
// the writing threads), as the event loop's udev monitor would.
class TimedKernel : public test::FakeKernel {
public:
    explicit TimedKernel(test::FakeTree& t) : FakeKernel(t), loop_(std::this_thread::get_id()) {
        on_uevent([this](const std::string&, const std::string& bdf) {
            std::lock_guard lock(m_);
            events_.insert(*PciAddress::parse(bdf));
        });
    }
    int write(std::string_view rel, std::string_view value) override {
        const double c0 = thread_cpu_ms();
        const int r = FakeKernel::write(rel, value);
        std::lock_guard lock(m_);
        (std::this_thread::get_id() == loop_ ? on_loop_ms_ : cpu_ms_) += thread_cpu_ms() - c0;
        return r;
    }
    std::set<PciAddress> take_events() {
        std::lock_guard lock(m_);
        return std::exchange(events_, {});
    }
    // All the writes' CPU time, and the part of it spent on the loop's thread.
    double cpu_ms() {
        std::lock_guard lock(m_);
        return cpu_ms_ + on_loop_ms_;
    }
    double on_loop_ms() {
        std::lock_guard lock(m_);
        return on_loop_ms_;
    }

private:
    const std::thread::id loop_;
    std::mutex m_;
    std::set<PciAddress> events_;
    double cpu_ms_ = 0, on_loop_ms_ = 0;
};

struct Cost {
    double wall = 0, cpu = 0, kernel = 0, vfiod = 0;
    unsigned bursts = 0;

    void add(const Cost& o) {
        wall += o.wall, cpu += o.cpu, kernel += o.kernel, vfiod += o.vfiod, bursts += o.bursts;
    }
};

// Times f (wall, the loop's CPU, the kernel's writes, vfiod's share) into c.
template <typename F>
void timed(Cost& c, TimedKernel& k, F&& f) {
    const double w0 = wall_ms(), c0 = thread_cpu_ms(), k0 = k.cpu_ms(), l0 = k.on_loop_ms();
    f();
    const double cpu = thread_cpu_ms() - c0;
    c.add({wall_ms() - w0, cpu, k.cpu_ms() - k0, cpu - (k.on_loop_ms() - l0), 0});
}

// The event loop's part: each burst of uevents handed to the service, then publish, until the
// kernel stays quiet. `big` gets the first burst naming at least 255 functions.
void pump(Service& s, TimedKernel& k, Cost& all, Cost* big) {
    for (int round = 0; round < 16; ++round) {
        auto burst = k.take_events();
        if (burst.empty())
            return;
        Cost one;
        timed(one, k, [&] {
            s.handle_events(burst);
            s.publish();
        });
        one.bursts = 1;
        all.add(one);
        if (big && big->bursts == 0 && burst.size() >= 255)
            *big = one;
    }
    check(false, "the service kept raising events of its own");
}

unsigned bound_groups(const Service& s) {
    unsigned n = 0;
    for (const auto& [g, info] : s.inventory().groups)
        n += info.state == GroupState::Bound;
    return n;
}

void row(const char* name, unsigned pfs, unsigned vfs, const Cost& c) {
    const double vfiod = c.vfiod;
    std::printf("%-9s %4u %6u %10.1f %10.1f %10.1f %10.1f %9.1f %6u\n", name, pfs, vfs, c.wall,
                c.cpu, c.kernel, vfiod, vfs ? vfiod * 1000 / vfs : 0.0, c.bursts);
    std::fflush(stdout);
}

// One host of `pfs` PFs: the whole creation from config, then one PF hot-plugged. Returns
// vfiod's CPU per VF at creation (µs).
double bench_size(unsigned pfs) {
    test::FakeTree t;
    const bench::SriovFleet f = bench::build_sriov_fleet(t, pfs);
    t.write_file("etc/vfiod/vfiod.toml", f.config);
    TimedKernel k(t);
    for (const auto& pf : f.pfs)
        k.set_vf_driver(pf, "iavf");
    Service s(k, {});
    Cost create;
    timed(create, k, [&] {
        check(s.start(), "service start");
        s.publish();
    });
    pump(s, k, create, nullptr);
    const unsigned vfs = pfs * f.vfs_per_pf;
    check(bound_groups(s) == vfs, std::to_string(bound_groups(s)) + " groups bound, expected " +
                                      std::to_string(vfs));
    for (const auto& [a, pf] : s.inventory().pfs)
        check(pf.state == PfState::Ready && pf.num_vfs == f.vfs_per_pf,
              a.str() + ": not ready with 255 VFs");
    row("create", pfs, vfs, create);

    // One more PF: its add event, the VFs' burst, their bind events.
    auto spare = bench::sriov_fleet_pf(pfs, 1000000);
    k.set_vf_driver(spare.address, "iavf");
    Cost hotplug, burst;
    k.hot_add(spare);
    pump(s, k, hotplug, &burst);
    check(bound_groups(s) == vfs + f.vfs_per_pf, "the hot-plugged PF's VFs are not all bound");
    check(burst.bursts == 1, "no burst of 255 VFs was seen");
    row("hotplug", pfs + 1, f.vfs_per_pf, hotplug);
    row("burst255", pfs + 1, f.vfs_per_pf, burst);
    return create.vfiod * 1000 / vfs;
}

}  // namespace

int main(int argc, char** argv) {
    spdlog::set_level(spdlog::level::warn);
    std::vector<unsigned> sizes;
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--smoke") != 0)  // one run per size either way
            sizes.push_back(static_cast<unsigned>(std::atoi(argv[i])));
    if (sizes.empty())
        sizes = {8, 16, 32};
    std::printf("# %-7s %4s %6s %10s %10s %10s %10s %9s %6s\n", "measure", "pfs", "vfs",
                "wall_ms", "cpu_ms", "kernel_ms", "vfiod_ms", "us/vf", "bursts");
    std::vector<double> per_vf;
    for (unsigned pfs : sizes)
        per_vf.push_back(bench_size(pfs));
    if (per_vf.size() > 1)
        std::printf("per_vf_ratio %u/%u %.2f\n", sizes.back(), sizes.front(),
                    per_vf.back() / per_vf.front());
    return failed ? 1 : 0;
}
