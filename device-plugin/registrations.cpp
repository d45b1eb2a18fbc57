#include "registrations.hpp"

#include <sys/stat.h>

#include <chrono>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "model.hpp"

namespace vfiod::plugin {

// kubelet.sock exists before the kubelet listens on it: retry a refused connection after 50 ms,
// doubling, for about 3 s in all; after that only a new kubelet.sock starts again.
constexpr auto kFirstRetry = std::chrono::milliseconds(50);
constexpr int kMaxTries = 7;

Registrations::Registrations(std::string kubelet_dir, Loop& loop, Guard guard)
    : kubelet_dir_(std::move(kubelet_dir)),
      loop_(loop),
      guard_(std::move(guard)),
      registrar_(kubelet_dir_) {}

bool Registrations::kubelet_listed() const {
    struct stat st;
    return stat((kubelet_dir_ + "/kubelet.sock").c_str(), &st) == 0;
}

void Registrations::need(const std::string& name) {
    auto& p = unregistered_[name];
    loop_.cancel(p.retry);
    p = Pending{};
}

void Registrations::forget(const std::string& name) {
    if (auto p = unregistered_.find(name); p != unregistered_.end()) {
        loop_.cancel(p->second.retry);
        unregistered_.erase(p);
    }
}

void Registrations::register_all() {
    if (unregistered_.empty())
        return;
    if (!kubelet_listed()) {
        if (!said_waiting_)
            spdlog::info("waiting for the kubelet: no {}/kubelet.sock yet", kubelet_dir_);
        said_waiting_ = true;
        return;
    }
    said_waiting_ = false;
    for (auto& [name, p] : unregistered_)
        if (!p.attempt_id && !p.retry && p.tries < kMaxTries)
            try_register(name);
}

void Registrations::try_register(const std::string& name) {
    auto& p = unregistered_[name];
    p.retry = 0;
    p.attempt_id = ++attempts_;
    registrar_.start(
        name, plugin_socket_name(name),
        [mailbox = loop_.mailbox(), this, name, id = p.attempt_id](const RegisterOutcome& out) {
            // On a gRPC thread: nothing may escape into gRPC either.
            try {
                mailbox->post([this, name, id, out] {
                    guard_("registering", [&] { registered(name, id, out); });
                });
            } catch (const std::exception& e) {
                spdlog::error("{}: registration outcome lost: {}", name, e.what());
            }
        });
}

void Registrations::registered(const std::string& name, std::uint64_t attempt,
                               const RegisterOutcome& out) {
    registrar_.reap();
    auto it = unregistered_.find(name);
    if (it == unregistered_.end() || it->second.attempt_id != attempt)
        return;  // superseded: the resource went, or the kubelet restarted meanwhile
    Pending& p = it->second;
    p.attempt_id = 0;
    if (out.ok) {
        spdlog::info("{}: registered with the kubelet", name);
        unregistered_.erase(it);
        return;
    }
    if (out.unreachable && ++p.tries < kMaxTries) {
        spdlog::debug("{}; trying again", out.error);
        p.retry = loop_.after(kFirstRetry * (1 << (p.tries - 1)), [this, name] {
            guard_("registering", [&] {
                if (kubelet_listed())
                    try_register(name);
                else
                    unregistered_[name].retry = 0;  // register_all() on its return
            });
        });
        return;
    }
    // A refusal, or nobody listening for seconds: tried again when the kubelet (re)creates its
    // socket.
    p.tries = kMaxTries;
    spdlog::error("{}", out.error);
}

}  // namespace vfiod::plugin
