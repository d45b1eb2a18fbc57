#include "fake_dra_kubelet.hpp"

#include <algorithm>
#include <future>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "dra.pb.h"
#include "pluginregistration.pb.h"

namespace vfiod::test {

namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;
namespace regpb = pluginregistration;

namespace {

std::shared_ptr<grpc::Channel> channel_to(const std::string& socket) {
    // A subchannel of its own per call: a shared one that just failed to connect sits in
    // reconnect backoff and fails the next call at once.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    // The kubelet's gRPC names a unix peer "localhost".
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, "localhost");
    return grpc::CreateCustomChannel("unix://" + socket, grpc::InsecureChannelCredentials(), args);
}

template <class Req>
void fill_claims(Req* req, const std::vector<DraClaim>& claims) {
    for (const auto& c : claims) {
        auto* p = req->add_claims();
        p->set_uid(c.uid);
        p->set_namespace_(c.namespace_);
        p->set_name(c.name);
    }
}

}  // namespace

bool DraCallResult::all_ok(const std::vector<DraClaim>& asked) const {
    if (!status.ok())
        return false;
    for (const auto& c : asked) {
        auto it = claims.find(c.uid);
        if (it == claims.end() || !it->second.error.empty())
            return false;
    }
    return true;
}

void FakeDraKubelet::keep_connection(const std::string& socket) {
    kept_socket_ = socket;
    kept_ = channel_to(socket);
}

grpc::Status FakeDraKubelet::call_bytes(const std::string& socket, const std::string& method,
                                        const std::string& request, std::string* response) {
    auto channel = kept_ && socket == kept_socket_ ? kept_ : channel_to(socket);
    grpc::GenericStub stub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline_);
    grpc::Slice slice(request);
    grpc::ByteBuffer in(&slice, 1), out;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &in, &out,
                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
    grpc::Status s = done.get_future().get();
    if (s.ok() && response) {
        std::vector<grpc::Slice> slices;
        if (!out.Dump(&slices).ok())
            return {grpc::StatusCode::INTERNAL, method + ": cannot read the answer"};
        response->clear();
        for (const auto& sl : slices)
            response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    return s;
}

grpc::Status FakeDraKubelet::call(const std::string& socket, const std::string& method,
                                  const google::protobuf::Message& request,
                                  google::protobuf::Message* response) {
    std::string bytes;
    grpc::Status s = call_bytes(socket, method, request.SerializeAsString(), &bytes);
    if (s.ok() && response && !response->ParseFromString(bytes))
        return {grpc::StatusCode::INTERNAL, method + ": the answer does not parse as " +
                                                response->GetTypeName()};
    return s;
}

bool FakeDraKubelet::register_plugin(const std::string& reg_socket, DraPluginInfo* info,
                                     std::string* err, const std::string& endpoint_root) {
    regpb::InfoRequest ireq;
    regpb::PluginInfo pi;
    grpc::Status s = call(reg_socket, kGetInfoMethod, ireq, &pi);
    if (!s.ok()) {
        *err = std::string("GetInfo on ") + reg_socket + ": " + s.error_message() + " (code " +
               std::to_string(s.error_code()) + ")";
        return false;
    }
    info->type = pi.type();
    info->name = pi.name();
    info->endpoint = pi.endpoint();
    info->supported_versions.assign(pi.supported_versions().begin(),
                                    pi.supported_versions().end());
    std::string why;
    if (pi.type() != "DRAPlugin")
        why = "plugin type \"" + pi.type() + "\" is not DRAPlugin";
    else if (pi.name().empty())
        why = "the plugin has no name";
    else if (std::find(info->supported_versions.begin(), info->supported_versions.end(),
                       "v1.DRAPlugin") == info->supported_versions.end())
        why = "none of the plugin's versions is v1.DRAPlugin";
    else if (pi.endpoint().empty())
        why = "the plugin names no endpoint";
    if (why.empty()) {
        const std::string socket = endpoint_root + pi.endpoint();
        auto ch = channel_to(socket);
        if (!ch->WaitForConnected(std::chrono::system_clock::now() + deadline_))
            why = "cannot connect to the plugin's endpoint " + socket;
        else
            dra_socket_ = socket;
    }
    regpb::RegistrationStatus st;
    st.set_plugin_registered(why.empty());
    st.set_error(why);
    regpb::RegistrationStatusResponse sr;
    s = call(reg_socket, kNotifyMethod, st, &sr);
    if (!why.empty()) {
        *err = why;
        return false;
    }
    if (!s.ok()) {
        *err = std::string("NotifyRegistrationStatus on ") + reg_socket + ": " +
               s.error_message() + " (code " + std::to_string(s.error_code()) + ")";
        return false;
    }
    return true;
}

DraCallResult FakeDraKubelet::prepare(const std::string& dra_socket,
                                      const std::vector<DraClaim>& claims) {
    drapb::NodePrepareResourcesRequest req;
    fill_claims(&req, claims);
    drapb::NodePrepareResourcesResponse resp;
    DraCallResult r;
    r.status = call(dra_socket, kPrepareMethod, req, &resp);
    if (!r.status.ok())
        return r;
    for (const auto& [uid, a] : resp.claims()) {
        DraClaimResult& c = r.claims[uid];
        c.error = a.error();
        for (const auto& d : a.devices())
            c.devices.push_back({{d.request_names().begin(), d.request_names().end()},
                                 d.pool_name(),
                                 d.device_name(),
                                 {d.cdi_device_ids().begin(), d.cdi_device_ids().end()}});
    }
    return r;
}

DraCallResult FakeDraKubelet::unprepare(const std::string& dra_socket,
                                        const std::vector<DraClaim>& claims) {
    drapb::NodeUnprepareResourcesRequest req;
    fill_claims(&req, claims);
    drapb::NodeUnprepareResourcesResponse resp;
    DraCallResult r;
    r.status = call(dra_socket, kUnprepareMethod, req, &resp);
    if (!r.status.ok())
        return r;
    for (const auto& [uid, a] : resp.claims())
        r.claims[uid].error = a.error();
    return r;
}

}  // namespace vfiod::test
