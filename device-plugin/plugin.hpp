// vfiod-device-plugin's engine (DESIGN §9, §12): serves vfiod's inventory (follower.hpp) to the
// kubelet, one ResourceServer per published resource (functions or mdevs), registered
// (registrations.hpp) and served again when the kubelet restarts, with health from /dev/vfio
// (watches.hpp). Runs on
// one Loop thread; gRPC threads reach it only through the loop's mailbox. It owns its servers
// and the snapshot they answer from; it never writes to sysfs and never calls vfiod's methods.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

#include "follower.hpp"
#include "infra/loop.hpp"
#include "io/host_fs.hpp"
#include "model.hpp"
#include "registrations.hpp"
#include "server.hpp"
#include "watches.hpp"

namespace vfiod::plugin {

// The command line, as main() parsed it.
struct Options {
    std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
    std::string pod_resources = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::string root = "/";
    bool verbose = false;
};

class Plugin {
public:
    Plugin(const Options& o, sdbus::IConnection& bus, Loop& loop);

    // Until SIGTERM/SIGINT (0); 1 when it cannot start (no inotify, no match on the bus) or the
    // bus is lost.
    int run(sdbus::IConnection& bus);

private:
    void guarded(const char* what, const std::function<void()>& f) { follower_.guarded(what, f); }
    void settle();
    void updated(InventoryFollower::Update how);
    void rebuild();
    void reconcile(const Snapshot& before, const Snapshot& after);
    // Starts the endpoint of resource `name` unless it has one.
    void serve(const std::string& name);
    void stop_servers(const std::vector<ResourceServer*>& servers);
    void check_sockets(bool kubelet_restarted);
    void handle_inotify();
    void stop(int signo);

    Loop& loop_;
    KernelHostFs host_;
    Endpoints endpoints_;
    // Destroyed after the servers, as the Registrar's comment asks of gRPC objects.
    Registrations registrations_;
    SnapshotStore store_;
    InventoryFollower follower_;
    std::map<std::string, std::unique_ptr<ResourceServer>> servers_;
    Watches watches_;
    bool rebuild_due_ = false;  // the snapshot is due: a change, or a /dev/vfio node came or went
};

}  // namespace vfiod::plugin
