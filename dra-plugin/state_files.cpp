#include "state_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

namespace vfiod::dra {

namespace {

std::mutex hook_mu;
std::function<int(const std::string&)> write_hook;

int hooked_errno(const std::string& host_path) {
    std::lock_guard<std::mutex> l(hook_mu);
    return write_hook ? write_hook(host_path) : 0;
}

bool gone(int e) { return e == ENOENT || e == ENOTDIR; }

}  // namespace

std::string dir_of(const std::string& p) { return p.substr(0, p.rfind('/')); }
std::string base_of(const std::string& p) { return p.substr(p.rfind('/') + 1); }

std::string StateFiles::path(const std::string& host_path) const {
    return host_.path(HostFs::rel_of(host_path));
}

std::string StateFiles::errno_text(int e) {
    return std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
}

Fd StateFiles::open_dir(const std::string& dir, bool create, int* e) const {
    return host_.open_own_dir(HostFs::rel_of(dir), create, e);
}

Fd StateFiles::open_private(const std::string& dir, int* e) const {
    Fd fd = open_dir(dir, true, e);
    if (fd.get() >= 0 && ::fchmod(fd.get(), 0700) != 0) {
        *e = errno;
        return Fd();
    }
    return fd;
}

std::string StateFiles::write(const std::string& host_path, const std::string& data, mode_t mode,
                              bool private_dir) const {
    int e = hooked_errno(host_path);
    if (e)
        return "cannot write " + path(host_path) + ": " + errno_text(e);
    Fd dir = private_dir ? open_private(dir_of(host_path), &e)
                         : open_dir(dir_of(host_path), true, &e);
    if (dir.get() < 0)
        return "cannot create directory " + path(dir_of(host_path)) + ": " + errno_text(e);
    if ((e = HostFs::replace_own(dir.get(), base_of(host_path), data, mode)))
        return "cannot write " + path(host_path) + ": " + errno_text(e);
    return "";
}

std::string StateFiles::remove(const std::string& host_path, bool durable) const {
    int e = 0;
    Fd dir = open_dir(dir_of(host_path), false, &e);
    if (dir.get() < 0)
        return gone(e) ? "" : "cannot remove " + path(host_path) + ": " + errno_text(e);
    const std::string name = base_of(host_path);
    ::unlinkat(dir.get(), (name + ".tmp").c_str(), 0);
    if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        return "cannot remove " + path(host_path) + ": " + errno_text(errno);
    if (durable)
        ::fsync(dir.get());
    return "";
}

std::string StateFiles::remove_dir(const std::string& dir) const {
    int e = 0;
    Fd parent = open_dir(dir_of(dir), false, &e);
    if (parent.get() >= 0) {
        if (::unlinkat(parent.get(), base_of(dir).c_str(), AT_REMOVEDIR) == 0)
            return "";
        e = errno;
    }
    return gone(e) ? "" : "cannot remove " + path(dir) + ": " + errno_text(e);
}

namespace prepare_testing {
void set_write_hook(std::function<int(const std::string& host_path)> hook) {
    std::lock_guard<std::mutex> l(hook_mu);
    write_hook = std::move(hook);
}
}  // namespace prepare_testing

}  // namespace vfiod::dra
