// vfiod-bench-daemon [--smoke] VFIOD ROOT: the real vfiod (observe mode) on a benchmark tree and
// the system bus named by DBUS_SYSTEM_BUS_ADDRESS (bench/run.sh starts a private one):
//   ready    fork+exec to its sd_notify READY=1 (NOTIFY_SOCKET is ours), median of runs
//   rss      VmRSS of the ready daemon (and VmHWM, its peak during the coldplug read)
//   gmo      one GetManagedObjects call on a fresh connection's proxy, median of calls: the
//            reply decoded by sdbus-c++ into maps of Variants, as a C++ client sees it
//   gmo_reply the same call on plain sd-bus, timed until the whole reply has arrived (what
//            vfiod and the bus cost; no decoding), then walked once to count its objects
// Prints "name value runs" lines, and "objects N" (what GetManagedObjects returned).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include <sdbus-c++/sdbus-c++.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

long status_kib(pid_t pid, const std::string& key) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, key.size() + 1, key + ":") == 0)
            return std::atol(line.c_str() + key.size() + 1);
    return -1;
}

struct Daemon {
    pid_t pid = -1;
    double ready_ms = -1;
};

// Starts vfiod and waits (at most 300 s) for READY=1 on a notify socket of our own.
Daemon start(const char* vfiod, const std::string& root) {
    Daemon d;
    std::string sock = "/tmp/vfiod-bench-notify-" + std::to_string(::getpid());
    ::unlink(sock.c_str());
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock.c_str());
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        std::perror("notify socket");
        std::exit(1);
    }
    std::string config = root + "/etc/vfiod/vfiod.toml";
    auto t0 = Clock::now();
    d.pid = ::fork();
    if (d.pid == 0) {
        ::setenv("NOTIFY_SOCKET", sock.c_str(), 1);
        int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, 2);
        ::execl(vfiod, vfiod, "--root", root.c_str(), "--config", config.c_str(), "--observe",
                static_cast<char*>(nullptr));
        ::_exit(127);
    }
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 300000) <= 0)
            break;
        char buf[4096];
        ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            break;
        buf[n] = '\0';
        if (std::strstr(buf, "READY=1")) {
            d.ready_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
            break;
        }
    }
    ::close(fd);
    ::unlink(sock.c_str());
    return d;
}

// GetManagedObjects on plain sd-bus: milliseconds until the whole reply is in, and the number
// of objects it holds (-1 on error).
std::pair<double, long> raw_get_managed_objects(sd_bus* bus) {
    sd_bus_message* reply = nullptr;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    auto t0 = Clock::now();
    int r = sd_bus_call_method(bus, "org.vfiod1", "/org/vfiod1",
                               "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", &error,
                               &reply, "");
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    long n = -1;
    if (r >= 0 && sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}") > 0) {
        n = 0;
        while ((r = sd_bus_message_skip(reply, "{oa{sa{sv}}}")) > 0)
            ++n;
        if (r < 0)
            n = -1;
    } else if (r < 0) {
        std::fprintf(stderr, "daemon_bench: GetManagedObjects (sd-bus): %s\n",
                     error.message ? error.message : std::strerror(-r));
    }
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    return {ms, n};
}

void stop(Daemon& d) {
    ::kill(d.pid, SIGTERM);
    int st;
    ::waitpid(d.pid, &st, 0);
}

}  // namespace

int main(int argc, char** argv) {
    bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
    if (argc != 3 + smoke) {
        std::fprintf(stderr, "usage: vfiod-bench-daemon [--smoke] VFIOD ROOT\n");
        return 2;
    }
    const char* vfiod = argv[1 + smoke];
    std::string root = argv[2 + smoke];
    const int starts = smoke ? 1 : 5, calls = smoke ? 2 : 21;

    std::vector<double> ready;
    long rss = -1, hwm = -1;
    size_t objects = 0;
    std::vector<double> gmo, gmo_reply;
    for (int run = 0; run < starts; ++run) {
        Daemon d = start(vfiod, root);
        if (d.ready_ms < 0) {
            std::fprintf(stderr, "daemon_bench: vfiod never became ready\n");
            stop(d);
            return 1;
        }
        ready.push_back(d.ready_ms);
        if (run == 0) {
            rss = status_kib(d.pid, "VmRSS");
            hwm = status_kib(d.pid, "VmHWM");
            try {
                auto proxy = sdbus::createProxy(sdbus::createSystemBusConnection(), "org.vfiod1",
                                                "/org/vfiod1");
                for (int c = 0; c < calls; ++c) {
                    std::map<sdbus::ObjectPath,
                             std::map<std::string, std::map<std::string, sdbus::Variant>>>
                        result;
                    auto t0 = Clock::now();
                    proxy->callMethod("GetManagedObjects")
                        .onInterface("org.freedesktop.DBus.ObjectManager")
                        .storeResultsTo(result);
                    gmo.push_back(
                        std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                    objects = result.size() + 1;  // + the manager, which is not its own child
                }
            } catch (const sdbus::Error& e) {
                std::fprintf(stderr, "daemon_bench: GetManagedObjects: %s\n", e.what());
                stop(d);
                return 1;
            }
            sd_bus* bus = nullptr;
            if (int r = sd_bus_open_system(&bus); r < 0) {
                std::fprintf(stderr, "daemon_bench: sd_bus_open_system: %s\n", std::strerror(-r));
                stop(d);
                return 1;
            }
            for (int c = 0; c < calls; ++c) {
                auto [ms, n] = raw_get_managed_objects(bus);
                if (n < 0 || static_cast<size_t>(n) + 1 != objects) {
                    std::fprintf(stderr, "daemon_bench: the sd-bus reply holds %ld objects, not %zu\n",
                                 n, objects - 1);
                    sd_bus_unref(bus);
                    stop(d);
                    return 1;
                }
                gmo_reply.push_back(ms);
            }
            sd_bus_unref(bus);
        }
        stop(d);
    }
    std::printf("ready_ms %.1f %d\nrss_kib %ld 1\nhwm_kib %ld 1\ngmo_ms %.2f %d\n"
                "gmo_reply_ms %.2f %d\nobjects %zu\n",
                median(ready), starts, rss, hwm, median(gmo), calls, median(gmo_reply), calls,
                objects);
    return 0;
}
