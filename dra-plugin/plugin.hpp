// vfiod-dra-plugin's engine (DESIGN §10): follows vfiod's inventory (plugin-common's
// plugin::InventoryFollower and Watches), turns it into the DRA devices to publish
// (devices.hpp), hands them to the SlicePublisher (its own threads write the API server) and to
// the Preparer (gRPC's threads read it through a shared pointer), and serves the kubelet
// (kubelet.hpp).
// Runs on one Loop thread; nothing on the loop waits for the API server or the kubelet.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

#include "devices.hpp"
#include "follower.hpp"
#include "infra/loop.hpp"
#include "io/host_fs.hpp"
#include "kube_api.hpp"
#include "kubelet.hpp"
#include "prepare.hpp"
#include "slices.hpp"
#include "watches.hpp"

namespace vfiod::dra {

// The command line, as main() parsed it. Every directory is a host path; with --root it is
// looked up under the root, and what the plugin tells the kubelet still names the host path.
struct Options {
    std::string driver = "vfio.vfiod.io";
    std::string node;  // --node-name, or $NODE_NAME
    std::string root = "/";
    std::string registrar_dir = "/var/lib/kubelet/plugins_registry";
    std::string plugin_dir;  // default /var/lib/kubelet/plugins/<driver>
    std::string cdi_dir = "/var/run/cdi";
    std::string state_dir = "/var/lib/vfiod-dra-plugin";
    // The API server: a kubeconfig, or the three flags, or (neither) the pod's service account.
    struct ApiServer {
        std::string kubeconfig;
        std::string server, token_file, ca_file;
    } api;
    bool verbose = false;

    // `host_path` as this process reaches it: under the root.
    std::string under_root(const std::string& host_path) const;
};

class DraPlugin {
public:
    DraPlugin(const Options& o, sdbus::IConnection& bus, Loop& loop, KubeApi& api);

    // Until SIGTERM/SIGINT (0); 1 when it cannot start (state directory, sockets, inotify, no
    // match on the bus) or the bus is lost.
    int run(sdbus::IConnection& bus);

private:
    void guarded(const char* what, const std::function<void()>& f) { follower_.guarded(what, f); }
    void updated(plugin::InventoryFollower::Update how);
    void rebuild();
    void settle();
    void handle_inotify();
    void stop(int signo);
    std::shared_ptr<const DraInventory> inventory() const;

    const Options opts_;
    Loop& loop_;
    KernelHostFs host_;
    plugin::InventoryFollower follower_;
    plugin::Watches watches_;
    // Null until vfiod's inventory is first read: Prepare says so rather than calling every
    // device released, and no slice is written (an empty pool would delete the node's slices).
    // Replaced on the loop, read by Prepare's gRPC threads.
    class Current {
    public:
        std::shared_ptr<const DraInventory> get() const {
            std::lock_guard lock(mu_);
            return inventory_;
        }
        void set(std::shared_ptr<const DraInventory> inventory) {
            std::lock_guard lock(mu_);
            inventory_ = std::move(inventory);
        }

    private:
        mutable std::mutex mu_;
        std::shared_ptr<const DraInventory> inventory_;
    } inventory_;
    SlicePublisher publisher_;
    Preparer preparer_;
    KubeletServers servers_;
    bool rebuild_due_ = false;
};

}  // namespace vfiod::dra
