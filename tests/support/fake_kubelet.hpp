// A kubelet for tests, speaking the real device plugin protocol over real unix sockets: it serves
// v1beta1.Registration on DIR/kubelet.sock and v1.PodResourcesLister on its own socket, and for
// each registration dials the plugin's endpoint as the kubelet does (authority "localhost"),
// asks GetDevicePluginOptions and holds ListAndWatch open, recording every list it receives.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin.grpc.pb.h"

namespace grpc {
class Server;
}

namespace vfiod::test {

class FakeKubelet {
public:
    using Clock = std::chrono::steady_clock;

    struct Registration {
        v1beta1::RegisterRequest request;
        Clock::time_point at;
    };
    struct List {
        std::map<std::string, std::string> health;  // ID → "Healthy"/"Unhealthy"
        std::map<std::string, std::vector<int64_t>> numa;  // ID → NUMA nodes
        Clock::time_point at;
    };
    struct Stream {
        std::string resource;
        bool options_ok = false;
        bool preferred_available = false;
        std::vector<List> lists;
        bool ended = false;  // the plugin closed the stream
        std::string end_status;
    };

    FakeKubelet(std::string dir, std::string pod_resources_socket);
    ~FakeKubelet();

    // Serves kubelet.sock (and the PodResources socket). False when it cannot listen.
    bool start();
    // Stops serving, closes every stream and removes kubelet.sock.
    void stop();
    // What the kubelet does when it starts again: removes every socket in its directory, then
    // serves a new kubelet.sock.
    bool restart();

    // Register answers this error from now on ("" = accept).
    void refuse_registrations(const std::string& message);
    // Register calls wait unanswered from now on, until release_registrations() or stop().
    void hold_registrations();
    void release_registrations();
    // Register calls waiting now.
    size_t held_registrations() const;
    // From now on, a registration's ListAndWatch stream is opened and never read, as a wedged
    // kubelet does: what the plugin writes piles up in the transport until stop().
    void never_read_streams() { never_read_ = true; }
    // PodResources List reports `id` of `resource` as held by ns/pod/container.
    void hold(const std::string& resource, const std::string& id, const std::string& pod,
              const std::string& container);

    std::vector<Registration> registrations() const;
    // Snapshot of the streams opened so far, in order.
    std::vector<Stream> streams() const;
    // Waits until pred(streams) holds; false after timeout.
    bool wait(const std::function<bool(const std::vector<Stream>&)>& pred,
              std::chrono::milliseconds timeout);
    // The newest list of the newest stream of resource (empty if none).
    List latest(const std::string& resource) const;
    size_t list_count(const std::string& resource) const;

    // Calls on the endpoint of resource's latest registration.
    grpc::Status allocate(const std::string& resource,
                          const std::vector<std::vector<std::string>>& containers,
                          v1beta1::AllocateResponse* out);
    grpc::Status preferred(const std::string& resource, const std::vector<std::string>& available,
                           const std::vector<std::string>& must, int size,
                           std::vector<std::string>* out);
    // A channel to resource's endpoint, for raw calls.
    std::shared_ptr<grpc::Channel> channel(const std::string& resource);

    const std::string& dir() const { return dir_; }

private:
    class RegistrationService;
    class PodResourcesService;
    // False when the kubelet is stopping: nothing recorded, nobody dialled.
    bool on_register(const v1beta1::RegisterRequest& r);
    std::shared_ptr<grpc::Channel> channel_to(const std::string& endpoint,
                                              bool fixed_window = false) const;

    std::string dir_, pod_socket_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::string refusal_;
    std::atomic<bool> never_read_{false};
    bool holding_ = false;
    size_t held_registrations_ = 0;
    unsigned stops_ = 0;  // stop() calls so far: a held Register ends with the kubelet
    bool stopping_ = false;
    std::vector<Registration> registrations_;
    std::vector<Stream> streams_;
    std::vector<std::shared_ptr<grpc::ClientContext>> contexts_;
    std::vector<std::thread> threads_;
    std::map<std::string, std::vector<std::string>> held_;  // "ns/pod/container" → resource:id
    std::unique_ptr<RegistrationService> reg_service_;
    std::unique_ptr<PodResourcesService> pod_service_;
    std::unique_ptr<grpc::Server> server_, pod_server_;
};

}  // namespace vfiod::test
