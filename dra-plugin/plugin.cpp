#include "plugin.hpp"

#include <utility>

#include <spdlog/spdlog.h>

#include "core/pci_paths.hpp"

namespace vfiod::dra {

std::string Options::under_root(const std::string& host_path) const {
    if (root.empty() || root == "/")
        return host_path;
    std::string r = root;
    while (r.size() > 1 && r.back() == '/')
        r.pop_back();
    return r + host_path;
}

DraPlugin::DraPlugin(const Options& o, sdbus::IConnection& bus, Loop& loop, KubeApi& api)
    : opts_(o),
      loop_(loop),
      host_(o.root),
      follower_(bus, loop, [this](plugin::InventoryFollower::Update how) { updated(how); }),
      publisher_(api, SlicePublisher::Options{o.driver, o.node}),
      preparer_(Preparer::Options{o.driver, o.node, o.cdi_dir, o.state_dir}, api,
                [this] { return inventory(); }, host_),
      servers_(KubeletServers::Options{o.driver, o.registrar_dir, o.plugin_dir,
                                       o.plugin_dir + "/dra.sock", o.root,
                                       HealthStreams::Options{.pool = o.node}},
               [this](const ClaimRef& c, const CallLimit& l) { return preparer_.prepare(c, l); },
               [this](const ClaimRef& c, const CallLimit& l) { return preparer_.unprepare(c, l); }) {}

std::shared_ptr<const DraInventory> DraPlugin::inventory() const { return inventory_.get(); }

// A whole read is published at once; a signal's change after this turn's messages, with
// whatever else they changed.
void DraPlugin::updated(plugin::InventoryFollower::Update how) {
    if (how == plugin::InventoryFollower::Update::Read)
        rebuild();
    else
        rebuild_due_ = true;
}

void DraPlugin::rebuild() {
    watches_.watch_vfio_dir(host_);
    std::shared_ptr<const DraInventory> before = inventory();
    auto after = make_inventory(follower_.view(), [this](unsigned g) {
        return host_.exists(pci_paths::vfio_group(g));
    }, host_, before.get());
    inventory_.set(after);
    if (before && before->devices == after->devices)
        return;
    spdlog::info("publishing {} device(s){}", after->devices.size(),
                 before ? "" : " (vfiod's inventory read)");
    publisher_.publish(after->devices);
    servers_.publish_health(after->devices);
}

// The registrar directory changed (the kubelet's plugin watcher, or someone removing our
// socket), or a /dev/vfio node came or went (health).
void DraPlugin::handle_inotify() {
    plugin::Watches::Seen seen = watches_.read();
    if (seen.vfio)
        rebuild_due_ = true;
    if (seen.kubelet_dir)
        servers_.check_registration();
}

void DraPlugin::settle() {
    if (std::exchange(rebuild_due_, false) && inventory())
        rebuild();
    follower_.settle();
}

void DraPlugin::stop(int signo) {
    spdlog::info("signal {}: stopping (the slices stay; the kubelet removes them)", signo);
    guarded("stopping", [this] {
        servers_.shutdown();
        publisher_.stop();
    });
    loop_.quit(0);
}

int DraPlugin::run(sdbus::IConnection& bus) {
    std::string err;
    if (!preparer_.load(&err) || !servers_.start(&err) ||
        !watches_.open(opts_.under_root(opts_.registrar_dir), &err) ||
        !follower_.follow(bus, &err)) {
        spdlog::critical("{}", err);
        return 1;
    }
    publisher_.start();
    loop_.watch(watches_.fd(), [this] { guarded("inotify", [this] { handle_inotify(); }); });
    loop_.after_dispatch([this] { guarded("re-reading vfiod's inventory", [this] { settle(); }); });
    loop_.on_signal([this](int signo) { stop(signo); });
    return loop_.run();
}

}  // namespace vfiod::dra
