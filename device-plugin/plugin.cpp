#include "plugin.hpp"

#include <sys/stat.h>

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

Plugin::Plugin(const Options& o, sdbus::IConnection& bus, Loop& loop)
    : loop_(loop),
      host_(o.root),
      endpoints_{o.kubelet_dir, o.pod_resources},
      registrations_(o.kubelet_dir, loop,
                     [this](const char* what, const std::function<void()>& f) {
                         guarded(what, f);
                     }),
      follower_(bus, loop, [this](InventoryFollower::Update how) { updated(how); }) {}

// A whole read is served at once, as it was read; a signal's change after this turn's
// messages, with whatever else they changed.
void Plugin::updated(InventoryFollower::Update how) {
    if (how == InventoryFollower::Update::Read)
        rebuild();
    else
        rebuild_due_ = true;
}

void Plugin::rebuild() {
    watches_.watch_vfio_dir(host_);
    auto before = store_.get();
    auto after = std::make_shared<Snapshot>(make_snapshot(follower_.view(), [this](unsigned g) {
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

namespace {

// One line per health change, none for an unchanged list: a function's health, an mdev listed
// (served) or withdrawn (DESIGN §12), or its health (§13).
void log_changes(const Snapshot& before, const Snapshot& after) {
    for (const auto& [name, devices] : after.resources)
        for (const auto& d : devices) {
            const PluginDevice* old = before.find(name, d.address);
            if (!old || old->healthy != d.healthy)
                spdlog::info("{}: {} (IOMMU group {}) {}", name, d.address.str(), d.group,
                             d.healthy ? "Healthy" : "Unhealthy");
        }
    for (const auto& [name, mdevs] : after.mdev_resources)
        for (const auto& m : mdevs) {
            const PluginMdev* old = before.find_mdev(name, m.uuid);
            if (!old || old->healthy != m.healthy)
                spdlog::info("{}: mdev {} (IOMMU group {}) {}", name, m.uuid, m.group,
                             m.healthy ? "Healthy" : "Unhealthy");
        }
    for (const auto& [name, mdevs] : before.mdev_resources)
        for (const auto& m : mdevs) {
            if (after.find_mdev(name, m.uuid))
                continue;
            auto w = after.withdrawn.find(m.uuid);
            spdlog::info("{}: mdev {} withdrawn: {}", name, m.uuid,
                         w != after.withdrawn.end() ? w->second.second
                                                    : "no longer published by vfiod");
        }
}

}  // namespace

void Plugin::reconcile(const Snapshot& before, const Snapshot& after) {
    for (const auto& [name, why] : after.refused)
        if (!before.refused.count(name))
            spdlog::error("{}: not served: {}", name, why);
    std::vector<ResourceServer*> gone;
    for (auto& [name, server] : servers_)
        if (!after.serves(name))
            gone.push_back(server.get());
    stop_servers(gone);
    for (ResourceServer* server : gone) {
        const std::string name = server->resource();  // the map's key dies with the entry
        spdlog::info("{}: no longer published by vfiod; endpoint stopped", name);
        registrations_.forget(name);
        servers_.erase(name);
    }
    log_changes(before, after);
    // One endpoint per resource name, of either kind.
    for (const auto& [name, devices] : after.resources)
        serve(name);
    for (const auto& [name, mdevs] : after.mdev_resources)
        serve(name);
    for (auto& [name, s] : servers_)
        s->publish();
    registrations_.register_all();
}

void Plugin::serve(const std::string& name) {
    if (servers_.count(name))
        return;
    auto server = std::make_unique<ResourceServer>(name, endpoints_, store_, host_);
    std::string err;
    if (!server->serve(&err)) {
        spdlog::error("{}: {}", name, err);
        return;
    }
    spdlog::info("{}: serving on {}", name, server->socket_path());
    servers_[name] = std::move(server);
    registrations_.need(name);
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
        registrations_.need(name);
    }
    if (kubelet_restarted)
        spdlog::info("kubelet.sock (re)created: registering again");
    registrations_.register_all();
}

void Plugin::handle_inotify() {
    Watches::Seen seen = watches_.read();
    if (seen.vfio)
        rebuild_due_ = true;
    if (seen.kubelet_dir)
        check_sockets(seen.kubelet_restarted);
}

// After each turn of the loop: health first, then a read if one is due, then the heap trimmed.
void Plugin::settle() {
    if (std::exchange(rebuild_due_, false))
        rebuild();
    follower_.settle();
}

void Plugin::stop(int signo) {
    spdlog::info("signal {}: sending empty lists and stopping", signo);
    guarded("stopping", [this] {
        registrations_.finish();
        std::vector<ResourceServer*> all;
        for (auto& [name, s] : servers_)
            all.push_back(s.get());
        stop_servers(all);
    });
    loop_.quit(0);
}

int Plugin::run(sdbus::IConnection& bus) {
    std::string err;
    if (!watches_.open(endpoints_.kubelet_dir, &err) || !follower_.follow(bus, &err)) {
        spdlog::critical("{}", err);
        return 1;
    }
    loop_.watch(watches_.fd(), [this] { guarded("inotify", [this] { handle_inotify(); }); });
    // Once per turn, so that a burst of signals is one read. A change that comes while a read
    // is in flight (or backed off) is read when that is over: the answer may predate it.
    loop_.after_dispatch([this] { guarded("re-reading vfiod's inventory", [this] { settle(); }); });
    loop_.on_signal([this](int signo) { stop(signo); });
    return loop_.run();
}

}  // namespace vfiod::plugin
