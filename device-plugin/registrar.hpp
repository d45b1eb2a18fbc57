// Register calls to the kubelet (device plugin API v1beta1), and where their gRPC objects end.
//
// gRPC++ completes an asynchronous call on one of the threads of its shared callback queue. A
// channel must not be freed on such a thread: when it is the queue's last user (no endpoint
// serving any more), freeing it shuts the queue down and frees it under the thread that runs on
// it. ASan reported that as a double free in grpc_cq_internal_unref, and the plugin aborted at
// SIGTERM (CI, 2026-12). So a finished call is parked here and freed by reap() on the loop
// thread, and finish() cancels what is still in flight, waits for it, and frees it all.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace vfiod::plugin {

struct RegisterOutcome {
    bool ok = false;
    // Nobody listens on kubelet.sock (yet): kubelet.sock appears at bind(), a moment before the
    // kubelet listens, so this is worth another try. Any other failure is the kubelet's refusal.
    bool unreachable = false;
    std::string error;  // ready for the log
};

// How long finish() waits for cancelled calls to complete; gRPC completes them at once.
constexpr auto kCancelGrace = std::chrono::seconds(2);

class Registrar {
public:
    explicit Registrar(std::string kubelet_dir);
    ~Registrar();
    Registrar(const Registrar&) = delete;
    Registrar& operator=(const Registrar&) = delete;

    // Registers `resource` served on `endpoint` (a socket name in the kubelet directory), without
    // waiting: `done` runs later on a gRPC thread, with the outcome. It must not block.
    void start(const std::string& resource, const std::string& endpoint,
               std::function<void(const RegisterOutcome&)> done);
    // Frees the calls that have completed. Loop thread only.
    void reap();
    // Cancels every call in flight, waits for gRPC to complete them and frees everything.
    void finish();

private:
    struct Call;
    struct State;

    std::string kubelet_dir_;
    // Shared with the calls' completions, so that a completion that outlives finish()'s wait
    // (gRPC wedged) still finds it; finish() then leaves it allocated rather than free a channel
    // on a gRPC thread.
    std::shared_ptr<State> state_;
};

}  // namespace vfiod::plugin
