// vfiod-fake-dra-kubelet: the tests' fake DRA kubelet as a program, for the scenario and VM
// tests and for trying the plugin without a cluster. One call per run, its outcome as one JSON
// object on stdout:
//   vfiod-fake-dra-kubelet [OPTIONS] register REG_SOCKET
//     {"registered":true,"type":…,"name":…,"endpoint":…,"supported_versions":[…],
//      "health_service":… (the one the kubelet would stream from, "" none),"dra_socket":…}
//   vfiod-fake-dra-kubelet [OPTIONS] prepare DRA_SOCKET NAMESPACE/NAME/UID...
//     {"code":0,"message":"","claims":{UID:{"error":"","devices":[{"request_names":[…],
//      "pool_name":…,"device_name":…,"cdi_device_ids":[…]}]}}}
//   vfiod-fake-dra-kubelet [OPTIONS] unprepare DRA_SOCKET NAMESPACE/NAME/UID...
//     {"code":0,"message":"","claims":{UID:{"error":""}}}
//   vfiod-fake-dra-kubelet [OPTIONS] watch-health DRA_SOCKET [SERVICE]
//     for --timeout seconds, the kubelet's health stream (SERVICE, default v1.DRAResourceHealth):
//     a line each time a message came, {"messages":N,"opens":N,"received_ms":UNIX_MS,
//     "devices":{"POOL/DEVICE":{"health":"HEALTHY"|"UNHEALTHY"|"UNKNOWN","message":…}}}, the
//     health as the kubelet has it then (lease applied); exit 0 when any message came.
// OPTIONS: --timeout SECONDS (each call's deadline, default 10), --root DIR (register: the
// endpoint GetInfo names is dialled under DIR). Exit 0: the call succeeded (claims may still
// carry errors), 1: it failed (gRPC error or registration refused), 2: usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_dra_kubelet.hpp"

namespace {

using nlohmann::json;
using vfiod::test::DraCallResult;
using vfiod::test::DraClaim;

int usage() {
    std::fprintf(stderr,
                 "usage: vfiod-fake-dra-kubelet [--timeout SECONDS] [--root DIR] register "
                 "REG_SOCKET\n"
                 "       vfiod-fake-dra-kubelet [--timeout SECONDS] prepare|unprepare "
                 "DRA_SOCKET NAMESPACE/NAME/UID...\n"
                 "       vfiod-fake-dra-kubelet [--timeout SECONDS] watch-health DRA_SOCKET "
                 "[SERVICE]\n");
    return 2;
}

bool parse_claim(const std::string& arg, DraClaim* out) {
    auto a = arg.find('/');
    auto b = a == std::string::npos ? a : arg.find('/', a + 1);
    if (b == std::string::npos || arg.find('/', b + 1) != std::string::npos)
        return false;
    out->namespace_ = arg.substr(0, a);
    out->name = arg.substr(a + 1, b - a - 1);
    out->uid = arg.substr(b + 1);
    return true;
}

void print(const json& j) {
    // Replaced, not thrown on, should a plugin answer bytes that are not UTF-8.
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
}

// The kubelet's view of the plugin's health stream, a line per message, for `seconds`.
int watch_health(const std::string& socket, const std::string& service, long seconds) {
    using vfiod::test::FakeHealthWatch;
    FakeHealthWatch w(socket, service);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    uint64_t printed = 0;
    while (std::chrono::steady_clock::now() < until) {
        if (w.messages() != printed) {
            printed = w.messages();
            json devices = json::object();
            int64_t received = 0;
            for (const auto& [key, seen] : w.devices()) {
                const std::string pool = key.substr(0, key.find('/'));
                const int h = w.health(pool, key.substr(key.find('/') + 1));
                devices[key] = {{"health", h == FakeHealthWatch::Healthy     ? "HEALTHY"
                                           : h == FakeHealthWatch::Unhealthy ? "UNHEALTHY"
                                                                             : "UNKNOWN"},
                                {"message", seen.message}};
                received = std::max(received, seen.received_unix_ms);
            }
            print({{"messages", printed}, {"opens", w.opens()}, {"received_ms", received},
                   {"devices", devices}});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return printed ? 0 : 1;
}

int print_call(const DraCallResult& r, bool with_devices) {
    json out = {{"code", static_cast<int>(r.status.error_code())},
                {"message", r.status.error_message()},
                {"claims", json::object()}};
    for (const auto& [uid, c] : r.claims) {
        json jc = {{"error", c.error}};
        if (with_devices) {
            jc["devices"] = json::array();
            for (const auto& d : c.devices)
                jc["devices"].push_back({{"request_names", d.request_names},
                                         {"pool_name", d.pool_name},
                                         {"device_name", d.device_name},
                                         {"cdi_device_ids", d.cdi_device_ids}});
        }
        out["claims"][uid] = jc;
    }
    print(out);
    return r.status.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    long timeout = 10;
    std::string root;
    size_t i = 0;
    for (; i < args.size() && args[i].rfind("--", 0) == 0; ++i) {
        if (i + 1 >= args.size())
            return usage();
        if (args[i] == "--timeout") {
            char* end = nullptr;
            timeout = std::strtol(args[i + 1].c_str(), &end, 10);
            if (*end || timeout <= 0 || timeout > 3600)
                return usage();
        } else if (args[i] == "--root") {
            root = args[i + 1];
        } else {
            return usage();
        }
        ++i;
    }
    if (args.size() - i < 2)
        return usage();
    const std::string verb = args[i], socket = args[i + 1];
    vfiod::test::FakeDraKubelet k{std::chrono::seconds(timeout)};
    if (verb == "register") {
        if (args.size() - i != 2)
            return usage();
        vfiod::test::DraPluginInfo info;
        std::string err;
        bool ok = k.register_plugin(socket, &info, &err, root);
        json out = {{"registered", ok},
                    {"type", info.type},
                    {"name", info.name},
                    {"endpoint", info.endpoint},
                    {"supported_versions", info.supported_versions},
                    {"health_service", vfiod::test::pick_health_service(info.supported_versions)}};
        if (ok)
            out["dra_socket"] = k.dra_socket();
        else
            out["error"] = err;
        print(out);
        return ok ? 0 : 1;
    }
    if (verb == "watch-health") {
        if (args.size() - i > 3)
            return usage();
        return watch_health(socket, args.size() - i == 3 ? args[i + 2] : vfiod::test::kHealthV1,
                            timeout);
    }
    if (verb != "prepare" && verb != "unprepare")
        return usage();
    std::vector<DraClaim> claims;
    for (size_t j = i + 2; j < args.size(); ++j) {
        DraClaim c;
        if (!parse_claim(args[j], &c)) {
            std::fprintf(stderr, "vfiod-fake-dra-kubelet: %s is not NAMESPACE/NAME/UID\n",
                         args[j].c_str());
            return 2;
        }
        claims.push_back(c);
    }
    if (verb == "prepare")
        return print_call(k.prepare(socket, claims), true);
    return print_call(k.unprepare(socket, claims), false);
}
