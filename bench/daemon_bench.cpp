// vfiod-bench-daemon [--smoke] VFIOD ROOT: the real vfiod (observe mode) on a benchmark tree and
// the system bus named by DBUS_SYSTEM_BUS_ADDRESS (bench/run.sh starts a private one):
//   ready    fork+exec to its sd_notify READY=1 (NOTIFY_SOCKET is ours), median of runs
//   rss      VmRSS of the ready daemon (and VmHWM, its peak during the coldplug read; RssAnon,
//            its heap and stacks, without the shared libraries' pages it has touched)
//   gmo      one GetManagedObjects call on a fresh connection's proxy, median of calls: the
//            reply decoded by sdbus-c++ into maps of Variants, as a C++ client sees it
//   gmo_reply the same call on plain sd-bus, timed until the whole reply has arrived (what
//            vfiod and the bus cost; no decoding), then walked once to count its objects;
//            gmo_cpu: vfiod's CPU time per call over them (/proc/PID/stat), the bus's not in it
//   reload   a root Reload on a quiet daemon, and the same with 120 GetManagedObjects calls in
//            flight ahead of it (issue 23, finding 6), timed until its reply; median of runs
//   floor_gmo_reply (with --floor FLOOR, issue 25) once vfiod has stopped: FLOOR
//            (vfiod-bench-sdbus-floor) serving as many groups and devices as vfiod's reply held,
//            on the same bus and name, timed by the same client code as gmo_reply (and
//            floor_gmo_cpu, its CPU per call)
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
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
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

// CPU time (user + system) `pid` has used so far, in milliseconds.
double cpu_ms(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto close = stat.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos)
        return -1;
    std::istringstream fields(stat.substr(close + 2));
    std::string skip;
    for (int i = 3; i < 14; ++i)  // state .. cmajflt: fields 3 to 13
        fields >> skip;
    unsigned long long utime = 0, stime = 0;
    fields >> utime >> stime;
    return 1000.0 * static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

struct Daemon {
    pid_t pid = -1;
    double ready_ms = -1;
};

// Starts `argv` and waits (at most 300 s) for READY=1 on a notify socket of our own.
Daemon start(std::vector<const char*> argv) {
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
    argv.push_back(nullptr);
    auto t0 = Clock::now();
    d.pid = ::fork();
    if (d.pid == 0) {
        ::setenv("NOTIFY_SOCKET", sock.c_str(), 1);
        int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, 2);
        ::execv(argv[0], const_cast<char* const*>(argv.data()));
        ::_exit(127);
    }
    // A child that exits without READY=1 (the floor finding the name still taken) ends the wait
    // at once, not after 300 s.
    for (int waited = 0;;) {
        pollfd p{fd, POLLIN, 0};
        int r = ::poll(&p, 1, 100);
        if (r < 0 || (r == 0 && (waited += 100) >= 300000))
            break;
        if (r == 0) {
            int st;
            if (::waitpid(d.pid, &st, WNOHANG) == d.pid) {
                d.pid = -1;
                break;
            }
            continue;
        }
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

// What one GetManagedObjects reply held, by kind: groups, devices and anything else.
struct Shape {
    long groups = 0, devices = 0, other = 0;
    long objects() const { return groups + devices + other; }
    bool operator==(const Shape&) const = default;
};

// The kind of the object at `path`, counted in `shape`.
void count(Shape& shape, const char* path) {
    std::string_view p(path);
    if (p.starts_with("/org/vfiod1/group/"))
        ++shape.groups;
    else if (p.starts_with("/org/vfiod1/device/"))
        ++shape.devices;
    else
        ++shape.other;
}

// GetManagedObjects on plain sd-bus: milliseconds until the whole reply is in, and the objects
// it holds, counted by kind after the clock stopped (nullopt on error).
std::pair<double, std::optional<Shape>> raw_get_managed_objects(sd_bus* bus) {
    sd_bus_message* reply = nullptr;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    auto t0 = Clock::now();
    int r = sd_bus_call_method(bus, "org.vfiod1", "/org/vfiod1",
                               "org.freedesktop.DBus.ObjectManager", "GetManagedObjects", &error,
                               &reply, "");
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::optional<Shape> shape;
    if (r >= 0 && sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}") > 0) {
        shape.emplace();
        const char* path = nullptr;
        while ((r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}")) > 0 &&
               (r = sd_bus_message_read_basic(reply, 'o', &path)) > 0 &&
               (r = sd_bus_message_skip(reply, "a{sa{sv}}")) > 0 &&
               (r = sd_bus_message_exit_container(reply)) > 0)
            count(*shape, path);
        if (r < 0)
            shape.reset();
    } else if (r < 0) {
        std::fprintf(stderr, "daemon_bench: GetManagedObjects (sd-bus): %s\n",
                     error.message ? error.message : std::strerror(-r));
    }
    sd_bus_error_free(&error);
    sd_bus_message_unref(reply);
    return {ms, shape};
}

// `calls` timed GetManagedObjects on a fresh plain sd-bus connection, appended to `ms`. Every
// reply must hold `expected` objects (its first one's shape when nullopt, then set to it).
// `server`'s CPU time over them, per call, is stored in `cpu` (less noisy than the wall time on a
// shared machine; the bus's share is not in it).
bool timed_replies(int calls, std::optional<Shape>& expected, std::vector<double>& ms,
                   pid_t server, double& cpu) {
    sd_bus* bus = nullptr;
    if (int r = sd_bus_open_system(&bus); r < 0) {
        std::fprintf(stderr, "daemon_bench: sd_bus_open_system: %s\n", std::strerror(-r));
        return false;
    }
    bool ok = true;
    double cpu0 = cpu_ms(server);
    for (int c = 0; ok && c < calls; ++c) {
        auto [t, shape] = raw_get_managed_objects(bus);
        if (!expected)
            expected = shape;
        if (!(ok = shape && *shape == *expected))
            std::fprintf(stderr, "daemon_bench: the sd-bus reply holds %ld objects, not %ld\n",
                         shape ? shape->objects() : -1, expected ? expected->objects() : -1);
        ms.push_back(t);
    }
    cpu = (cpu_ms(server) - cpu0) / calls;
    sd_bus_unref(bus);
    return ok;
}

sd_bus* open_bus() {
    sd_bus* bus = nullptr;
    if (int r = sd_bus_open_system(&bus); r < 0) {
        std::fprintf(stderr, "daemon_bench: sd_bus_open_system: %s\n", std::strerror(-r));
        return nullptr;
    }
    // Before the reads were held back, a Reload behind them took longer than sd-bus's 25 s.
    sd_bus_set_method_call_timeout(bus, 600'000'000);
    return bus;
}

// Milliseconds of a root Reload's call, -1 on error.
double timed_reload(sd_bus* bus) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    auto t0 = Clock::now();
    int r = sd_bus_call_method(bus, "org.vfiod1", "/org/vfiod1", "org.vfiod1.Manager", "Reload",
                               &error, nullptr, "");
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (r < 0)
        std::fprintf(stderr, "daemon_bench: Reload: %s\n",
                     error.message ? error.message : std::strerror(-r));
    sd_bus_error_free(&error);
    return r < 0 ? -1 : ms;
}

// Dispatches what `buses` have received until `done()`, waiting in poll(2) between rounds.
template <typename Done>
void serve_until(const std::vector<sd_bus*>& buses, Done done) {
    while (!done()) {
        std::vector<pollfd> fds;
        for (sd_bus* b : buses) {
            while (sd_bus_process(b, nullptr) > 0) {
            }
            fds.push_back({sd_bus_get_fd(b), static_cast<short>(sd_bus_get_events(b)), 0});
        }
        if (!done())
            ::poll(fds.data(), fds.size(), 100);
    }
}

// A root Reload with `reads` GetManagedObjects calls in flight ahead of it: 10 on each of their
// own connections (the bus lets one wait for 128 replies), all routed to vfiod before the Reload
// is sent. The readers read their replies meanwhile, as real clients do: 120 unread 2 MB replies
// exceed what dbus-daemon buffers for vfiod (max_incoming_bytes, 127 MiB), and it stops reading
// from vfiod. Returns the Reload's milliseconds once every read is answered too, so the next run
// starts on a quiet daemon; -1 on error.
double reload_under_reads(int reads) {
    constexpr int kPerConnection = 10;
    std::vector<sd_bus*> buses;
    int answered = 0;
    auto count = [](sd_bus_message*, void* n, sd_bus_error*) {
        ++*static_cast<int*>(n);
        return 0;
    };
    bool ok = true;
    for (int i = 0; ok && i < reads; ++i) {
        if (i % kPerConnection == 0) {
            sd_bus* b = open_bus();
            if (!(ok = b != nullptr))
                break;
            buses.push_back(b);
        }
        ok = buses.back() &&
             sd_bus_call_method_async(buses.back(), nullptr, "org.vfiod1", "/org/vfiod1",
                                      "org.freedesktop.DBus.ObjectManager", "GetManagedObjects",
                                      count, &answered, "") >= 0;
    }
    // The bus handles each connection's messages in order: its answer to GetId comes after it
    // passed that connection's calls on to vfiod.
    for (sd_bus* b : buses)
        ok = ok && sd_bus_call_method(b, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                                      "org.freedesktop.DBus", "GetId", nullptr, nullptr, "") >= 0;
    sd_bus* bus = ok ? open_bus() : nullptr;
    if (bus)
        buses.push_back(bus);
    struct {
        Clock::time_point start, end;
        bool done = false, failed = false;
    } reload;
    auto reloaded = [](sd_bus_message* m, void* r, sd_bus_error*) {
        auto* rl = static_cast<decltype(reload)*>(r);
        rl->end = Clock::now();
        rl->done = true;
        rl->failed = sd_bus_message_is_method_error(m, nullptr) > 0;
        return 0;
    };
    reload.start = Clock::now();
    if (bus && sd_bus_call_method_async(bus, nullptr, "org.vfiod1", "/org/vfiod1",
                                        "org.vfiod1.Manager", "Reload", reloaded, &reload,
                                        "") >= 0) {
        serve_until(buses, [&] { return reload.done; });
        serve_until(buses, [&] { return answered == reads; });
    }
    for (sd_bus* b : buses)
        sd_bus_flush_close_unref(b);
    if (!reload.done || reload.failed)
        std::fprintf(stderr, "daemon_bench: the Reload behind the reads failed\n");
    return ok && reload.done && !reload.failed
               ? std::chrono::duration<double, std::milli>(reload.end - reload.start).count()
               : -1;
}

void stop(Daemon& d) {
    if (d.pid <= 0)  // never started, or already reaped: kill(-1) would signal everything
        return;
    ::kill(d.pid, SIGTERM);
    int st;
    ::waitpid(d.pid, &st, 0);
    d.pid = -1;
}

struct Figures {
    long rss = -1, hwm = -1, rss_anon = -1, reload_hwm = -1;
    size_t objects = 0;
    int reads = 0;  // GetManagedObjects sent ahead of each Reload
    double gmo_cpu = -1, floor_gmo_cpu = -1;  // the server's CPU per sd-bus call
    std::optional<Shape> shape;  // of the sd-bus replies: the manager is not its own child
    std::vector<double> ready, gmo, gmo_reply, reload, reload_reads, floor_gmo_reply;
};

// GetManagedObjects decoded by an sdbus-c++ proxy into maps of Variants, `calls` times.
bool decoded_replies(int calls, Figures& f) {
    try {
        auto proxy = sdbus::createProxy(sdbus::createSystemBusConnection(), "org.vfiod1",
                                        "/org/vfiod1");
        for (int c = 0; c < calls; ++c) {
            std::map<sdbus::ObjectPath, std::map<std::string, std::map<std::string, sdbus::Variant>>>
                result;
            auto t0 = Clock::now();
            proxy->callMethod("GetManagedObjects")
                .onInterface("org.freedesktop.DBus.ObjectManager")
                .storeResultsTo(result);
            f.gmo.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            f.objects = result.size() + 1;  // + the manager, which is not its own child
        }
        return true;
    } catch (const sdbus::Error& e) {
        std::fprintf(stderr, "daemon_bench: GetManagedObjects: %s\n", e.what());
        return false;
    }
}

// Everything measured on the first ready daemon: RSS, the reads, the Reloads.
bool measure_ready(const Daemon& d, int calls, bool smoke, Figures& f) {
    const int reads = f.reads = smoke ? 12 : 120, reload_runs = smoke ? 1 : 3;
    f.rss = status_kib(d.pid, "VmRSS");
    f.hwm = status_kib(d.pid, "VmHWM");
    f.rss_anon = status_kib(d.pid, "RssAnon");
    if (!decoded_replies(calls, f) || !timed_replies(calls, f.shape, f.gmo_reply, d.pid, f.gmo_cpu))
        return false;
    if (static_cast<size_t>(f.shape->objects()) + 1 != f.objects) {
        std::fprintf(stderr, "daemon_bench: the sd-bus reply holds %ld objects, not %zu\n",
                     f.shape->objects(), f.objects - 1);
        return false;
    }
    sd_bus* bus = open_bus();
    for (int c = 0; bus && c < reload_runs; ++c) {
        f.reload.push_back(timed_reload(bus));
        f.reload_reads.push_back(reload_under_reads(reads));
        std::fprintf(stderr, "daemon_bench: Reload %.1f ms quiet, %.1f ms behind %d reads\n",
                     f.reload.back(), f.reload_reads.back(), reads);
        if (f.reload.back() < 0 || f.reload_reads.back() < 0)
            break;
    }
    sd_bus_unref(bus);
    f.reload_hwm = status_kib(d.pid, "VmHWM");  // the peak, reads buffered included
    return f.reload.size() == static_cast<size_t>(reload_runs) && f.reload.back() >= 0 &&
           f.reload_reads.back() >= 0;
}

// The floor serving the groups and devices of vfiod's reply, once vfiod has left the name.
bool measure_floor(const char* floor, int calls, Figures& f) {
    if (f.shape->other)
        std::fprintf(stderr, "daemon_bench: the floor serves no PF objects; vfiod had %ld\n",
                     f.shape->other);
    std::string groups = std::to_string(f.shape->groups);
    std::string devices = std::to_string(f.shape->devices);
    Daemon d = start({floor, groups.c_str(), devices.c_str()});
    std::optional<Shape> expected = Shape{f.shape->groups, f.shape->devices, 0};
    bool ok = d.ready_ms >= 0 && timed_replies(calls, expected, f.floor_gmo_reply, d.pid, f.floor_gmo_cpu);
    if (d.ready_ms < 0)
        std::fprintf(stderr, "daemon_bench: the sd-bus floor never became ready\n");
    stop(d);
    return ok;
}

void print(const Figures& f, int starts, int calls) {
    std::printf("reload_hwm_kib %ld 1\nrss_anon_kib %ld 1\n", f.reload_hwm, f.rss_anon);
    std::printf("ready_ms %.1f %d\nrss_kib %ld 1\nhwm_kib %ld 1\ngmo_ms %.2f %d\n"
                "gmo_reply_ms %.2f %d\nobjects %zu\nreload_ms %.1f %zu\n"
                "reload_reads_ms %.1f %zu\nreads %d\n",
                median(f.ready), starts, f.rss, f.hwm, median(f.gmo), calls, median(f.gmo_reply),
                calls, f.objects, median(f.reload), f.reload.size(), median(f.reload_reads),
                f.reload_reads.size(), f.reads);
    std::printf("gmo_cpu_ms %.2f %d\n", f.gmo_cpu, calls);
    if (!f.floor_gmo_reply.empty())
        std::printf("floor_gmo_reply_ms %.2f %zu\nfloor_gmo_cpu_ms %.2f %zu\n",
                    median(f.floor_gmo_reply), f.floor_gmo_reply.size(), f.floor_gmo_cpu,
                    f.floor_gmo_reply.size());
}

}  // namespace

int main(int argc, char** argv) {
    bool smoke = false;
    const char* floor = nullptr;
    int a = 1;
    for (; a < argc && argv[a][0] == '-' && argv[a][1] == '-'; ++a)
        if (std::strcmp(argv[a], "--smoke") == 0)
            smoke = true;
        else if (std::strcmp(argv[a], "--floor") == 0 && a + 1 < argc)
            floor = argv[++a];
        else
            break;
    if (argc - a != 2) {
        std::fprintf(stderr, "usage: vfiod-bench-daemon [--smoke] [--floor FLOOR] VFIOD ROOT\n");
        return 2;
    }
    const char* vfiod = argv[a];
    std::string root = argv[a + 1], config = root + "/etc/vfiod/vfiod.toml";
    const int starts = smoke ? 1 : 5, calls = smoke ? 2 : 21;
    Figures f;
    for (int run = 0; run < starts; ++run) {
        Daemon d = start({vfiod, "--root", root.c_str(), "--config", config.c_str(), "--observe"});
        bool ok = d.ready_ms >= 0 && (run > 0 || measure_ready(d, calls, smoke, f));
        if (d.ready_ms < 0)
            std::fprintf(stderr, "daemon_bench: vfiod never became ready\n");
        f.ready.push_back(d.ready_ms);
        stop(d);
        if (!ok)
            return 1;
    }
    if (floor && !measure_floor(floor, calls, f))
        return 1;
    print(f, starts, calls);
    return 0;
}
