#include "infra/instance_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace vfiod {

bool lock_instance(const char* program, const std::string& dir, Fd* lock) {
    lock->reset(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (lock->get() < 0) {
        spdlog::critical("cannot open {}: {}", dir, std::strerror(errno));
        return false;
    }
    if (flock(lock->get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            spdlog::critical("another {} already uses {} (its lock is held); exiting", program,
                             dir);
        else
            spdlog::critical("cannot lock {}: {}", dir, std::strerror(errno));
        lock->reset();
        return false;
    }
    return true;
}

}  // namespace vfiod
