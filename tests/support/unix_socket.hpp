// Test helper: is a server accepting on this unix socket yet?
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace vfiod::test {

// The socket file appears at bind(), before the server's listen(): a client that connects in
// between gets ECONNREFUSED (seen on a loaded machine). Only a connect that succeeds says "ready".
inline bool accepts_connections(const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path))
        return false;
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return ok;
}

}  // namespace vfiod::test
