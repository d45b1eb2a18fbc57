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

}  // namespace vfiod::test
