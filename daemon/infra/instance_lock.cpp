#include "infra/instance_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>

namespace vfiod {

bool lock_directory(const std::string& dir, Fd* lock, bool* held, std::string* err) {
    *held = false;
    lock->reset(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (lock->get() < 0) {
        *err = "cannot open " + dir + ": " + std::strerror(errno);
        return false;
    }
    if (flock(lock->get(), LOCK_EX | LOCK_NB) != 0) {
        *held = errno == EWOULDBLOCK;
        *err = *held ? std::string("its lock is held")
                     : "cannot lock " + dir + ": " + std::strerror(errno);
        lock->reset();
        return false;
    }
    return true;
}

}  // namespace vfiod
