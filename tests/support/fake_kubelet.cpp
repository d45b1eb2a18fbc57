#include "fake_kubelet.hpp"

#include <unistd.h>

#include <filesystem>

#include <grpcpp/grpcpp.h>

#include "podresources.grpc.pb.h"

namespace vfiod::test {

class FakeKubelet::RegistrationService : public v1beta1::Registration::Service {
public:
    explicit RegistrationService(FakeKubelet& k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* r,
                          v1beta1::Empty*) override {
        {
            std::unique_lock l(k_.mu_);
            ++k_.held_registrations_;
            const unsigned stops = k_.stops_;
            k_.cv_.wait(l, [&] { return !k_.holding_ || k_.stops_ != stops; });
            --k_.held_registrations_;
            if (k_.stops_ != stops)
                return {grpc::StatusCode::UNAVAILABLE, "the kubelet is stopping"};
            if (!k_.refusal_.empty())
                return {grpc::StatusCode::INVALID_ARGUMENT, k_.refusal_};
        }
        if (!k_.on_register(*r))
            return {grpc::StatusCode::UNAVAILABLE, "the kubelet is stopping"};
        return grpc::Status::OK;
    }

private:
    FakeKubelet& k_;
};

class FakeKubelet::PodResourcesService : public v1::PodResourcesLister::Service {
public:
    explicit PodResourcesService(FakeKubelet& k) : k_(k) {}
    grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                      v1::ListPodResourcesResponse* out) override {
        std::lock_guard l(k_.mu_);
        for (const auto& [who, ids] : k_.held_) {
            auto slash1 = who.find('/'), slash2 = who.rfind('/');
            auto* pod = out->add_pod_resources();
            pod->set_namespace_(who.substr(0, slash1));
            pod->set_name(who.substr(slash1 + 1, slash2 - slash1 - 1));
            auto* c = pod->add_containers();
            c->set_name(who.substr(slash2 + 1));
            for (const auto& rid : ids) {
                auto* d = c->add_devices();
                d->set_resource_name(rid.substr(0, rid.find('=')));
                d->add_device_ids(rid.substr(rid.find('=') + 1));
            }
        }
        return grpc::Status::OK;
    }

private:
    FakeKubelet& k_;
};

FakeKubelet::FakeKubelet(std::string dir, std::string pod_resources_socket)
    : dir_(std::move(dir)), pod_socket_(std::move(pod_resources_socket)) {}

FakeKubelet::~FakeKubelet() {
    stop();
    if (pod_server_) {
        pod_server_->Shutdown(std::chrono::system_clock::now());
        pod_server_->Wait();
    }
}

bool FakeKubelet::start() {
    reg_service_ = std::make_unique<RegistrationService>(*this);
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + dir_ + "/kubelet.sock", grpc::InsecureServerCredentials());
    b.RegisterService(reg_service_.get());
    server_ = b.BuildAndStart();
    if (!pod_server_ && !pod_socket_.empty()) {
        pod_service_ = std::make_unique<PodResourcesService>(*this);
        grpc::ServerBuilder pb;
        pb.AddListeningPort("unix://" + pod_socket_, grpc::InsecureServerCredentials());
        pb.RegisterService(pod_service_.get());
        pod_server_ = pb.BuildAndStart();
    }
    return server_ != nullptr;
}

void FakeKubelet::stop() {
    {
        std::lock_guard l(mu_);
        stopping_ = true;
        ++stops_;
        for (auto& c : contexts_)
            c->TryCancel();
        cv_.notify_all();
    }
    // A Register may come in until the server is down; while stopping_ holds it adds no stream
    // and no thread (on_register), so the threads taken here are all there are.
    std::vector<std::thread> threads;
    {
        std::lock_guard l(mu_);
        threads.swap(threads_);
    }
    for (auto& t : threads)
        t.join();
    if (server_) {
        server_->Shutdown(std::chrono::system_clock::now());
        server_->Wait();
        server_.reset();
    }
    {
        std::lock_guard l(mu_);
        contexts_.clear();
        stopping_ = false;
    }
    unlink((dir_ + "/kubelet.sock").c_str());
}

bool FakeKubelet::restart() {
    stop();
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec))
        if (e.is_socket())
            std::filesystem::remove(e.path(), ec);
    return start();
}

void FakeKubelet::refuse_registrations(const std::string& message) {
    std::lock_guard l(mu_);
    refusal_ = message;
}

void FakeKubelet::hold_registrations() {
    std::lock_guard l(mu_);
    holding_ = true;
}

void FakeKubelet::release_registrations() {
    std::lock_guard l(mu_);
    holding_ = false;
    cv_.notify_all();
}

size_t FakeKubelet::held_registrations() const {
    std::lock_guard l(mu_);
    return held_registrations_;
}

void FakeKubelet::hold(const std::string& resource, const std::string& id, const std::string& pod,
                       const std::string& container) {
    std::lock_guard l(mu_);
    held_[pod + "/" + container].push_back(resource + "=" + id);
}

bool FakeKubelet::on_register(const v1beta1::RegisterRequest& r) {
    std::lock_guard l(mu_);
    if (stopping_)  // stop() has taken the threads to join: a stopping kubelet dials nobody
        return false;
    registrations_.push_back({r, Clock::now()});
    streams_.push_back({r.resource_name(), false, false, {}, false, ""});
    auto ctx = std::make_shared<grpc::ClientContext>();
    contexts_.push_back(ctx);
    // Like the kubelet, dial back from another goroutine: the plugin is inside Register now.
    threads_.emplace_back([this, i = streams_.size() - 1, ep = r.endpoint(), ctx] {
        auto ch = channel_to(ep, never_read_);
        auto stub = v1beta1::DevicePlugin::NewStub(ch);
        grpc::ClientContext octx;
        octx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1beta1::Empty e;
        v1beta1::DevicePluginOptions opts;
        grpc::Status s = stub->GetDevicePluginOptions(&octx, e, &opts);
        {
            std::lock_guard l2(mu_);
            streams_[i].options_ok = s.ok();
            streams_[i].preferred_available = opts.get_preferred_allocation_available();
        }
        auto reader = stub->ListAndWatch(ctx.get(), e);
        if (never_read_) {
            std::unique_lock l2(mu_);
            cv_.wait(l2, [&] { return stopping_; });
        }
        v1beta1::ListAndWatchResponse resp;
        while (reader->Read(&resp)) {
            List list;
            list.at = Clock::now();
            for (const auto& d : resp.devices()) {
                list.health[d.id()] = d.health();
                for (const auto& n : d.topology().nodes())
                    list.numa[d.id()].push_back(n.id());
            }
            std::lock_guard l2(mu_);
            streams_[i].lists.push_back(std::move(list));
            cv_.notify_all();
        }
        grpc::Status end = reader->Finish();
        std::lock_guard l2(mu_);
        streams_[i].ended = true;
        streams_[i].end_status = end.ok() ? "OK" : end.error_message();
        cv_.notify_all();
    });
    cv_.notify_all();
    return true;
}

std::shared_ptr<grpc::Channel> FakeKubelet::channel_to(const std::string& endpoint,
                                                       bool fixed_window) const {
    grpc::ChannelArguments args;
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, "localhost");
    // A small stream window that does not grow by itself (gRPC's BDP probe would widen it to
    // megabytes): what the plugin writes to a stream nobody reads fills it at 8 KiB, a few
    // lists of a few hundred devices.
    if (fixed_window) {
        args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
        args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8192);
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    }
    return grpc::CreateCustomChannel("unix://" + dir_ + "/" + endpoint,
                                     grpc::InsecureChannelCredentials(), args);
}

std::vector<FakeKubelet::Registration> FakeKubelet::registrations() const {
    std::lock_guard l(mu_);
    return registrations_;
}

std::vector<FakeKubelet::Stream> FakeKubelet::streams() const {
    std::lock_guard l(mu_);
    return streams_;
}

bool FakeKubelet::wait(const std::function<bool(const std::vector<Stream>&)>& pred,
                       std::chrono::milliseconds timeout) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, timeout, [&] { return pred(streams_); });
}

FakeKubelet::List FakeKubelet::latest(const std::string& resource) const {
    std::lock_guard l(mu_);
    for (auto it = streams_.rbegin(); it != streams_.rend(); ++it)
        if (it->resource == resource && !it->lists.empty())
            return it->lists.back();
    return {};
}

size_t FakeKubelet::list_count(const std::string& resource) const {
    std::lock_guard l(mu_);
    size_t n = 0;
    for (const auto& s : streams_)
        if (s.resource == resource)
            n += s.lists.size();
    return n;
}

std::shared_ptr<grpc::Channel> FakeKubelet::channel(const std::string& resource) {
    std::string endpoint;
    {
        std::lock_guard l(mu_);
        for (const auto& r : registrations_)
            if (r.request.resource_name() == resource)
                endpoint = r.request.endpoint();
    }
    return channel_to(endpoint);
}

grpc::Status FakeKubelet::allocate(const std::string& resource,
                                   const std::vector<std::vector<std::string>>& containers,
                                   v1beta1::AllocateResponse* out) {
    auto stub = v1beta1::DevicePlugin::NewStub(channel(resource));
    v1beta1::AllocateRequest req;
    for (const auto& ids : containers) {
        auto* c = req.add_container_requests();
        for (const auto& id : ids)
            c->add_devices_ids(id);
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub->Allocate(&ctx, req, out);
}

grpc::Status FakeKubelet::preferred(const std::string& resource,
                                    const std::vector<std::string>& available,
                                    const std::vector<std::string>& must, int size,
                                    std::vector<std::string>* out) {
    auto stub = v1beta1::DevicePlugin::NewStub(channel(resource));
    v1beta1::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : available)
        c->add_available_deviceids(id);
    for (const auto& id : must)
        c->add_must_include_deviceids(id);
    c->set_allocation_size(size);
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status s = stub->GetPreferredAllocation(&ctx, req, &resp);
    if (s.ok() && resp.container_responses_size() == 1)
        out->assign(resp.container_responses(0).deviceids().begin(),
                    resp.container_responses(0).deviceids().end());
    return s;
}

}  // namespace vfiod::test
