// Which served resources the current kubelet does not know yet, and the Register calls that
// tell it (through the Registrar). It retries a kubelet.sock nobody listens on yet, says once
// per wait that it waits for the kubelet, and ignores an outcome whose resource went or whose
// kubelet restarted meanwhile. Loop thread only. It owns the bookkeeping and the Registrar;
// it never starts or stops a server and never touches a socket file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "infra/loop.hpp"
#include "registrar.hpp"

namespace vfiod::plugin {

// Runs one entry from the loop or gRPC, catching what it throws (Plugin's guard).
using Guard = std::function<void(const char* what, const std::function<void()>& f)>;

class Registrations {
public:
    Registrations(std::string kubelet_dir, Loop& loop, Guard guard);

    // `name` is served and must be registered (again): a fresh start, whatever was in flight or
    // scheduled. register_all() sends it.
    void need(const std::string& name);
    // `name` is no longer served: nothing more is sent or retried for it.
    void forget(const std::string& name);
    // Registers every resource that needs it and has no call in flight or scheduled, once
    // kubelet.sock exists.
    void register_all();
    // At exit: the calls in flight cancelled and freed (Registrar::finish).
    void finish() { registrar_.finish(); }

private:
    // A resource not registered with the current kubelet yet.
    struct Pending {
        std::uint64_t attempt_id = 0;  // the Register in flight; 0 when none is
        int tries = 0;                 // failed for want of a listener, in a row
        Loop::TimerId retry = 0;       // the next try, when one is scheduled
    };

    bool kubelet_listed() const;
    void try_register(const std::string& name);
    void registered(const std::string& name, std::uint64_t attempt, const RegisterOutcome& out);

    std::string kubelet_dir_;
    Loop& loop_;
    Guard guard_;
    Registrar registrar_;
    std::map<std::string, Pending> unregistered_;
    std::uint64_t attempts_ = 0;
    bool said_waiting_ = false;
};

}  // namespace vfiod::plugin
