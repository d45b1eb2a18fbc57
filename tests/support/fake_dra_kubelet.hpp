// A DRA kubelet for tests, on real unix sockets: registers a plugin as the kubelet's plugin
// watcher does (GetInfo on the registration socket, the type and versions checked, the endpoint
// it names dialled, NotifyRegistrationStatus), then calls NodePrepareResources and
// NodeUnprepareResources. Every call goes through grpc::GenericStub on the LITERAL method paths
// the kubelet dials, with the messages serialized by hand: a plugin whose .proto has another
// package or service name answers UNIMPLEMENTED here as it would to the kubelet. Every call has
// a deadline.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>

namespace google::protobuf {
class Message;
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

}  // namespace vfiod::test
