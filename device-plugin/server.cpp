#include "server.hpp"

#include <unistd.h>

#include <chrono>
#include <list>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "core/strings.hpp"
#include "deviceplugin.grpc.pb.h"
#include "podresources.grpc.pb.h"

namespace vfiod::plugin {

std::shared_ptr<const Snapshot> SnapshotStore::get() const {
    std::lock_guard l(mu_);
    return snap_;
}

void SnapshotStore::set(std::shared_ptr<const Snapshot> s) {
    std::lock_guard l(mu_);
    snap_ = std::move(s);
}

namespace {

using v1beta1::ListAndWatchResponse;

void add_device(ListAndWatchResponse* r, std::string id, bool healthy, int numa_node) {
    auto* dev = r->add_devices();
    dev->set_id(std::move(id));
    dev->set_health(healthy ? "Healthy" : "Unhealthy");
    if (numa_node >= 0)
        dev->mutable_topology()->add_nodes()->set_id(numa_node);
}

// A resource's functions, healthy or not; or its served mdevs (DESIGN §12: one not served is
// withdrawn, not listed), healthy unless vfiod's Health of their parent is failed (§13).
ListAndWatchResponse list_of(const Snapshot& snap, const std::string& resource) {
    ListAndWatchResponse r;
    if (auto it = snap.resources.find(resource); it != snap.resources.end())
        for (const auto& d : it->second)
            add_device(&r, d.address.str(), d.healthy, d.numa_node);
    if (auto it = snap.mdev_resources.find(resource); it != snap.mdev_resources.end())
        for (const auto& m : it->second)
            add_device(&r, m.uuid, m.healthy, m.numa_node);
    return r;
}

std::string peer_of(const grpc::ServerContextBase& ctx) { return printable(ctx.peer()); }

// One ListAndWatch stream. Writes are queued so that only the newest list waits while one is on
// the wire. The service owns the object and deletes it after OnDone.
class ListStream : public grpc::ServerWriteReactor<ListAndWatchResponse> {
public:
    void send(const ListAndWatchResponse& r, bool last) {
        std::lock_guard l(mu_);
        if (finished_)
            return;
        pending_ = r;
        have_pending_ = true;
        pending_last_ = last;
        start_locked();
    }
    bool done() const {
        std::lock_guard l(mu_);
        return done_;
    }

    void OnWriteDone(bool ok) override {
        std::lock_guard l(mu_);
        writing_ = false;
        if (!ok) {
            spdlog::debug("ListAndWatch: the kubelet went away mid-stream");
            finish_locked(grpc::Status(grpc::StatusCode::CANCELLED, "stream closed"));
            return;
        }
        start_locked();
    }
    void OnCancel() override {
        std::lock_guard l(mu_);
        finish_locked(grpc::Status::CANCELLED);
    }
    void OnDone() override {
        std::lock_guard l(mu_);
        done_ = true;
    }

private:
    void start_locked() {
        if (writing_ || !have_pending_ || finished_)
            return;
        current_ = std::move(pending_);
        have_pending_ = false;
        writing_ = true;
        if (pending_last_) {
            finished_ = true;
            StartWriteAndFinish(&current_, grpc::WriteOptions(), grpc::Status::OK);
        } else {
            StartWrite(&current_);
        }
    }
    void finish_locked(const grpc::Status& s) {
        if (finished_)
            return;
        finished_ = true;
        Finish(s);
    }

    // Recursive: gRPC may run OnWriteDone on the thread that called StartWrite.
    mutable std::recursive_mutex mu_;
    ListAndWatchResponse current_, pending_;
    bool have_pending_ = false, pending_last_ = false, writing_ = false;
    bool finished_ = false, done_ = false;
};

grpc::Status status_of(const AllocateError& e) {
    switch (e.code) {
    case AllocateError::Code::InvalidArgument:
        return {grpc::StatusCode::INVALID_ARGUMENT, e.message};
    case AllocateError::Code::FailedPrecondition:
        return {grpc::StatusCode::FAILED_PRECONDITION, e.message};
    case AllocateError::Code::Unavailable:
        return {grpc::StatusCode::UNAVAILABLE, e.message};
    }
    return {grpc::StatusCode::INTERNAL, e.message};
}

// Who holds which device, from the kubelet's PodResources List.
bool list_holders(const std::string& socket, Holders* out, std::string* err) {
    auto channel = grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials());
    auto stub = v1::PodResourcesLister::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ListPodResourcesRequest req;
    v1::ListPodResourcesResponse resp;
    grpc::Status s = stub->List(&ctx, req, &resp);
    if (!s.ok()) {
        *err = "kubelet PodResources List on " + socket + ": " + s.error_message();
        return false;
    }
    for (const auto& pod : resp.pod_resources())
        for (const auto& c : pod.containers())
            for (const auto& d : c.devices())
                for (const auto& id : d.device_ids())
                    (*out)[id] = printable(pod.namespace_()) + "/" + printable(pod.name()) + "/" +
                                 printable(c.name());
    return true;
}

// An Allocate is one log line however large (issue 23: 10,000 empty containers were 10,000
// lines, 5,000 IDs one 65 KB line): how many, the first few IDs, and how many more.
constexpr size_t kLoggedIds = 8;

std::string allocation_summary(const std::vector<DeviceIds>& requests) {
    size_t total = 0;
    std::string ids;
    for (const auto& container : requests)
        for (const auto& id : container)
            if (++total <= kLoggedIds)
                ids += (total > 1 ? ", " : ": ") + id.str();
    std::string s = std::to_string(total) + (total == 1 ? " device to " : " devices to ") +
                    std::to_string(requests.size()) +
                    (requests.size() == 1 ? " container" : " containers") + ids;
    if (total > kLoggedIds)
        s += " and " + std::to_string(total - kLoggedIds) + " more";
    return s;
}

}  // namespace

class PluginService
    : public v1beta1::DevicePlugin::WithCallbackMethod_ListAndWatch<v1beta1::DevicePlugin::Service> {
public:
    PluginService(std::string resource, const Endpoints& endpoints, const SnapshotStore& store,
                  const HostFs& host)
        : resource_(std::move(resource)), endpoints_(endpoints), store_(store), host_(host) {}

    ~PluginService() override {
        std::lock_guard l(mu_);
        streams_.clear();
    }

    grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                        v1beta1::DevicePluginOptions* out) override {
        out->set_pre_start_required(false);
        out->set_get_preferred_allocation_available(true);
        return grpc::Status::OK;
    }

    grpc::ServerWriteReactor<ListAndWatchResponse>* ListAndWatch(grpc::CallbackServerContext* ctx,
                                                                 const v1beta1::Empty*) override {
        std::lock_guard l(mu_);
        reap_locked();
        auto stream = std::make_unique<ListStream>();
        ListStream* raw = stream.get();
        if (stopping_) {
            raw->send(ListAndWatchResponse(), true);
        } else {
            last_ = list_of(*store_.get(), resource_);
            raw->send(last_, false);
            spdlog::debug("{}: ListAndWatch opened by {}", resource_, peer_of(*ctx));
        }
        streams_.push_back(std::move(stream));
        return raw;
    }

    void publish() {
        std::lock_guard l(mu_);
        reap_locked();
        ListAndWatchResponse now = list_of(*store_.get(), resource_);
        if (now.SerializeAsString() == last_.SerializeAsString())
            return;
        last_ = now;
        for (auto& s : streams_)
            s->send(now, false);
    }

    // The last word on every stream, and on any stream opened from now on: no devices.
    void close_streams() {
        std::lock_guard l(mu_);
        stopping_ = true;
        for (auto& s : streams_)
            s->send(ListAndWatchResponse(), true);
    }

    grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                        const v1beta1::PreferredAllocationRequest* req,
                                        v1beta1::PreferredAllocationResponse* out) override {
        auto snap = store_.get();
        const bool of_mdevs = snap->mdev_resources.count(resource_);
        for (const auto& c : req->container_requests()) {
            auto* r = out->add_container_responses();
            // Parsed once, here; the answer is addresses, formatted back only on the way out.
            DeviceIds available = parse_device_ids(c.available_deviceids());
            DeviceIds must = parse_device_ids(c.must_include_deviceids());
            if (of_mdevs) {
                for (std::string& uuid :
                     preferred_mdevs(*snap, resource_, available, must, c.allocation_size()))
                    r->add_deviceids(std::move(uuid));
                continue;
            }
            for (const PciAddress& a :
                 preferred_allocation(*snap, resource_, available, must, c.allocation_size()))
                r->add_deviceids(a.str());
        }
        return grpc::Status::OK;
    }

    grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                          v1beta1::AllocateResponse* out) override {
        auto snap = store_.get();
        std::vector<DeviceIds> requests;
        requests.reserve(static_cast<size_t>(req->container_requests_size()));
        for (const auto& c : req->container_requests())
            requests.push_back(parse_device_ids(c.devices_ids()));  // once, here
        Holders holders;
        AllocateError err;
        if (!group_mates_outside(*snap, requests).empty()) {
            std::string why;
            if (!list_holders(endpoints_.pod_resources, &holders, &why)) {
                err = {AllocateError::Code::Unavailable,
                       "cannot check that no other container holds a function of the same "
                       "IOMMU group: " + why};
                spdlog::warn("{}: Allocate refused: {}", resource_, err.message);
                return status_of(err);
            }
        }
        std::vector<ContainerAllocation> answers;
        if (!allocate(*snap, resource_, requests, holders, host_, &answers, &err)) {
            spdlog::warn("{}: Allocate refused: {}", resource_, err.message);
            return status_of(err);
        }
        for (const auto& a : answers) {
            auto* r = out->add_container_responses();
            for (const auto& [k, v] : a.envs)
                (*r->mutable_envs())[k] = v;
            for (const auto& n : a.devices) {
                auto* d = r->add_devices();
                d->set_container_path(n.path);
                d->set_host_path(n.path);
                d->set_permissions("mrw");
            }
        }
        spdlog::info("{}: allocated {}", resource_, allocation_summary(requests));
        return grpc::Status::OK;
    }

    grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                   v1beta1::PreStartContainerResponse*) override {
        return grpc::Status::OK;
    }

private:
    void reap_locked() {
        streams_.remove_if([](const std::unique_ptr<ListStream>& s) { return s->done(); });
    }

    std::string resource_;
    Endpoints endpoints_;
    const SnapshotStore& store_;
    const HostFs& host_;
    std::mutex mu_;
    std::list<std::unique_ptr<ListStream>> streams_;
    ListAndWatchResponse last_;
    bool stopping_ = false;
};

ResourceServer::ResourceServer(std::string resource, const Endpoints& endpoints,
                               const SnapshotStore& store, const HostFs& host)
    : resource_(std::move(resource)),
      endpoints_(endpoints),
      socket_path_(endpoints.kubelet_dir + "/" + plugin_socket_name(resource_)),
      store_(store),
      host_(host) {}

ResourceServer::~ResourceServer() { stop(); }

bool ResourceServer::serve(std::string* err) {
    if (server_)
        stop();
    // A service belongs to one server for life: each start gets a new one.
    service_ = std::make_unique<PluginService>(resource_, endpoints_, store_, host_);
    // check-config refuses a name whose socket does not fit under the default directory; a
    // longer --kubelet-dir can still push it past what bind() takes, which gRPC only reports
    // as a failure to listen.
    if (socket_path_.size() > kMaxSocketPath) {
        *err = "cannot listen on " + socket_path_ + ": " + std::to_string(socket_path_.size()) +
               " bytes, and a unix socket path holds at most " + std::to_string(kMaxSocketPath);
        return false;
    }
    // A socket file left by a killed instance of ours would make bind() fail.
    unlink(socket_path_.c_str());
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
    b.SetMaxReceiveMessageSize(kMaxMessageBytes);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    if (!server_) {
        *err = "cannot listen on " + socket_path_;
        return false;
    }
    return true;
}

void ResourceServer::publish() {
    if (server_)
        service_->publish();
}

void ResourceServer::close_streams() {
    if (server_)
        service_->close_streams();
}

void ResourceServer::stop(std::chrono::system_clock::time_point deadline) {
    if (!server_)
        return;
    service_->close_streams();
    server_->Shutdown(deadline);
    server_->Wait();
    server_.reset();
    unlink(socket_path_.c_str());
}

}  // namespace vfiod::plugin
