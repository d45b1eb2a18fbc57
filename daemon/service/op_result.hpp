// The outcome of an operator request and how it is answered, on their own so the operation
// queue, the deciders and the status store can answer without knowing the service.
#pragma once

#include <functional>
#include <string>
#include <utility>

namespace vfiod {

// The outcome of an operator request, in the closed set of D-Bus errors (DESIGN §6).
struct OpResult {
    // Busy: too many requests already wait (org.freedesktop.DBus.Error.LimitsExceeded).
    enum class Code { Ok, InvalidArgs, NotFound, NotAllowlisted, Refused, Failed, Busy };
    Code code = Code::Ok;
    std::string message;  // for Refused it starts with the reason code

    bool ok() const { return code == Code::Ok; }
    static OpResult error(Code c, std::string m) { return {c, std::move(m)}; }
};

// Answers one request (a D-Bus method's reply); it runs on the loop, once what the operation
// did is published (StatusStore::answer).
using Reply = std::function<void(const OpResult&)>;

}  // namespace vfiod
