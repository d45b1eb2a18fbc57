// vfiod-device-plugin: the kubelet device plugin fed by vfiod's D-Bus inventory (DESIGN §9).
// One thread runs a Loop (infra/loop.hpp, the daemon's too): D-Bus, inotify on the kubelet
// directory and /dev/vfio, signals, registration retries. gRPC serves the kubelet from its own
// threads out of the shared snapshot, and hands Register's outcome back through the mailbox.
// Nothing on the loop waits for vfiod: its inventory is read asynchronously (client::ViewReader),
// so a frozen or hostile vfiod delays neither serving, registration, health nor SIGTERM.
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "dbus_client.hpp"
#include "infra/fd.hpp"
#include "io/host_fs.hpp"
#include "model.hpp"
#include "server.hpp"
#include "infra/logging.hpp"
#include "infra/loop.hpp"

namespace {

using namespace vfiod;
using namespace vfiod::plugin;

constexpr const char* kUsage =
    "Usage: vfiod-device-plugin [--kubelet-dir DIR] [--pod-resources PATH] [--root DIR] "
    "[--verbose]\n"
    "\n"
    "Serves vfiod's pass-through devices to the kubelet (device plugin API v1beta1): one\n"
    "resource per ResourceName that vfiod publishes on the system bus (org.vfiod1), device ID =\n"
    "PCI address, Healthy while the IOMMU group is bound and /dev/vfio/<N> exists. It never\n"
    "starts vfiod; while vfiod is away it keeps the last inventory and follows /dev/vfio.\n"
    "It never waits for vfiod: a read it does not answer within 5 s is tried again later.\n"
    "\n"
    "  --kubelet-dir DIR     the kubelet's device plugin directory, with kubelet.sock\n"
    "                        (default /var/lib/kubelet/device-plugins)\n"
    "  --pod-resources PATH  the kubelet's PodResources socket, asked before an Allocate that\n"
    "                        could split an IOMMU group\n"
    "                        (default /var/lib/kubelet/pod-resources/kubelet.sock)\n"
    "  --root DIR            look for dev/vfio and sys under DIR (tests); answers still name\n"
    "                        host paths such as /dev/vfio/13\n"
    "  --verbose             debug logging\n"
    "  --help, --version\n"
    "\n"
    "DBUS_SYSTEM_BUS_ADDRESS selects another system bus. SIGTERM sends every open ListAndWatch\n"
    "stream an empty list, then exits 0.\n"
    "Exit status: 0 stopped by a signal; 1 runtime failure (no system bus, another instance on\n"
    "the same kubelet directory); 2 bad arguments.\n";

struct Options {
    std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
    std::string pod_resources = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::string root = "/";
    bool verbose = false;
};

// 0 to run, otherwise the exit code + 1.
int parse(int argc, char** argv, Options* o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kUsage, stdout);
            return 1;
        }
        if (a == "--version") {
            std::puts("vfiod-device-plugin " VFIOD_VERSION);
            return 1;
        }
        if (a == "--verbose") {
            o->verbose = true;
            continue;
        }
        std::string* target = a == "--kubelet-dir"     ? &o->kubelet_dir
                              : a == "--pod-resources" ? &o->pod_resources
                              : a == "--root"          ? &o->root
                                                       : nullptr;
        if (!target) {
            std::fprintf(stderr, "vfiod-device-plugin: unknown argument '%s'\n%s", a.c_str(),
                         kUsage);
            return 3;
        }
        if (i + 1 >= argc || argv[i + 1][0] == '\0') {
            std::fprintf(stderr, "vfiod-device-plugin: %s needs a value\n", a.c_str());
            return 3;
        }
        *target = argv[++i];
    }
    return 0;
}

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

// vfiod answers its whole inventory in tens of milliseconds (bench/README.md: 28 ms for 4,000
// objects); one that has not answered in 5 s is frozen or hostile, and the plugin goes on with
// what it knows.
constexpr auto kReadTimeout = std::chrono::seconds(5);
// After a failed read the next one waits 1 s, doubling up to 30 s, whatever vfiod's signals say
// meanwhile: a frozen or garbage-answering vfiod is asked again now and then, never in a loop.
constexpr auto kFirstReadRetry = std::chrono::seconds(1);
constexpr auto kMaxReadRetry = std::chrono::seconds(30);

class Plugin {
public:
    Plugin(const Options& o, sdbus::IConnection& bus, Loop& loop)
        : opts_(o),
          bus_(bus),
          loop_(loop),
          host_(o.root),
          endpoints_{o.kubelet_dir, o.pod_resources},
          reader_(bus, kReadTimeout) {}

    int run();

private:
    // A resource not registered with the current kubelet yet.
    struct Pending {
        std::uint64_t attempt_id = 0;  // the Register in flight; 0 when none is
        int tries = 0;                 // failed for want of a listener, in a row
        Loop::TimerId retry = 0;       // the next try, when one is scheduled
    };

    void read_inventory();
    void on_read(const client::ClientResult& r, client::DaemonView&& view);
    void read_failed(const client::ClientResult& r);
    void owner_changed(bool owner);
    void rebuild();
    void reconcile(const Snapshot& before, const Snapshot& after);
    void stop_servers(const std::vector<ResourceServer*>& servers);
    void check_sockets(bool kubelet_restarted);
    void register_all_pending();
    void need_registration(const std::string& name);
    void try_register(const std::string& name);
    void registered(const std::string& name, std::uint64_t attempt, const RegisterOutcome& out);
    void watch_vfio_dir();
    void handle_inotify();

    const Options& opts_;
    sdbus::IConnection& bus_;
    Loop& loop_;
    KernelHostFs host_;
    Endpoints endpoints_;
    SnapshotStore store_;
    client::DaemonView view_;
    client::ViewReader reader_;
    int failures_ = 0;            // reads failed in a row (not for want of an owner)
    Loop::TimerId read_retry_ = 0;  // the backed-off next read, while one is scheduled
    bool said_absent_ = false;
    std::map<std::string, std::unique_ptr<ResourceServer>> servers_;
    std::map<std::string, Pending> unregistered_;
    std::uint64_t attempts_ = 0;
    bool said_waiting_ = false;

    Fd inotify_;
    int wd_kubelet_ = -1, wd_vfio_ = -1, wd_dev_ = -1;
    bool dirty_ = true, health_dirty_ = false;
    bool trim_ = false;  // an inventory was read: give its memory back
};

// kubelet.sock exists before the kubelet listens on it: retry a refused connection after 50 ms,
// doubling, for about 3 s in all; after that only a new kubelet.sock starts again.
constexpr auto kFirstRetry = std::chrono::milliseconds(50);
constexpr int kMaxTries = 7;

void Plugin::watch_vfio_dir() {
    if (wd_vfio_ >= 0)
        return;
    wd_vfio_ = inotify_add_watch(inotify_.get(), host_.path("dev/vfio").c_str(),
                                 IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                     IN_DELETE_SELF);
    if (wd_vfio_ < 0 && wd_dev_ < 0)
        wd_dev_ = inotify_add_watch(inotify_.get(), host_.path("dev").c_str(),
                                    IN_CREATE | IN_MOVED_TO);
}

void Plugin::read_inventory() {
    dirty_ = false;
    client::ClientResult r =
        reader_.start([this](const client::ClientResult& res, client::DaemonView&& view) {
            on_read(res, std::move(view));
        });
    if (!r.ok())
        read_failed(r);
}

// From the bus's message processing: no D-Bus call here, and nothing that waits.
void Plugin::on_read(const client::ClientResult& r, client::DaemonView&& view) {
    if (r.ok()) {
        if (failures_)
            spdlog::info("vfiod answers again: inventory read");
        failures_ = 0;
        said_absent_ = false;
        view_ = std::move(view);
        rebuild();
        trim_ = true;
    } else if (r.code == client::ClientResult::Code::Unavailable) {
        // Read again on NameOwnerChanged, not before.
        if (!said_absent_)
            spdlog::info("vfiod is not running; waiting for org.vfiod1 on the system bus");
        said_absent_ = true;
        failures_ = 0;
    } else {
        read_failed(r);
    }
}

// Keeps the last inventory (bindings outlive a sick vfiod; /dev/vfio still drives health) and
// reads again after a backoff. One warning per episode.
void Plugin::read_failed(const client::ClientResult& r) {
    auto delay = std::min<std::chrono::seconds>(kFirstReadRetry * (1 << std::min(failures_, 5)),
                                                kMaxReadRetry);
    if (failures_++ == 0)
        spdlog::warn("cannot read vfiod's inventory: {}; serving the last one known, asking "
                     "again in {} s and backing off", r.message, delay.count());
    else
        spdlog::debug("vfiod's inventory still unreadable: {}; asking again in {} s", r.message,
                      delay.count());
    read_retry_ = loop_.after(delay, [this] {
        read_retry_ = 0;
        dirty_ = true;
    });
}

// A new owner is a new vfiod: what was in flight or backed off concerned the old one.
void Plugin::owner_changed(bool owner) {
    reader_.cancel();
    loop_.cancel(read_retry_);
    read_retry_ = 0;
    failures_ = 0;
    dirty_ = owner;
    if (owner)
        spdlog::info("vfiod is on the bus: re-reading its inventory");
    else
        spdlog::warn("vfiod left the bus: keeping the last inventory, following /dev/vfio for "
                     "health");
}

void Plugin::rebuild() {
    watch_vfio_dir();
    auto before = store_.get();
    auto after = std::make_shared<Snapshot>(make_snapshot(view_, [this](unsigned g) {
        return host_.exists("dev/vfio/" + std::to_string(g));
    }));
    store_.set(after);
    reconcile(*before, *after);
}

// Every server's streams get their empty list at once, and all of them share one grace period:
// a stream the kubelet never reads holds its server until the deadline, and several such must
// not cost one deadline each (issue 23: SIGTERM took 4.2 s with four).
void Plugin::stop_servers(const std::vector<ResourceServer*>& servers) {
    for (ResourceServer* s : servers)
        s->close_streams();
    auto deadline = std::chrono::system_clock::now() + kStopGrace;
    for (ResourceServer* s : servers)
        s->stop(deadline);
}

void Plugin::reconcile(const Snapshot& before, const Snapshot& after) {
    for (const auto& [name, why] : after.refused)
        if (!before.refused.count(name))
            spdlog::error("{}: not served: {}", name, why);
    std::vector<ResourceServer*> gone;
    for (auto& [name, server] : servers_)
        if (!after.resources.count(name))
            gone.push_back(server.get());
    stop_servers(gone);
    for (ResourceServer* server : gone) {
        const std::string name = server->resource();  // the map's key dies with the entry
        spdlog::info("{}: no longer published by vfiod; endpoint stopped", name);
        if (auto p = unregistered_.find(name); p != unregistered_.end()) {
            loop_.cancel(p->second.retry);
            unregistered_.erase(p);
        }
        servers_.erase(name);
    }
    for (const auto& [name, devices] : after.resources) {
        // One line per health change, none for an unchanged list.
        for (const auto& d : devices) {
            const PluginDevice* old = before.find(name, d.address.str());
            if (!old || old->healthy != d.healthy)
                spdlog::info("{}: {} (IOMMU group {}) {}", name, d.address.str(), d.group,
                             d.healthy ? "Healthy" : "Unhealthy");
        }
        if (servers_.count(name))
            continue;
        auto server = std::make_unique<ResourceServer>(name, endpoints_, store_, host_);
        std::string err;
        if (!server->serve(&err)) {
            spdlog::error("{}: {}", name, err);
            continue;
        }
        spdlog::info("{}: serving on {}", name, server->socket_path());
        servers_[name] = std::move(server);
        need_registration(name);
    }
    for (auto& [name, s] : servers_)
        s->publish();
    register_all_pending();
}

// A resource to register (again): a fresh start, whatever was in flight or scheduled.
void Plugin::need_registration(const std::string& name) {
    auto& p = unregistered_[name];
    loop_.cancel(p.retry);
    p = Pending{};
}

void Plugin::register_all_pending() {
    if (unregistered_.empty())
        return;
    if (!file_exists(opts_.kubelet_dir + "/kubelet.sock")) {
        if (!said_waiting_)
            spdlog::info("waiting for the kubelet: no {}/kubelet.sock yet", opts_.kubelet_dir);
        said_waiting_ = true;
        return;
    }
    said_waiting_ = false;
    for (auto& [name, p] : unregistered_)
        if (!p.attempt_id && !p.retry && p.tries < kMaxTries)
            try_register(name);
}

void Plugin::try_register(const std::string& name) {
    auto s = servers_.find(name);
    if (s == servers_.end()) {
        unregistered_.erase(name);
        return;
    }
    auto& p = unregistered_[name];
    p.retry = 0;
    p.attempt_id = ++attempts_;
    s->second->register_with_kubelet(
        [mailbox = loop_.mailbox(), this, name, id = p.attempt_id](const RegisterOutcome& out) {
            mailbox->post([this, name, id, out] { registered(name, id, out); });
        });
}

void Plugin::registered(const std::string& name, std::uint64_t attempt,
                        const RegisterOutcome& out) {
    auto it = unregistered_.find(name);
    if (it == unregistered_.end() || it->second.attempt_id != attempt)
        return;  // superseded: the resource went, or the kubelet restarted meanwhile
    Pending& p = it->second;
    p.attempt_id = 0;
    if (out.ok) {
        spdlog::info("{}: registered with the kubelet", name);
        unregistered_.erase(it);
        return;
    }
    if (out.unreachable && ++p.tries < kMaxTries) {
        spdlog::debug("{}; trying again", out.error);
        p.retry = loop_.after(kFirstRetry * (1 << (p.tries - 1)), [this, name] {
            if (file_exists(opts_.kubelet_dir + "/kubelet.sock"))
                try_register(name);
            else
                unregistered_[name].retry = 0;  // register_all_pending() on its return
        });
        return;
    }
    // A refusal, or nobody listening for seconds: tried again when the kubelet (re)creates its
    // socket.
    p.tries = kMaxTries;
    spdlog::error("{}", out.error);
}

// The kubelet removes every plugin socket when it starts, then creates kubelet.sock: serve again
// where our socket is gone, and register everything again on a new kubelet.sock.
void Plugin::check_sockets(bool kubelet_restarted) {
    for (auto& [name, s] : servers_) {
        if (file_exists(s->socket_path()) && !kubelet_restarted)
            continue;
        if (!file_exists(s->socket_path())) {
            std::string err;
            spdlog::info("{}: socket removed; serving again", name);
            if (!s->serve(&err)) {
                spdlog::error("{}: {}", name, err);
                continue;
            }
        }
        need_registration(name);
    }
    if (kubelet_restarted)
        spdlog::info("kubelet.sock (re)created: registering again");
    register_all_pending();
}

void Plugin::handle_inotify() {
    alignas(inotify_event) char buf[4096];
    bool kubelet_event = false, kubelet_restarted = false;
    for (;;) {
        ssize_t n = read(inotify_.get(), buf, sizeof buf);
        if (n <= 0)
            break;
        for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<inotify_event*>(p);
            std::string name = ev->len ? ev->name : "";
            if (ev->wd == wd_kubelet_) {
                kubelet_event = true;
                if (name == "kubelet.sock" && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
                    kubelet_restarted = true;
            } else if (ev->wd == wd_vfio_) {
                health_dirty_ = true;
                if (ev->mask & (IN_DELETE_SELF | IN_IGNORED))
                    wd_vfio_ = -1;
            } else if (ev->wd == wd_dev_ && name == "vfio") {
                health_dirty_ = true;
            }
            p += sizeof(inotify_event) + ev->len;
        }
    }
    if (kubelet_event)
        check_sockets(kubelet_restarted);
}

int Plugin::run() {
    inotify_.reset(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (inotify_.get() < 0) {
        spdlog::critical("cannot create an inotify instance: {}", std::strerror(errno));
        return 1;
    }
    wd_kubelet_ = inotify_add_watch(inotify_.get(), opts_.kubelet_dir.c_str(),
                                    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
    if (wd_kubelet_ < 0) {
        spdlog::critical("cannot watch {}: {}", opts_.kubelet_dir, std::strerror(errno));
        return 1;
    }
    auto watch = client::watch_inventory(
        bus_, [this] { dirty_ = true; }, [this](bool owner) { owner_changed(owner); });

    loop_.watch(inotify_.get(), [this] { handle_inotify(); });
    // Once per turn, so that a burst of signals is one read. A change that comes while a read
    // is in flight (or backed off) is read when that is over: the answer may predate it.
    loop_.after_dispatch([this] {
        if (health_dirty_) {
            health_dirty_ = false;
            rebuild();
        }
        if (dirty_ && !reader_.busy() && !read_retry_)
            read_inventory();
        // Reading 256 devices' objects allocates about 6 MiB for a moment (every property an
        // sd-bus Variant); freed in the middle of the heap, glibc would keep it all resident.
        // Here, not in on_read(): by now the reply and its decoded objects are gone too.
        if (std::exchange(trim_, false))
            malloc_trim(0);
    });
    loop_.on_signal([this](int signo) {
        spdlog::info("signal {}: sending empty lists and stopping", signo);
        std::vector<ResourceServer*> all;
        for (auto& [name, s] : servers_)
            all.push_back(s.get());
        stop_servers(all);
        loop_.quit(0);
    });
    return loop_.run();
}

// One plugin per kubelet directory: a second one would take over the first one's sockets.
// The lock is on the directory itself, which the kubelet never removes.
bool lock_instance(const std::string& dir, Fd* lock) {
    mkdir(dir.c_str(), 0750);  // the kubelet may not have run yet; it creates it the same way
    lock->reset(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (lock->get() < 0) {
        spdlog::critical("cannot open the kubelet directory {}: {}", dir, std::strerror(errno));
        return false;
    }
    if (flock(lock->get(), LOCK_EX | LOCK_NB) != 0) {
        spdlog::critical("another vfiod-device-plugin already serves {} ({}); exiting", dir,
                         errno == EWOULDBLOCK ? "its lock is held" : std::strerror(errno));
        return false;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    Options opts;
    if (int r = parse(argc, argv, &opts))
        return r - 1;
    vfiod::setup_logging(opts.verbose, "vfiod-device-plugin");
    // Before gRPC starts its threads, so they inherit the mask and signalfd sees the signals.
    sigset_t signals = signal_set({SIGTERM, SIGINT});
    block_signals(signals);
    signal(SIGPIPE, SIG_IGN);

    Fd lock;
    if (!lock_instance(opts.kubelet_dir, &lock))
        return 1;
    std::unique_ptr<sdbus::IConnection> bus = connect_system_bus();
    if (!bus)
        return 1;
    spdlog::info("vfiod-device-plugin {} starting: kubelet directory {}, root {}", VFIOD_VERSION,
                 opts.kubelet_dir, opts.root);
    Loop loop(*bus, signals);
    Plugin plugin(opts, *bus, loop);
    return plugin.run();
}
