// An event loop's idle seen from outside its process: the loop's thread asleep in poll(2) or
// ppoll(2), and the timeout it gave, which says when it wakes by itself if no fd does. A loop that
// sleeps has done all it had to do; one that sleeps with no timeout, or a long one, has no timer
// due before then. A test waits for that to know a program has settled before it checks that
// something did not happen. Linux: /proc/PID/task/TID/syscall, which only a process allowed to
// trace the program may read (its parent, or root).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace vfiod::test {

// The timeout in milliseconds (-1: none) of the poll that thread `tid` of `pid` (its main
// thread by default) sleeps in now; nullopt when it is running, in another system call, or
// cannot be read.
inline std::optional<long> poll_sleep_ms(pid_t pid, pid_t tid = 0) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid ? tid : pid) +
                    "/syscall");
    std::string line;
    if (!std::getline(f, line))
        return std::nullopt;
    // "NR ARG0 ARG1 ARG2 ... SP PC", the arguments in hex; "running" when not in a system call.
    std::istringstream words(line);
    std::string nr, fds, nfds, timeout;
    if (!(words >> nr >> fds >> nfds >> timeout) || nr == "running")
        return std::nullopt;
    const long call = std::strtol(nr.c_str(), nullptr, 10);
    const unsigned long arg = std::strtoul(timeout.c_str(), nullptr, 16);
#ifdef SYS_poll
    if (call == SYS_poll)
        return static_cast<int>(arg);  // an int: 0xffffffff is -1
#endif
    if (call == SYS_ppoll) {
        if (arg == 0)
            return -1;  // no timespec: no timeout
        timespec ts{};
        iovec mine{&ts, sizeof ts};
        iovec theirs{reinterpret_cast<void*>(arg), sizeof ts};
        if (process_vm_readv(pid, &mine, 1, &theirs, 1, 0) != static_cast<ssize_t>(sizeof ts))
            return std::nullopt;
        return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    }
    return std::nullopt;
}

}  // namespace vfiod::test
