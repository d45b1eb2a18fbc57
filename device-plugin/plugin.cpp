#include "plugin.hpp"

#include <malloc.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/pci_paths.hpp"

namespace vfiod::plugin {

namespace {

bool file_exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

}  // namespace

// kubelet.sock exists before the kubelet listens on it: retry a refused connection after 50 ms,
// doubling, for about 3 s in all; after that only a new kubelet.sock starts again.
constexpr auto kFirstRetry = std::chrono::milliseconds(50);
constexpr int kMaxTries = 7;

void Plugin::watch_vfio_dir() {
    if (wd_vfio_ >= 0)
        return;
    wd_vfio_ = inotify_add_watch(inotify_.get(), host_.path(pci_paths::kVfioDir).c_str(),
                                 IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                     IN_DELETE_SELF);
    if (wd_vfio_ < 0 && wd_dev_ < 0)
        wd_dev_ = inotify_add_watch(inotify_.get(), host_.path("dev").c_str(),
                                    IN_CREATE | IN_MOVED_TO);
}

void Plugin::read_inventory() {
    dirty_ = false;
    client::ClientResult r =
        reader_.start([this](const client::ClientResult& res, client::Inventory&& inventory) {
            guarded("applying vfiod's inventory", [&] { on_read(res, std::move(inventory)); });
        });
    if (!r.ok())
        read_failed(r);
}

// From the bus's message processing. A change is applied to the inventory by itself; the
// snapshot follows after this turn's messages (settle()). A change that comes while a whole read
// is due, in flight or backed off is left to that read, or to one after it (the answer may
// predate the change); one that cannot be applied by itself asks for a whole read. So does a
// removal: vfiod removes every object when it stops, and the plugin then keeps the last inventory
// (bindings outlive vfiod); only the read's answer (Unavailable, or the inventory without the
// object) tells a stopping vfiod from a group that is gone.
void Plugin::on_change(sdbus::Message& signal) {
    if (dirty_ || reader_.busy() || read_retry_ || signal.getMemberName() == "InterfacesRemoved" ||
        !inventory_.apply(signal))
        dirty_ = true;
    else
        model_dirty_ = true;
}

// From the bus's message processing: no D-Bus call here, and nothing that waits.
void Plugin::on_read(const client::ClientResult& r, client::Inventory&& inventory) {
    if (r.ok()) {
        if (failures_)
            spdlog::info("vfiod answers again: inventory read");
        failures_ = 0;
        said_absent_ = false;
        inventory_ = std::move(inventory);
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
    auto after = std::make_shared<Snapshot>(make_snapshot(inventory_.view(), [this](unsigned g) {
        return host_.exists(pci_paths::vfio_group(g));
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
    registrar_.start(
        name, plugin_socket_name(name),
        [mailbox = loop_.mailbox(), this, name, id = p.attempt_id](const RegisterOutcome& out) {
            // On a gRPC thread: nothing may escape into gRPC either.
            try {
                mailbox->post([this, name, id, out] {
                    guarded("registering", [&] { registered(name, id, out); });
                });
            } catch (const std::exception& e) {
                spdlog::error("{}: registration outcome lost: {}", name, e.what());
            }
        });
}

void Plugin::registered(const std::string& name, std::uint64_t attempt,
                        const RegisterOutcome& out) {
    registrar_.reap();
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
            guarded("registering", [&] {
                if (file_exists(opts_.kubelet_dir + "/kubelet.sock"))
                    try_register(name);
                else
                    unregistered_[name].retry = 0;  // register_all_pending() on its return
            });
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

void Plugin::guarded(const char* what, const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", what, e.what());
        if (!read_retry_)
            read_failed({client::ClientResult::Code::Failed, std::string(what) + ": " + e.what()});
    }
}

// After each turn of the loop: health first, then a read if one is due, then the heap trimmed.
void Plugin::settle() {
    if (health_dirty_ || model_dirty_) {
        health_dirty_ = model_dirty_ = false;
        rebuild();
    }
    if (dirty_ && !reader_.busy() && !read_retry_)
        read_inventory();
    // Reading 256 devices' objects allocates about 6 MiB for a moment (every property an
    // sd-bus Variant); freed in the middle of the heap, glibc would keep it all resident.
    // Here, not in on_read(): by now the reply and its decoded objects are gone too.
    if (std::exchange(trim_, false))
        malloc_trim(0);
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
    std::shared_ptr<client::Watch> watch;
    try {
        watch = client::watch_inventory(
            bus_,
            [this](sdbus::Message& m) {
                guarded("a change from vfiod", [&] { on_change(m); });
            },
            [this](bool owner) {
                guarded("vfiod's bus name changing hands", [&] { owner_changed(owner); });
            });
    } catch (const sdbus::Error& e) {
        // Without the signals the plugin would serve a stale inventory forever: exit, and let
        // systemd (or the DaemonSet) start us again once the bus lets us subscribe.
        spdlog::critical("cannot follow vfiod's signals on the bus: {}", e.getMessage());
        return 1;
    }

    loop_.watch(inotify_.get(), [this] { guarded("inotify", [this] { handle_inotify(); }); });
    // Once per turn, so that a burst of signals is one read. A change that comes while a read
    // is in flight (or backed off) is read when that is over: the answer may predate it.
    loop_.after_dispatch([this] { guarded("re-reading vfiod's inventory", [this] { settle(); }); });
    loop_.on_signal([this](int signo) {
        spdlog::info("signal {}: sending empty lists and stopping", signo);
        guarded("stopping", [this] {
            registrar_.finish();
            std::vector<ResourceServer*> all;
            for (auto& [name, s] : servers_)
                all.push_back(s.get());
            stop_servers(all);
        });
        loop_.quit(0);
    });
    return loop_.run();
}

}  // namespace vfiod::plugin
