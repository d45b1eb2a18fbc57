// Fd: owns one file descriptor and closes it when it goes out of scope or is replaced. Shared by
// the access layer, the daemon's event loop and vfiod-device-plugin.
#pragma once

#include <unistd.h>

#include <utility>

namespace vfiod {

class Fd {
public:
    explicit Fd(int fd = -1) noexcept : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        reset(o.release());
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;

    int get() const noexcept { return fd_; }
    // Hands the descriptor over (to fdopendir, say); this object no longer closes it.
    int release() noexcept { return std::exchange(fd_, -1); }
    // Closes the descriptor held, if any, and takes `fd`. A close error is not reported: a caller
    // that must see one (a sysfs write whose store() fails at close) closes by hand.
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_;
};

}  // namespace vfiod
