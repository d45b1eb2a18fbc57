// vfiod-bench-allocate [FUNCTIONS [RUNS]]: what the device plugin's Allocate and
// GetPreferredAllocation cost the kubelet on a large host (issue 23: 7.9 s for a 5,000-ID Allocate,
// 5.6 s for 10,000 unknown IDs). The plugin's own model (device-plugin/allocation.cpp) on FUNCTIONS
// one-function groups of one resource (default 5,000), each bound: the group check the server
// makes before Allocate (group_mates_outside) and Allocate itself for every ID in one container;
// the same check for 10,000 unknown IDs (what a hostile or confused kubelet sends); a preferred
// allocation of all of them with half required. Prints "NAME median_ms max_ms runs"; goal 100 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "allocation.hpp"

using namespace vfiod;
using namespace vfiod::plugin;

namespace {

plugin::Snapshot host_of(unsigned n, std::vector<std::string>* ids) {
    client::DaemonView v;
    for (unsigned i = 0; i < n; ++i) {
        PciAddress a{i >> 13, static_cast<uint8_t>(i >> 5), static_cast<uint8_t>(i & 0x1f), 0};
        client::DaemonGroup g;
        g.plan.group = 100 + i;
        g.state_value = GroupState::Bound;
        PlannedDevice d;
        d.address = a;
        d.role = Role::Allowlisted;
        d.resource_name = "example.com/gpu";
        d.numa_node = static_cast<int>(i % 2);
        g.plan.devices.push_back(d);
        v.groups.push_back(std::move(g));
        ids->push_back(a.str());
    }
    return make_snapshot(v, [](unsigned) { return true; });
}

void row(const char* name, int runs, const std::function<void()>& f) {
    std::vector<double> ms;
    for (int r = 0; r < runs; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-40s %8.2f %8.2f %d\n", name, ms[ms.size() / 2], ms.back(), runs);
}

}  // namespace

int main(int argc, char** argv) {
    unsigned n = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 5000;
    int runs = argc > 2 ? std::atoi(argv[2]) : 5;
    if (n == 0 || n > 1000000 || runs <= 0) {
        std::fprintf(stderr, "usage: vfiod-bench-allocate [FUNCTIONS (1..1000000) [RUNS]]\n");
        return 2;
    }
    std::vector<std::string> ids;
    plugin::Snapshot snap = host_of(n, &ids);
    struct NoHost : KernelHostFs {
        NoHost() : KernelHostFs("/nonexistent-vfiod-bench-root") {}
    } host;
    const std::string res = "example.com/gpu";
    bool ok = true;
    std::string name = "allocate " + std::to_string(n) + " IDs";
    row(name.c_str(), runs, [&] {
        std::vector<ContainerAllocation> out;
        AllocateError err;
        // Parsed once, as the server does when the request arrives.
        std::vector<DeviceIds> request{parse_device_ids(ids)};
        ok &= group_mates_outside(snap, request).empty() &&
              allocate(snap, res, request, {}, host, &out, &err) && out.size() == 1;
    });
    std::vector<std::string> unknown(10000);
    for (size_t i = 0; i < unknown.size(); ++i)
        unknown[i] = PciAddress{0xffff, static_cast<uint8_t>(i >> 5), static_cast<uint8_t>(i & 0x1f), 7}.str();
    row("allocate 10000 unknown IDs", runs, [&] {
        std::vector<ContainerAllocation> out;
        AllocateError err;
        std::vector<DeviceIds> request{parse_device_ids(unknown)};
        ok &= group_mates_outside(snap, request).empty() &&
              !allocate(snap, res, request, {}, host, &out, &err);
    });
    std::vector<std::string> must(ids.begin(), ids.begin() + ids.size() / 2);
    name = "preferred " + std::to_string(n) + " of " + std::to_string(n);
    row(name.c_str(), runs, [&] {
        ok &= preferred_allocation(snap, res, parse_device_ids(ids),
                                   parse_device_ids(must), static_cast<int>(n))
                  .size() == n;
    });
    if (!ok) {
        std::fprintf(stderr, "vfiod-bench-allocate: an answer was wrong\n");
        return 1;
    }
    return 0;
}
