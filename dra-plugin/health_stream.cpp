#include "health_stream.hpp"

#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "device_health.hpp"
#include "dra-health/v1/api.grpc.pb.h"
#include "dra-health/v1alpha1/api.grpc.pb.h"

namespace vfiod::dra {

namespace {

// What every stream says, made once per publish().
struct State {
    struct Entry {
        std::string name;
        HealthReport report;
    };
    std::vector<Entry> devices;
};

// One stream, whichever version; its flags are the hub's (under its lock).
struct Stream {
    virtual ~Stream() = default;
    // Fills the stream's message from `s` and starts writing it; never under the hub's lock
    // (gRPC may call OnWriteDone on this very thread).
    virtual void write(const State& s, const std::string& pool, int64_t lease, int64_t now) = 0;
    virtual void finish(const grpc::Status& s) = 0;
    bool writing = false;   // a write is in flight: the next one waits for OnWriteDone
    bool pending = false;   // a newer state came meanwhile
    bool finishing = false;  // Finish wanted once the write in flight is done
    bool finished = false;
    grpc::Status why;       // what Finish says
};

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// The streams and what they say; the services' reactors call it.
struct Hub {
    explicit Hub(HealthStreams::Options o) : opts(std::move(o)) {}

    const HealthStreams::Options opts;
    mutable std::mutex mu;
    std::condition_variable cv;
    std::shared_ptr<const State> state;  // null until the first publish()
    uint64_t version = 0;                // publish()es so far
    bool running = false;
    std::set<Stream*> streams;
    HealthStreams::Stats counts;
    std::thread sender;
    std::vector<std::unique_ptr<grpc::Service>> services;

    // A new stream: kept, and sent the state at once when there is one; false when refused.
    bool open(Stream* s) {
        {
            std::lock_guard l(mu);
            if (!running || streams.size() >= opts.max_streams) {
                ++counts.refused;
                return false;
            }
            streams.insert(s);
            ++counts.opened;
        }
        spdlog::info("the kubelet opened a health stream");
        offer(s);
        return true;
    }

    // Writes the newest state to `s` unless a write is in flight (then it follows that one).
    void offer(Stream* s) {
        std::shared_ptr<const State> st;
        {
            std::lock_guard l(mu);
            if (!streams.count(s) || !state || s->finished || s->finishing)
                return;
            if (s->writing) {
                s->pending = true;
                return;
            }
            s->writing = true;
            ++counts.messages;
            st = state;
        }
        s->write(*st, opts.pool, opts.lease_seconds, unix_now());
    }

    void write_done(Stream* s, bool ok) {
        bool finishing = false;
        {
            std::lock_guard l(mu);
            s->writing = false;
            if (!ok && !s->finishing) {
                // The peer went away, or the server is shutting down: nothing more goes out.
                s->finishing = true;
                s->why = grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cut");
            }
            finishing = s->finishing;
            if (!finishing && !std::exchange(s->pending, false))
                return;
        }
        if (finishing)
            end(s, {});  // the status set with `finishing`
        else
            offer(s);
    }

    // Finishes `s` with `why` now, or once its write in flight is done.
    void end(Stream* s, const grpc::Status& why) {
        {
            std::lock_guard l(mu);
            if (s->finished)
                return;
            if (!s->finishing) {
                s->finishing = true;
                s->why = why;
            }
            if (s->writing)
                return;
            s->finished = true;
        }
        s->finish(s->why);
    }

    void forget(Stream* s) {
        std::lock_guard l(mu);
        if (streams.erase(s))
            spdlog::info("a health stream ended: {}",
                         s->why.ok() ? "done" : s->why.error_message());
        cv.notify_all();
    }

    void send_loop() {
        std::unique_lock l(mu);
        uint64_t seen = version;
        auto next = std::chrono::steady_clock::now() + opts.resend;
        while (running) {
            cv.wait_until(l, next, [&] { return !running || version != seen; });
            if (!running)
                break;
            seen = version;
            next = std::chrono::steady_clock::now() + opts.resend;
            std::vector<Stream*> all(streams.begin(), streams.end());
            l.unlock();
            // A stream cannot be deleted meanwhile: OnDone comes after Finish, which only
            // end() calls, and offer() checks it is still there under the lock.
            for (Stream* s : all)
                offer(s);
            l.lock();
        }
    }
};

// One version's service: the generated CallbackService, its messages filled alike.
template <class Service, class Request, class Response, class Status>
class HealthService final : public Service::CallbackService {
public:
    explicit HealthService(Hub& hub) : hub_(hub) {}

    grpc::ServerWriteReactor<Response>* NodeWatchResources(grpc::CallbackServerContext*,
                                                           const Request*) override {
        auto* r = new Reactor(hub_);
        if (!hub_.open(r)) {
            spdlog::warn("a health stream was refused: too many open, or stopping");
            r->finished = true;
            r->finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "too many health streams, or the plugin is stopping"));
        }
        return r;
    }

private:
    class Reactor final : public Stream, public grpc::ServerWriteReactor<Response> {
    public:
        explicit Reactor(Hub& hub) : hub_(hub) {}

        void write(const State& s, const std::string& pool, int64_t lease,
                   int64_t now) override {
            msg_.Clear();
            for (const auto& e : s.devices) {
                auto* d = msg_.add_devices();
                d->mutable_device()->set_pool_name(pool);
                d->mutable_device()->set_device_name(e.name);
                d->set_health(static_cast<Status>(e.report.health));
                d->set_last_updated_time(now);
                d->set_health_check_timeout_seconds(lease);
                d->set_message(e.report.message);
            }
            this->StartWrite(&msg_);
        }
        void finish(const grpc::Status& s) override { this->Finish(s); }

        void OnWriteDone(bool ok) override { hub_.write_done(this, ok); }
        void OnCancel() override {
            hub_.end(this, grpc::Status(grpc::StatusCode::CANCELLED, "the kubelet went away"));
        }
        void OnDone() override {
            hub_.forget(this);
            delete this;
        }

    private:
        Hub& hub_;
        Response msg_;
    };

    Hub& hub_;
};

using V1 = HealthService<::v1::DRAResourceHealth, ::v1::NodeWatchResourcesRequest,
                         ::v1::NodeWatchResourcesResponse, ::v1::HealthStatus>;
using V1alpha1 =
    HealthService<::v1alpha1::DRAResourceHealth, ::v1alpha1::NodeWatchResourcesRequest,
                  ::v1alpha1::NodeWatchResourcesResponse, ::v1alpha1::HealthStatus>;

}  // namespace

struct HealthStreams::Impl : Hub {
    using Hub::Hub;
};

std::vector<std::string> HealthStreams::service_names() {
    return {::v1::DRAResourceHealth::service_full_name(),
            ::v1alpha1::DRAResourceHealth::service_full_name()};
}

HealthStreams::HealthStreams(Options o) : impl_(std::make_unique<Impl>(std::move(o))) {}

HealthStreams::~HealthStreams() { stop(); }

std::vector<grpc::Service*> HealthStreams::make_services() {
    impl_->services.clear();
    impl_->services.push_back(std::make_unique<V1>(*impl_));
    impl_->services.push_back(std::make_unique<V1alpha1>(*impl_));
    return {impl_->services[0].get(), impl_->services[1].get()};
}

void HealthStreams::start() {
    std::lock_guard l(impl_->mu);
    if (impl_->running)
        return;
    impl_->running = true;
    impl_->sender = std::thread([this] { impl_->send_loop(); });
}

void HealthStreams::publish(const std::vector<DraDevice>& devices) {
    auto st = std::make_shared<State>();
    st->devices.reserve(devices.size());
    for (const auto& d : devices)
        st->devices.push_back({d.name, kubelet_health(d.health)});
    std::lock_guard l(impl_->mu);
    impl_->state = std::move(st);
    ++impl_->version;
    impl_->cv.notify_all();
}

void HealthStreams::stop() {
    std::thread sender;
    {
        std::lock_guard l(impl_->mu);
        impl_->running = false;
        impl_->cv.notify_all();
        sender.swap(impl_->sender);
    }
    if (sender.joinable())
        sender.join();
    // Marked under the lock, finished outside it: a stream marked finished here is finished by
    // no one else, and is not deleted before its Finish (OnDone follows it).
    std::vector<Stream*> now;
    {
        std::lock_guard l(impl_->mu);
        for (Stream* s : impl_->streams) {
            if (s->finished || s->finishing)
                continue;
            s->finishing = true;
            s->why = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the plugin is stopping");
            if (!s->writing) {
                s->finished = true;
                now.push_back(s);
            }
        }
    }
    for (Stream* s : now)
        s->finish(s->why);
}

HealthStreams::Stats HealthStreams::stats() const {
    std::lock_guard l(impl_->mu);
    Stats s = impl_->counts;
    s.open = impl_->streams.size();
    return s;
}

}  // namespace vfiod::dra
