// vfiod-fake-kubelet DIR [POD_RESOURCES_SOCKET]: the tests' fake kubelet as a program, for the
// real-kernel guest and for trying the plugin without a cluster. It serves DIR/kubelet.sock and
// prints one line per event (T: wall-clock seconds since the epoch, as `date +%s.%N`):
//   register T RESOURCE ENDPOINT
//   list T RESOURCE ID=HEALTH[@NUMA] ...
//   end T RESOURCE STATUS
// and answers commands read from stdin, one per line:
//   allocate RESOURCE ID[,ID...]  ->  allocate ok ENV=VALUE PATH... | allocate error CODE MESSAGE
#include <time.h>

#include <cstdio>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "fake_kubelet.hpp"

namespace {

double now() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

std::mutex out_mu;
void emit(const std::string& line) {
    std::lock_guard l(out_mu);
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: vfiod-fake-kubelet DIR [POD_RESOURCES_SOCKET]\n");
        return 2;
    }
    vfiod::test::FakeKubelet k(argv[1], argc == 3 ? argv[2] : "");
    if (!k.start()) {
        std::fprintf(stderr, "vfiod-fake-kubelet: cannot serve %s/kubelet.sock\n", argv[1]);
        return 1;
    }
    using Stream = vfiod::test::FakeKubelet::Stream;
    std::thread printer([&k] {
        size_t regs = 0;
        std::vector<size_t> lists;
        std::vector<bool> ended;
        auto fresh = [&](const std::vector<Stream>& ss) {
            if (ss.size() != lists.size())
                return true;
            for (size_t i = 0; i < ss.size(); ++i)
                if (ss[i].lists.size() != lists[i] || ss[i].ended != ended[i])
                    return true;
            return false;
        };
        for (;;) {
            k.wait(fresh, std::chrono::hours(1));
            auto ss = k.streams();
            auto rs = k.registrations();
            for (; regs < rs.size(); ++regs)
                emit("register " + std::to_string(now()) + " " +
                     rs[regs].request.resource_name() + " " + rs[regs].request.endpoint());
            lists.resize(ss.size(), 0);
            ended.resize(ss.size(), false);
            for (size_t i = 0; i < ss.size(); ++i) {
                for (; lists[i] < ss[i].lists.size(); ++lists[i]) {
                    const auto& l = ss[i].lists[lists[i]];
                    std::ostringstream line;
                    line << "list " << std::to_string(now()) << " " << ss[i].resource;
                    for (const auto& [id, h] : l.health) {
                        line << " " << id << "=" << h;
                        auto n = l.numa.find(id);
                        if (n != l.numa.end())
                            for (auto node : n->second)
                                line << "@" << node;
                    }
                    emit(line.str());
                }
                if (ss[i].ended && !ended[i]) {
                    ended[i] = true;
                    emit("end " + std::to_string(now()) + " " + ss[i].resource + " " +
                         ss[i].end_status);
                }
            }
        }
    });
    printer.detach();
    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd, resource, ids;
        in >> cmd >> resource >> ids;
        if (cmd != "allocate") {
            emit("error unknown command: " + line);
            continue;
        }
        std::vector<std::string> list;
        std::istringstream split(ids);
        for (std::string id; std::getline(split, id, ',');)
            list.push_back(id);
        v1beta1::AllocateResponse r;
        grpc::Status s = k.allocate(resource, {list}, &r);
        if (!s.ok()) {
            emit("allocate error " + std::to_string(s.error_code()) + " " + s.error_message());
            continue;
        }
        std::string out = "allocate ok";
        for (const auto& c : r.container_responses()) {
            for (const auto& [key, v] : c.envs())
                out += " " + key + "=" + v;
            for (const auto& d : c.devices())
                out += " " + d.host_path();
        }
        emit(out);
    }
    return 0;
}
