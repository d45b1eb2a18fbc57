// What the kubelet plugins' benchmarks (device_plugin_bench, dra_plugin_bench) read of the
// process they measure, from /proc, and how they sum up their samples.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "plugin_env.hpp"

namespace vfiod::bench {

using test::slurp;

// A "Key:   N kB" line of /proc/PID/status; -1 when it has none.
inline long status_kb(pid_t pid, const char* key) {
    std::string s = slurp("/proc/" + std::to_string(pid) + "/status");
    auto at = s.find(key);
    return at == std::string::npos ? -1 : std::atol(s.c_str() + at + std::strlen(key));
}

// Context switches of every thread: each is a wakeup (or a preemption).
inline long switches(pid_t pid) {
    long n = 0;
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator(
             "/proc/" + std::to_string(pid) + "/task", ec)) {
        std::string s = slurp(t.path().string() + "/status");
        for (const char* key : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
            auto at = s.find(key);
            if (at != std::string::npos)
                n += std::atol(s.c_str() + at + std::strlen(key));
        }
    }
    return n;
}

// utime + stime in clock ticks.
inline long cpu_ticks(pid_t pid) {
    std::string s = slurp("/proc/" + std::to_string(pid) + "/stat");
    auto close = s.rfind(')');
    if (close == std::string::npos)
        return 0;
    std::istringstream in(s.substr(close + 2));
    std::string field;
    long ut = 0, st = 0;
    for (int i = 3; in >> field; ++i) {
        if (i == 14)
            ut = std::atol(field.c_str());
        if (i == 15) {
            st = std::atol(field.c_str());
            break;
        }
    }
    return ut + st;
}
inline double cpu_seconds(long ticks) { return static_cast<double>(ticks) / sysconf(_SC_CLK_TCK); }

// RSS by mapping (a library's file, or "[anon]", "[heap]", "[stack]"), largest first: where the
// plugin's pages are.
inline std::vector<std::pair<long, std::string>> rss_by_mapping(pid_t pid) {
    std::map<std::string, long> kb;
    std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/smaps"));
    std::string line, name;
    while (std::getline(in, line)) {
        if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
            line.find('-') < line.find(' ')) {
            // "start-end perms offset dev inode [path]"
            std::istringstream f(line);
            std::string range, perms, offset, dev, inode;
            f >> range >> perms >> offset >> dev >> inode;
            std::getline(f >> std::ws, name);
            if (name.empty())
                name = "[anon]";
            name = name.substr(name.rfind('/') + 1);
        } else if (line.rfind("Rss:", 0) == 0) {
            kb[name] += std::atol(line.c_str() + 4);
        }
    }
    std::vector<std::pair<long, std::string>> out;
    for (const auto& [n, k] : kb)
        out.emplace_back(k, n);
    std::sort(out.rbegin(), out.rend());
    return out;
}

// Prints the `n` largest of them on one line.
inline void print_largest_mappings(pid_t pid, size_t n) {
    std::printf("  largest mappings (KiB):");
    auto maps = rss_by_mapping(pid);
    for (size_t i = 0; i < maps.size() && i < n; ++i)
        std::printf(" %s %ld;", maps[i].second.c_str(), maps[i].first);
    std::printf("\n");
}

inline long lines(const std::string& path) {
    std::string s = slurp(path);
    return std::count(s.begin(), s.end(), '\n');
}

inline double ms(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
}

// Median, p99 (nearest rank) and max of the samples; zeros when there are none.
inline std::array<double, 3> summary(std::vector<double> v) {
    if (v.empty())
        return {0, 0, 0};
    std::sort(v.begin(), v.end());
    size_t p99 = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(v.size()))) - 1;
    return {v[v.size() / 2], v[p99], v.back()};
}

}  // namespace vfiod::bench
