// A DRA kubelet for tests, on real unix sockets: registers a plugin as the kubelet's plugin
// watcher does (GetInfo on the registration socket, the type and versions checked, the endpoint
// it names dialled, NotifyRegistrationStatus), then calls NodePrepareResources and
// NodeUnprepareResources. Every call goes through grpc::GenericStub on the LITERAL method paths
// the kubelet dials, with the messages serialized by hand: a plugin whose .proto has another
// package or service name answers UNIMPLEMENTED here as it would to the kubelet. Every call has
// a deadline. FakeHealthWatch is the kubelet's side of DRAResourceHealth (KEP-4680): the
// service picked from the registration's supported versions as the kubelet picks it, the stream
// opened on its literal path, the lease enforced, a cut stream opened again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/support/status.h>

namespace google::protobuf {
class Message;
}
namespace v1 {
class NodeWatchResourcesResponse;
}
namespace grpc {
class Channel;
}

namespace vfiod::test {

// The method paths a kubelet calls (k8s.io/kubelet pluginregistration and dra/v1).
inline constexpr const char* kGetInfoMethod = "/pluginregistration.Registration/GetInfo";
inline constexpr const char* kNotifyMethod =
    "/pluginregistration.Registration/NotifyRegistrationStatus";
inline constexpr const char* kPrepareMethod =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
inline constexpr const char* kUnprepareMethod =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";

// The health services a kubelet knows, best first, as the registration lists them.
inline constexpr const char* kHealthV1 = "v1.DRAResourceHealth";
inline constexpr const char* kHealthV1alpha1 = "v1alpha1.DRAResourceHealth";
// The service the kubelet streams from, given the plugin's supported versions: v1 when listed,
// else v1alpha1, else none ("").
std::string pick_health_service(const std::vector<std::string>& supported_versions);

struct DraPluginInfo {
    std::string type, name, endpoint;
    std::vector<std::string> supported_versions;
};

struct DraClaim {
    std::string uid, namespace_, name;
};

struct DraDevice {
    std::vector<std::string> request_names;
    std::string pool_name, device_name;
    std::vector<std::string> cdi_device_ids;
    bool operator==(const DraDevice&) const = default;
};

struct DraClaimResult {
    std::string error;  // empty: done
    std::vector<DraDevice> devices;
};

// One Prepare or Unprepare call: the gRPC status and, when it is OK, the answer by claim UID.
struct DraCallResult {
    grpc::Status status;
    std::map<std::string, DraClaimResult> claims;
    // Every claim of `asked` answered without error.
    bool all_ok(const std::vector<DraClaim>& asked) const;
};

class FakeDraKubelet {
public:
    explicit FakeDraKubelet(std::chrono::milliseconds deadline = std::chrono::seconds(10))
        : deadline_(deadline) {}

    // The plugin watcher's part: GetInfo on reg_socket; type "DRAPlugin" and a supported
    // version "v1.DRAPlugin" required; the endpoint (under endpoint_root, for plugins run with
    // --root) must accept a connection; then NotifyRegistrationStatus with the verdict. True
    // when registered; *err says why not (the plugin was told the same when it got that far).
    bool register_plugin(const std::string& reg_socket, DraPluginInfo* info, std::string* err,
                         const std::string& endpoint_root = "");
    // Where register_plugin dialled the last registered plugin ("" before).
    const std::string& dra_socket() const { return dra_socket_; }
    // From now on every call on `socket` goes over one connection, as a kubelet's calls do (by
    // default each call dials its own: a shared channel that just failed to connect would fail
    // the next call at once). Call it before calls begin on other threads.
    void keep_connection(const std::string& socket);

    DraCallResult prepare(const std::string& dra_socket, const std::vector<DraClaim>& claims);
    DraCallResult unprepare(const std::string& dra_socket, const std::vector<DraClaim>& claims);

    // One unary call of any method path with a message of our choosing; *response (if given)
    // is parsed from the answer (INTERNAL when it does not parse).
    grpc::Status call(const std::string& socket, const std::string& method,
                      const google::protobuf::Message& request,
                      google::protobuf::Message* response);
    // The same with raw bytes both ways.
    grpc::Status call_bytes(const std::string& socket, const std::string& method,
                            const std::string& request, std::string* response);

private:
    std::chrono::milliseconds deadline_;
    std::string dra_socket_;
    std::string kept_socket_;
    std::shared_ptr<grpc::Channel> kept_;
};

// The kubelet's health stream from one plugin: NodeWatchResources of `service` on `socket`
// (the literal path "/<service>/NodeWatchResources", messages parsed by hand as the kubelet's
// are), opened again `reopen_after` after each end, until stop(). What it keeps is the
// kubelet's cache: per device the last health, message and the plugin's last_updated_time; a
// device whose lease (its health_check_timeout_seconds, 30 s when 0 or less) has run out since
// then reads UNKNOWN, as the kubelet marks it.
class FakeHealthWatch {
public:
    enum Health { Unknown = 0, Healthy = 1, Unhealthy = 2 };
    struct Seen {
        int health = Unknown;
        std::string message;
        int64_t last_updated = 0;  // unix seconds, as the plugin sent it
        int64_t timeout = 0;
        std::chrono::steady_clock::time_point received{};
        int64_t received_unix_ms = 0;
    };

    // reads = false: a kubelet that opens the stream and never reads it (flow control stops
    // the plugin's writes once the window is full).
    FakeHealthWatch(std::string socket, std::string service,
                    std::chrono::milliseconds reopen_after = std::chrono::milliseconds(200),
                    bool reads = true);
    ~FakeHealthWatch();  // stop()
    void stop();
    // Cancels the stream open now, as a kubelet restarting does; it is opened again.
    void cut();

    // The device's health as the kubelet has it now (Unknown when never seen or stale).
    int health(const std::string& pool, const std::string& device,
               std::string* message = nullptr) const;
    std::map<std::string, Seen> devices() const;  // by "pool/device", as last received
    uint64_t messages() const;                    // messages received, all streams
    uint64_t opens() const;                       // streams opened (and answered or not)
    size_t last_size() const;                     // devices in the last message
    grpc::Status last_end() const;                // how the last stream ended
    bool open_now() const;                        // a stream is open and has been answered

private:
    class Call;
    void run();
    void received(const ::v1::NodeWatchResourcesResponse& r);

    const std::string socket_, service_;
    const std::chrono::milliseconds reopen_after_;
    const bool reads_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    Call* call_ = nullptr;  // the stream open now
    std::map<std::string, Seen> seen_;
    uint64_t messages_ = 0, opens_ = 0;
    size_t last_size_ = 0;
    bool answered_ = false;
    grpc::Status last_end_;
    std::thread thread_;
};

}  // namespace vfiod::test
