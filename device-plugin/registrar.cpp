#include "registrar.hpp"

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "core/strings.hpp"
#include "deviceplugin.grpc.pb.h"

namespace vfiod::plugin {

struct Registrar::Call {
    std::unique_ptr<v1beta1::Registration::Stub> stub;
    grpc::ClientContext ctx;
    v1beta1::RegisterRequest req;
    v1beta1::Empty resp;
};

struct Registrar::State {
    mutable std::mutex mu;
    std::condition_variable cv;
    std::map<std::uint64_t, std::unique_ptr<Call>> running, finished;
    std::uint64_t next_id = 0;
};

Registrar::Registrar(std::string kubelet_dir)
    : kubelet_dir_(std::move(kubelet_dir)), state_(std::make_shared<State>()) {}

Registrar::~Registrar() { finish(); }

void Registrar::start(const std::string& resource, const std::string& endpoint,
                      std::function<void(const RegisterOutcome&)> done) {
    auto call = std::make_unique<Call>();
    Call* raw = call.get();
    const std::string kubelet = kubelet_dir_ + "/kubelet.sock";
    // A subchannel of its own: gRPC shares them between channels to one address, and a shared
    // one that just failed to connect sits in reconnect backoff (1 s, growing), failing every
    // try at once without connecting.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    call->stub = v1beta1::Registration::NewStub(
        grpc::CreateCustomChannel("unix://" + kubelet, grpc::InsecureChannelCredentials(), args));
    // No wait_for_ready: a kubelet that is not listening fails the call at once, and the caller
    // tries again from its loop's timer. The deadline bounds a kubelet that accepts but never
    // answers.
    call->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    call->req.set_version("v1beta1");
    call->req.set_endpoint(endpoint);
    call->req.set_resource_name(resource);
    call->req.mutable_options()->set_get_preferred_allocation_available(true);
    std::uint64_t id;
    {
        std::lock_guard l(state_->mu);
        id = ++state_->next_id;
        state_->running.emplace(id, std::move(call));
    }
    // The completion holds no gRPC object: the call stays in `running` until it completes, then
    // waits in `finished` for the loop thread.
    raw->stub->async()->Register(
        &raw->ctx, &raw->req, &raw->resp,
        [state = state_, id, raw, kubelet, done = std::move(done)](grpc::Status s) {
            RegisterOutcome out;
            out.ok = s.ok();
            out.unreachable = s.error_code() == grpc::StatusCode::UNAVAILABLE;
            if (!s.ok())
                out.error = "kubelet (" + kubelet + ") did not register " +
                            raw->req.resource_name() + ": " + printable(s.error_message(), 200);
            {
                std::lock_guard l(state->mu);
                auto it = state->running.find(id);
                state->finished.insert(state->running.extract(it));
                state->cv.notify_all();
            }
            done(out);
        });
}

void Registrar::reap() {
    std::map<std::uint64_t, std::unique_ptr<Call>> done;
    {
        std::lock_guard l(state_->mu);
        done.swap(state_->finished);
    }
    // Freed here, outside the lock: a channel's end may join gRPC's threads.
}

void Registrar::finish() {
    {
        std::unique_lock l(state_->mu);
        for (auto& [id, call] : state_->running) {
            spdlog::info("{}: registration cancelled: stopping", call->req.resource_name());
            call->ctx.TryCancel();
        }
        if (!state_->cv.wait_for(l, kCancelGrace, [&] { return state_->running.empty(); })) {
            spdlog::error("{} registration(s) still running {} s after being cancelled; left "
                          "to gRPC",
                          state_->running.size(), kCancelGrace.count());
            // Their completions may still come: the state must outlive this object.
            new std::shared_ptr<State>(state_);  // NOLINT: deliberately never freed
            state_ = std::make_shared<State>();
            return;
        }
    }
    reap();
}

}  // namespace vfiod::plugin
