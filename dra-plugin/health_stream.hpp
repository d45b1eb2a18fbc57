// The kubelet's DRAResourceHealth service (DESIGN §13, KEP-4680) on the DRA socket, in both
// versions the kubelet knows (packages v1 and v1alpha1; it picks v1 when the registration lists
// both). Each NodeWatchResources stream gets the health of every published device (pool: the
// node) when the devices are first known, again at every change, and again every `resend`
// whatever changes: the kubelet takes a device not refreshed within its lease
// (health_check_timeout_seconds, sent as `lease_seconds`) for UNKNOWN, so a stream that spoke
// only on change would go UNKNOWN in a quiet hour.
// One thread of its own sends; publish() only hands it the devices. A kubelet that reads slowly
// gets the newest state once its last write is done, never a queue of old ones, and the number
// of open streams is bounded, so neither memory nor threads grow with a peer's behaviour.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices.hpp"

namespace grpc {
class Service;
}

namespace vfiod::dra {

class HealthStreams {
public:
    struct Options {
        std::string pool;  // the node's name: every device's pool
        std::chrono::milliseconds resend{10000};
        int64_t lease_seconds = 30;
        size_t max_streams = 8;  // a kubelet opens one; more are refused (RESOURCE_EXHAUSTED)
    };
    struct Stats {
        uint64_t opened = 0;    // streams accepted
        uint64_t refused = 0;   // streams refused: too many, or stopping
        uint64_t messages = 0;  // messages written (each the whole state)
        size_t open = 0;        // streams open now
    };
    // The services' names, as the registration's supported versions list them.
    static std::vector<std::string> service_names();

    explicit HealthStreams(Options o);
    ~HealthStreams();  // stop()
    HealthStreams(const HealthStreams&) = delete;
    HealthStreams& operator=(const HealthStreams&) = delete;

    // New services for one gRPC server (a service belongs to one server for life), one per
    // version; they live until this object does, which must outlive that server.
    std::vector<grpc::Service*> make_services();
    // Starts the sending thread; streams are accepted from now on.
    void start();
    // From any thread: the devices whose health the streams say from now on.
    void publish(const std::vector<DraDevice>& devices);
    // Every stream finished (UNAVAILABLE: the kubelet opens a new one on the next plugin),
    // new ones refused, the thread joined. The server's shutdown then waits for the streams'
    // last writes (cancelled at its deadline for a peer that reads nothing).
    void stop();
    Stats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace vfiod::dra
