// vfiod-bench-hung [RUNS [FUNCTIONS]]: how fast vfiod answers while one group's sysfs write hangs
// (issue 13: another group's Bind within 100 ms). vfiod's own Daemon (daemon/app: workers,
// D-Bus objects, the event loop) on the fake kernel and the bus
// DBUS_SYSTEM_BUS_ADDRESS names (bench/run.sh starts a private one; root, to own org.vfiod1
// under the shipped policy). The host: the gpu-host scenario, or with FUNCTIONS the fleet tree of
// that size with two VFs allowlisted. One group's driver_override write blocks (the GPU's, or
// the first VF's); meanwhile, RUNS times: Release of the other group (the NIC's, or the second
// VF's), Bind of it, GetManagedObjects and one State read of the hung group, each on a fresh
// connection as a separate client makes it. Prints "NAME median_ms p99_ms max_ms runs".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "fleet_tree.hpp"
#include "app/daemon.hpp"
#include "infra/loop.hpp"
#include "scenarios.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;

double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One Manager method on a connection of its own; the error name, "" on success.
std::string manager(const char* method, const std::string& address = "") {
    auto conn = sdbus::createSystemBusConnection();
    auto proxy = sdbus::createProxy(*conn, "org.vfiod1", "/org/vfiod1");
    try {
        auto m = proxy->createMethodCall("org.vfiod1.Manager", method);
        if (!address.empty())
            m << address;
        proxy->callMethod(m, 60'000'000);
    } catch (const sdbus::Error& e) {
        return e.getName() + ": " + e.getMessage();
    }
    return "";
}

struct Series {
    const char* name;
    std::vector<double> ms;
    void print() {
        std::sort(ms.begin(), ms.end());
        size_t n = ms.size();
        size_t p99 = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n))) - 1;
        std::printf("%s %.1f %.1f %.1f %zu\n", name, ms[n / 2], ms[p99], ms.back(), n);
    }
};

}  // namespace

int main(int argc, char** argv) {
    int runs = argc > 1 ? std::atoi(argv[1]) : 30;
    int functions = argc > 2 ? std::atoi(argv[2]) : 0;
    if (runs < 1 || functions < 0 || !std::getenv("DBUS_SYSTEM_BUS_ADDRESS")) {
        std::fprintf(stderr, "usage: DBUS_SYSTEM_BUS_ADDRESS=... vfiod-bench-hung [RUNS [FUNCTIONS]]\n");
        return 2;
    }
    vfiod::block_signals(vfiod::daemon_signals());
    FakeTree tree;
    std::string hung_fn = "0000:01:00.0", other = "0000:03:00.0", hung_group = "13";
    // The hung write must outlast the measurement, not end `stuck` in the middle of it.
    std::string config = "[daemon]\nwrite_timeout = 600\n";
    if (functions) {
        auto fleet = vfiod::bench::build_fleet_tree(tree, static_cast<unsigned>(functions));
        auto vfs = vfiod::bench::vf_addresses(fleet.pfs.at(0), 2);
        hung_fn = vfs[0];
        other = vfs[1];
        config += "[[device]]\naddress = \"" + vfs[0] + "\"\n[[device]]\naddress = \"" + vfs[1] + "\"\n";
    } else {
        vfiod::test::build_gpu_host(tree);
        config += "[[device]]\nselector = \"10de:2331\"\n[[device]]\nselector = \"8086:1533\"\n";
    }
    tree.write_file("etc/vfiod/vfiod.toml", config);
    FakeKernel kernel(tree);
    vfiod::Daemon daemon(kernel);
    if (!daemon.start_thread())
        return 1;
    for (int i = 0; i < 30000 && !daemon.ready(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (functions) {
        // The VF's group number, as the daemon published it.
        auto conn = sdbus::createSystemBusConnection();
        std::string path = "/org/vfiod1/device/" + vfiod::PciAddress::parse(hung_fn)->object_path_element();
        auto proxy = sdbus::createProxy(*conn, "org.vfiod1", path);
        hung_group = std::to_string(
            proxy->getProperty("IommuGroup").onInterface("org.vfiod1.Device").get<uint32_t>());
    }
    if (std::string e = manager("Release", hung_fn); !e.empty()) {
        std::fprintf(stderr, "Release %s: %s\n", hung_fn.c_str(), e.c_str());
        return 1;
    }
    kernel.block_path("sys/bus/pci/devices/" + hung_fn + "/driver_override");
    auto hung = std::async(std::launch::async, [&] { return manager("Bind", hung_fn); });
    for (int i = 0; i < 500 && kernel.blocked_now() == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (kernel.blocked_now() != 1) {
        std::fprintf(stderr, "the write to %s did not hang\n", hung_fn.c_str());
        return 1;
    }

    Series release{"release_other_ms", {}}, bind{"bind_other_ms", {}}, gmo{"gmo_ms", {}},
        state{"state_ms", {}};
    int errors = 0;
    auto timed = [&](Series& s, const std::function<std::string()>& f) {
        auto t0 = Clock::now();
        std::string e = f();
        s.ms.push_back(ms_since(t0));
        if (!e.empty()) {
            std::fprintf(stderr, "%s: %s\n", s.name, e.c_str());
            ++errors;
        }
    };
    for (int i = 0; i < runs; ++i) {
        timed(release, [&] { return manager("Release", other); });
        timed(bind, [&] { return manager("Bind", other); });
        timed(gmo, [] {
            auto conn = sdbus::createSystemBusConnection();
            auto proxy = sdbus::createProxy(*conn, "org.vfiod1", "/org/vfiod1");
            std::map<sdbus::ObjectPath, std::map<std::string, std::map<std::string, sdbus::Variant>>> o;
            proxy->callMethod("GetManagedObjects")
                .onInterface("org.freedesktop.DBus.ObjectManager")
                .storeResultsTo(o);
            return std::string(o.size() >= 3 ? "" : "too few objects");
        });
        timed(state, [&] {
            auto conn = sdbus::createSystemBusConnection();
            auto proxy = sdbus::createProxy(*conn, "org.vfiod1", "/org/vfiod1/group/" + hung_group);
            auto s = proxy->getProperty("State").onInterface("org.vfiod1.Group").get<std::string>();
            return std::string(s == "pending" ? "" : "group " + hung_group + " is " + s);
        });
    }
    for (Series* s : {&release, &bind, &gmo, &state})
        s->print();
    std::printf("reads_blocked %u\n", kernel.reads_blocked());
    kernel.unblock();
    std::string last = hung.get();
    if (!last.empty()) {
        std::fprintf(stderr, "the hung Bind: %s\n", last.c_str());
        ++errors;
    }
    return errors || kernel.reads_blocked() ? 1 : 0;
}
