#include "fake_dra_kubelet.hpp"

#include <algorithm>
#include <future>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "dra-health/v1/api.pb.h"
#include "dra.pb.h"
#include "pluginregistration.pb.h"

namespace vfiod::test {

namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;
namespace regpb = pluginregistration;
// Both versions of the health API have the same messages: read with v1's, whichever was dialled.
namespace k8s_health = ::v1;

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

std::string pick_health_service(const std::vector<std::string>& supported_versions) {
    for (const char* best : {kHealthV1, kHealthV1alpha1})
        if (std::find(supported_versions.begin(), supported_versions.end(), best) !=
            supported_versions.end())
            return best;
    return "";
}

// One NodeWatchResources stream: the empty request written and the client's side closed, then
// every message read until the stream ends. Lives until OnDone.
class FakeHealthWatch::Call final
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
public:
    explicit Call(FakeHealthWatch& w) : w_(w) {}

    void start(grpc::GenericStub& stub, const std::string& method, bool reads) {
        stub.PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
        grpc::Slice empty(std::string{});
        request_ = grpc::ByteBuffer(&empty, 1);
        StartWriteLast(&request_, grpc::WriteOptions());
        if (reads)
            StartRead(&in_);
        StartCall();
    }
    void cancel() { ctx_.TryCancel(); }
    grpc::Status wait() {
        std::unique_lock l(mu_);
        cv_.wait(l, [&] { return done_; });
        return status_;
    }

    void OnReadDone(bool ok) override {
        if (!ok)
            return;
        std::vector<grpc::Slice> slices;
        std::string bytes;
        if (in_.Dump(&slices).ok())
            for (const auto& sl : slices)
                bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
        k8s_health::NodeWatchResourcesResponse r;
        if (r.ParseFromString(bytes))
            w_.received(r);
        else
            cancel();  // the kubelet drops a stream it cannot read
        StartRead(&in_);
    }
    void OnDone(const grpc::Status& s) override {
        std::lock_guard l(mu_);
        status_ = s;
        done_ = true;
        cv_.notify_all();
    }

private:
    FakeHealthWatch& w_;
    grpc::ClientContext ctx_;
    grpc::ByteBuffer request_, in_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    grpc::Status status_;
};

FakeHealthWatch::FakeHealthWatch(std::string socket, std::string service,
                                 std::chrono::milliseconds reopen_after, bool reads)
    : socket_(std::move(socket)),
      service_(std::move(service)),
      reopen_after_(reopen_after),
      reads_(reads) {
    thread_ = std::thread([this] { run(); });
}

FakeHealthWatch::~FakeHealthWatch() { stop(); }

void FakeHealthWatch::stop() {
    {
        std::lock_guard l(mu_);
        stopping_ = true;
        if (call_)
            call_->cancel();
        cv_.notify_all();
    }
    if (thread_.joinable())
        thread_.join();
}

void FakeHealthWatch::cut() {
    std::lock_guard l(mu_);
    if (call_)
        call_->cancel();
}

void FakeHealthWatch::run() {
    const std::string method = "/" + service_ + "/NodeWatchResources";
    std::unique_lock l(mu_);
    while (!stopping_) {
        auto channel = channel_to(socket_);
        grpc::GenericStub stub(channel);
        Call call(*this);
        call_ = &call;
        answered_ = false;
        ++opens_;
        l.unlock();
        call.start(stub, method, reads_);
        grpc::Status end = call.wait();
        l.lock();
        call_ = nullptr;
        answered_ = false;
        last_end_ = end;
        cv_.wait_for(l, reopen_after_, [&] { return stopping_; });
    }
}

void FakeHealthWatch::received(const k8s_health::NodeWatchResourcesResponse& r) {
    const auto now = std::chrono::steady_clock::now();
    const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    std::lock_guard l(mu_);
    ++messages_;
    answered_ = true;
    last_size_ = r.devices_size();
    for (const auto& d : r.devices())
        seen_[d.device().pool_name() + "/" + d.device().device_name()] =
            Seen{static_cast<int>(d.health()), d.message(), d.last_updated_time(),
                 d.health_check_timeout_seconds(), now, unix_ms};
}

int FakeHealthWatch::health(const std::string& pool, const std::string& device,
                            std::string* message) const {
    std::lock_guard l(mu_);
    auto it = seen_.find(pool + "/" + device);
    if (it == seen_.end())
        return Unknown;
    if (message)
        *message = it->second.message;
    const int64_t lease = it->second.timeout > 0 ? it->second.timeout : 30;
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    return now - it->second.last_updated > lease ? Unknown : it->second.health;
}

std::map<std::string, FakeHealthWatch::Seen> FakeHealthWatch::devices() const {
    std::lock_guard l(mu_);
    return seen_;
}
uint64_t FakeHealthWatch::messages() const {
    std::lock_guard l(mu_);
    return messages_;
}
uint64_t FakeHealthWatch::opens() const {
    std::lock_guard l(mu_);
    return opens_;
}
size_t FakeHealthWatch::last_size() const {
    std::lock_guard l(mu_);
    return last_size_;
}
grpc::Status FakeHealthWatch::last_end() const {
    std::lock_guard l(mu_);
    return last_end_;
}
bool FakeHealthWatch::open_now() const {
    std::lock_guard l(mu_);
    return call_ && answered_;
}

}  // namespace vfiod::test
