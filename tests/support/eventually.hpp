// Waiting for something another process or thread does: the condition polled until it holds or
// the time is up. Tests only; the limits they pass are generous (several times any goal).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace vfiod::test {

// Whether f() held within `timeout`, asked every 10 ms and once more at the end.
inline bool eventually(const std::function<bool()>& f, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
        if (f())
            return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f();
}

// The same within 15 s: a safety net for what takes milliseconds, or a second or two on a loaded
// two-core machine.
inline bool eventually(const std::function<bool()>& f) {
    return eventually(f, std::chrono::seconds(15));
}

}  // namespace vfiod::test
