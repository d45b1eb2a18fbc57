// One kernel attribute write that may block forever without holding its caller (DESIGN §4, §12):
// a sysfs store() can sleep until a user lets go (a driver's remove() waiting for a VM, an
// mdev's remove while its device is open), and a thread blocked in the kernel cannot be
// interrupted. So the write runs on a thread of its own and the caller waits at most a timeout;
// a write that has not returned by then is handed back, still in flight, for the caller to
// remember (nobody writes there again until it returns). The executor's group, PF and mdev
// writes all go through here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "io/host_fs.hpp"

namespace vfiod {

// A write in flight on its own thread.
struct PendingWrite {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    int err = 0;

    // Whether it has returned (then err is its result).
    bool finished() {
        std::lock_guard lock(m);
        return done;
    }
};

// What write_within() returns when the write did not return within the timeout.
inline constexpr int kWriteStuck = -1;

// fs.write(rel, value) on a thread of its own, waited for at most `timeout`: 0 or its errno when
// it returned in time (or the errno of starting the thread); kWriteStuck when not, with *left
// set to the write still in flight. fs must outlive it.
int write_within(HostFs& fs, const std::string& rel, const std::string& value,
                 std::chrono::milliseconds timeout, std::shared_ptr<PendingWrite>* left);

}  // namespace vfiod
