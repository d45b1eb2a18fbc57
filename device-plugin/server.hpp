// One kubelet device plugin endpoint per resource (DESIGN §9): a gRPC server on
// DIR/vfiod-<name>.sock serving v1beta1.DevicePlugin from the latest Snapshot, and the
// PodResources query that keeps IOMMU groups whole. Registration is registrar.hpp's.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "allocation.hpp"
#include "io/host_fs.hpp"

namespace grpc {
class Server;
}

namespace vfiod::plugin {

// The snapshot every endpoint answers from; replaced whole on each inventory change.
class SnapshotStore {
public:
    std::shared_ptr<const Snapshot> get() const;
    void set(std::shared_ptr<const Snapshot> s);

private:
    mutable std::mutex mu_;
    std::shared_ptr<const Snapshot> snap_ = std::make_shared<Snapshot>();
};

struct Endpoints {
    std::string kubelet_dir;    // --kubelet-dir: kubelet.sock and our sockets
    std::string pod_resources;  // --pod-resources socket
};

class PluginService;

// How long a stopping server lets its last lists reach the kubelet.
constexpr auto kStopGrace = std::chrono::seconds(1);

class ResourceServer {
public:
    ResourceServer(std::string resource, const Endpoints& endpoints, const SnapshotStore& store,
                   const HostFs& host);
    ~ResourceServer();
    ResourceServer(const ResourceServer&) = delete;
    ResourceServer& operator=(const ResourceServer&) = delete;

    const std::string& resource() const { return resource_; }
    const std::string& socket_path() const { return socket_path_; }

    // Listens on the socket (replacing a stale file of ours). False with *err when it cannot.
    bool serve(std::string* err);
    bool serving() const { return server_ != nullptr; }
    // Sends the resource's current list to every open ListAndWatch stream if it changed.
    void publish();
    // The last word on every open stream, and on any opened from now on: an empty list.
    void close_streams();
    // close_streams(), then the server down and the socket removed. Calls still running at
    // `deadline` (a stream the kubelet does not read) are cancelled then. Stopping several
    // servers, close all their streams first, then stop each with one shared deadline: N stuck
    // streams then cost one grace period, not N of them in a row.
    void stop(std::chrono::system_clock::time_point deadline);
    void stop() { stop(std::chrono::system_clock::now() + kStopGrace); }

private:
    std::string resource_;
    Endpoints endpoints_;
    std::string socket_path_;
    const SnapshotStore& store_;
    const HostFs& host_;
    std::unique_ptr<PluginService> service_;
    std::unique_ptr<grpc::Server> server_;
};

// Kubelet messages bigger than this are refused (RESOURCE_EXHAUSTED) rather than parsed.
constexpr int kMaxMessageBytes = 1 << 20;

}  // namespace vfiod::plugin
