#include "exec/hang_safe_write.hpp"

#include <cerrno>
#include <system_error>
#include <thread>

namespace vfiod {

int write_within(HostFs& fs, const std::string& rel, const std::string& value,
                 std::chrono::milliseconds timeout, std::shared_ptr<PendingWrite>* left) {
    auto pending = std::make_shared<PendingWrite>();
    try {
        // The thread holds only the shared PendingWrite and the HostFs: left behind when the
        // write blocks, it ends whenever the kernel lets the write return.
        std::thread([pending, fs = &fs, rel, value] {
            int err = fs->write(rel, value);
            std::lock_guard lock(pending->m);
            pending->done = true;
            pending->err = err;
            pending->cv.notify_all();
        }).detach();
    } catch (const std::system_error& e) {
        return e.code().value() ? e.code().value() : EAGAIN;
    }
    std::unique_lock lock(pending->m);
    if (pending->cv.wait_for(lock, timeout, [&] { return pending->done; }))
        return pending->err;
    *left = pending;
    return kWriteStuck;
}

}  // namespace vfiod
