// vfiod-bench-burst [--smoke] [SIZE...]: the daemon's cost per coalesced udev burst, driving the
// service layer (Service::handle_events, as the event loop does) on the fleet tree in observe
// mode. For each host size (default 64 1024 4096 functions):
//   burst1   one VF changed (a bind/unbind uevent): handle_events({vf}); the tree has no kernel
//            to say what changed, so the host-wide tables are read on every burst (as --root)
//   burst1q  the same on a service whose table watch says nothing changed (the live host between
//            mount, swap, route and link changes: POLLPRI and rtnetlink silent)
//   burst255 255 VFs created on the spare PF (echo 255 > sriov_numvfs): handle_events(all 255)
//   publish1   with a bus (DBUS_SYSTEM_BUS_ADDRESS): Service::publish after one VF's driver
//              changed, through the real D-Bus objects: one PropertiesChanged
//   publishall the same objects all looked at once (DbusObjects::publish naming everything):
//              what every change cost when publishing compared the whole inventory
// CPU time of the calling thread (steadier than wall time on a loaded machine) and wall time,
// medians. Prints one "name size cpu_ms wall_ms runs" line per measurement. --smoke: one run
// each, and only correctness is judged: the burst's groups appear and disappear as they should.
#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fake_tree.hpp"
#include "fleet_tree.hpp"
#include "thread_clock.hpp"
#include "io/host_fs.hpp"
#include "io/host_tables.hpp"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/objects.hpp"
#include "service/service.hpp"

using namespace vfiod;

namespace {

using bench::thread_cpu_ms;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

bool failed = false;

void check(bool ok, const std::string& what) {
    if (!ok) {
        std::fprintf(stderr, "burst_bench: FAILED: %s\n", what.c_str());
        failed = true;
    }
}

// Runs setup (untimed) then the measured step `runs` times; prints the medians.
void measure(const char* name, unsigned size, int runs, const std::function<void()>& setup,
             const std::function<void()>& step) {
    std::vector<double> cpu, wall;
    for (int r = 0; r < runs; ++r) {
        setup();
        auto w0 = std::chrono::steady_clock::now();
        double c0 = thread_cpu_ms();
        step();
        cpu.push_back(thread_cpu_ms() - c0);
        wall.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0)
                .count());
    }
    std::printf("%s %u %.3f %.3f %d\n", name, size, median(cpu), median(wall), runs);
    std::fflush(stdout);
}

// The kernel's watch on a host whose tables did not change since the last burst.
class QuietWatch : public TableWatch {
public:
    bool mounts_changed() override { return false; }
    bool network_changed() override { return false; }
};

void bench_size(unsigned size, bool smoke) {
    test::FakeTree t;
    bench::FleetTree f = bench::build_fleet_tree(t, size);
    t.write_file("etc/vfiod/vfiod.toml", f.config);
    KernelHostFs fs(t.root());
    Service s(fs, {.config_file = std::nullopt, .force_observe = true});
    // With a bus, publishing goes through vfiod's own D-Bus objects.
    std::unique_ptr<sdbus::IConnection> bus;
    std::unique_ptr<Authorizer> auth;
    CallLog log;
    std::unique_ptr<DbusObjects> objects;
    if (std::getenv("DBUS_SYSTEM_BUS_ADDRESS")) {
        bus = sdbus::createSystemBusConnection();
        auth = std::make_unique<Authorizer>(*bus);
        objects = std::make_unique<DbusObjects>(*bus, s, *auth, log);
        s.set_on_change([&](const Inventory& inv, const InventoryChange& change) {
            objects->publish(inv, change);
        });
    }
    check(s.start(), "service start");
    const size_t groups = s.inventory().groups.size();
    check(groups == f.vfs + f.gpus, "published " + std::to_string(groups) + " groups, expected " +
                                        std::to_string(f.vfs + f.gpus));
    const int runs1 = smoke ? 1 : 21, runs255 = smoke ? 1 : 5;

    // One VF's driver changes: a bind/unbind uevent for it alone.
    auto vf = *PciAddress::parse(bench::vf_addresses(f.pfs.front(), 1).front());
    // What the loop does per burst: the timer's handle_events, then publish() after it.
    measure("burst1", f.functions, runs1, [] {}, [&] {
        s.handle_events({vf});
        s.publish();
    });
    check(s.inventory().groups.size() == groups, "a 1-function burst changed the group count");
    {
        Service q(fs, {.config_file = std::nullopt, .force_observe = true});
        q.set_table_watch(std::make_unique<QuietWatch>());
        check(q.start(), "service start (watched tables)");
        measure("burst1q", f.functions, runs1, [] {}, [&] {
            q.handle_events({vf});
            q.publish();
        });
        check(q.inventory() == s.inventory(), "watched tables: another inventory");
        check(q.tables().mount_reads() == 1, "watched tables: the mount table read again");
    }

    if (objects) {
        // The VF loses its driver, then gets it back: each time one device's Driver changes.
        bool unbound = false;
        const std::string vf_bdf = vf.str();
        measure(
            "publish1", f.functions, runs1,
            [&] {
                if (unbound)
                    t.bind(vf_bdf, "iavf");
                else
                    t.unbind(vf_bdf);
                unbound = !unbound;
                s.handle_events({vf});
            },
            [&] { s.publish(); });
        check(s.inventory().devices.at(vf).driver == (unbound ? "" : "iavf"),
              "the VF's driver change was not published");
        InventoryChange all{
            .manager = true, .groups = {}, .devices = {}, .pfs = {}, .mdevs = {}};
        for (const auto& [g, gi] : s.inventory().groups)
            all.groups.insert(g);
        for (const auto& [a, d] : s.inventory().devices)
            all.devices.insert(a);
        measure("publishall", f.functions, runs1, [] {},
                [&] { objects->publish(s.inventory(), all); });
    }

    // 255 VFs appear on the spare PF; undone (untimed) before the next run.
    const auto vfs = bench::vf_addresses(f.spare_pf, 255);
    std::set<PciAddress> touched;
    for (const auto& a : vfs)
        touched.insert(*PciAddress::parse(a));
    measure(
        "burst255", f.functions, runs255,
        [&] {
            if (s.inventory().groups.size() != groups) {
                for (const auto& a : vfs)
                    t.remove_function(a);
                t.write_file(t.devpath(f.spare_pf) + "/sriov_numvfs", "0\n");
                s.handle_events(touched);
                s.publish();
                check(s.inventory().groups.size() == groups, "removed VFs still published");
            }
            bench::add_vfs(t, f.spare_pf, 255, 1000000);
        },
        [&] {
            s.handle_events(touched);
            s.publish();
        });
    check(s.inventory().groups.size() == groups + 255,
          "after creating 255 VFs: " + std::to_string(s.inventory().groups.size()) + " groups");
}

}  // namespace

int main(int argc, char** argv) {
    spdlog::set_level(spdlog::level::warn);
    bool smoke = false;
    std::vector<unsigned> sizes;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--smoke") == 0)
            smoke = true;
        else
            sizes.push_back(static_cast<unsigned>(std::atoi(argv[i])));
    }
    if (sizes.empty())
        sizes = {64, 1024, 4096};
    for (unsigned size : sizes)
        bench_size(size, smoke);
    return failed ? 1 : 0;
}
