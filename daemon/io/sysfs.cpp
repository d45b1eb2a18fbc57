#include "sysfs.hpp"

#include "core/strings.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

namespace vfiod {

namespace {

// Every caller-supplied path stays inside the root: an absolute path or a ".." component could
// reach the host's real /sys from a test tree, or anything at all from a crafted name.
bool valid_rel(std::string_view rel) {
    if (!rel.empty() && rel.front() == '/')
        return false;
    for (auto part : path_components(rel))
        if (part == "..")
            return false;
    return true;
}

// Symlink loops (or a hostile tree) must not spin forever; the kernel's own limit is 40.
constexpr int kMaxLinks = 40;

// The host path to hand to the kernel for rel. Under a test or captured root the kernel must not
// follow links itself: an absolute link would lead out to the real /sys. So the path is resolved
// here, within the root (follow_last=false keeps the last component as is, for lstat/readlink).
std::optional<std::string> host_path(const Sysfs& fs, std::string_view rel, bool follow_last) {
    if (!valid_rel(rel))
        return std::nullopt;
    if (fs.live())
        return fs.path(rel);
    if (follow_last) {
        auto r = fs.Sysfs::resolve(rel);
        return r ? std::optional(fs.path(*r)) : std::nullopt;
    }
    auto parts = path_components(rel);
    if (parts.empty())
        return fs.path("");
    std::string parent;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
        parent.append(parent.empty() ? "" : "/").append(parts[i]);
    auto r = fs.Sysfs::resolve(parent);
    if (!r)
        return std::nullopt;
    return fs.path(*r + (r->empty() ? "" : "/") + std::string(parts.back()));
}

}  // namespace

Sysfs::Sysfs(std::string root) : root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/')
        root_.pop_back();
    if (root_.empty())
        root_.push_back('/');
}

std::string Sysfs::path(std::string_view rel) const {
    std::string p = root_;
    if (rel.empty())
        return p;
    if (p.back() != '/')
        p += '/';
    p += rel;
    return p;
}

namespace {

const char* file_kind(mode_t m) {
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISDIR(m))
        return "a directory";
    return "something";
}

}  // namespace

std::optional<std::string> Sysfs::read(std::string_view rel, size_t max_bytes,
                                       std::string* why) const {
    auto fail = [&](std::string reason) -> std::optional<std::string> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    auto p = host_path(*this, rel, true);
    if (!p)
        return std::nullopt;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, in the kernel,
    // where no signal but SIGKILL reaches. It changes nothing for a regular file.
    int fd = ::open(p->c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENXIO)  // a socket, or a device without its driver
            return fail("a socket or device, not a regular file");
        return std::nullopt;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        ::close(fd);
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return fail(std::string(file_kind(st.st_mode)) + ", not a regular file");
    }
    std::string out;
    char buf[4096];
    int err = 0;
    while (out.size() < max_bytes) {
        size_t want = std::min(sizeof buf, max_bytes - out.size());
        ssize_t n = ::read(fd, buf, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (n == 0)
            break;
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    if (err)
        return std::nullopt;
    if (!out.empty() && out.back() == '\n')
        out.pop_back();
    return out;
}

std::optional<std::string> Sysfs::readlink(std::string_view rel) const {
    auto p = host_path(*this, rel, false);
    if (!p || rel.empty())
        return std::nullopt;
    char buf[4096];
    ssize_t n = ::readlink(p->c_str(), buf, sizeof buf);
    if (n < 0 || static_cast<size_t>(n) >= sizeof buf)
        return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
}

std::optional<std::string> Sysfs::link_name(std::string_view rel) const {
    auto target = readlink(rel);
    if (!target)
        return std::nullopt;
    auto parts = path_components(*target);
    if (parts.empty() || parts.back() == ".." || parts.back() == ".")
        return std::nullopt;
    return std::string(parts.back());
}

std::vector<std::string> Sysfs::list(std::string_view rel) const {
    std::vector<std::string> names;
    auto p = host_path(*this, rel, true);
    if (!p)
        return names;
    DIR* dir = ::opendir(p->c_str());
    if (!dir)
        return names;
    while (const dirent* e = ::readdir(dir)) {
        std::string_view name = e->d_name;
        if (name != "." && name != "..")
            names.emplace_back(name);
    }
    ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
}

bool Sysfs::exists(std::string_view rel) const {
    auto p = host_path(*this, rel, false);
    // lstat: a link that exists counts even if its target is gone (ask resolve() for that).
    struct stat st;
    return p && ::lstat(p->c_str(), &st) == 0;
}

std::optional<std::string> Sysfs::resolve(std::string_view rel) const {
    if (!valid_rel(rel))
        return std::nullopt;
    // Walk component by component, so that ".." in a link target is applied to the real parent
    // and every intermediate result can be checked against the root.
    std::vector<std::string> done;
    std::deque<std::string> todo;
    for (auto part : path_components(rel))
        todo.emplace_back(part);
    int links = 0;
    while (!todo.empty()) {
        std::string part = std::move(todo.front());
        todo.pop_front();
        if (part == ".")
            continue;
        if (part == "..") {
            if (done.empty())
                return std::nullopt;  // would leave the root
            done.pop_back();
            continue;
        }
        done.push_back(std::move(part));
        std::string so_far;
        for (const auto& d : done) {
            if (!so_far.empty())
                so_far += '/';
            so_far += d;
        }
        struct stat st;
        if (::lstat(path(so_far).c_str(), &st) != 0)
            return std::nullopt;
        if (!S_ISLNK(st.st_mode))
            continue;
        if (++links > kMaxLinks)
            return std::nullopt;
        char buf[4096];
        ssize_t n = ::readlink(path(so_far).c_str(), buf, sizeof buf);
        if (n <= 0 || static_cast<size_t>(n) >= sizeof buf)
            return std::nullopt;
        std::string_view target(buf, static_cast<size_t>(n));
        done.pop_back();
        // An absolute target means "from the root": a captured tree keeps its meaning when it
        // is moved, and the live host (root "/") gets the usual behaviour.
        if (target.front() == '/')
            done.clear();
        auto tparts = path_components(target);
        for (auto it = tparts.rbegin(); it != tparts.rend(); ++it)
            todo.emplace_front(*it);
    }
    std::string out;
    for (const auto& d : done) {
        if (!out.empty())
            out += '/';
        out += d;
    }
    return out;
}

std::optional<std::pair<unsigned, unsigned>> Sysfs::char_device(std::string_view rel) const {
    if (!live() || !valid_rel(rel))
        return std::nullopt;
    // stat, never open: opening a device node can have effects (a tty, a tape rewinding).
    struct stat st;
    if (::stat(path(rel).c_str(), &st) != 0 || !S_ISCHR(st.st_mode))
        return std::nullopt;
    return std::make_pair(major(st.st_rdev), minor(st.st_rdev));
}

int Sysfs::write(std::string_view rel, std::string_view value) {
    if (!valid_rel(rel) || rel.empty())
        return EINVAL;
    auto p = host_path(*this, rel, true);
    if (!p)
        return ENOENT;
    // No O_CREAT: a sysfs attribute either exists or the write is a mistake, and creating a
    // regular file in its place would hide that. O_TRUNC is ignored by sysfs (as for a shell's
    // `>`), and in a captured tree it keeps a shorter value from leaving old bytes behind.
    int fd = ::open(p->c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return errno;
    // One write(2): the kernel's store() sees exactly one buffer, and a retry loop would feed
    // it a second, truncated command.
    ssize_t n = ::write(fd, value.data(), value.size());
    int err = n < 0 ? errno : (static_cast<size_t>(n) != value.size() ? EIO : 0);
    // Some attributes report their error only when the file is closed.
    if (::close(fd) != 0 && err == 0)
        err = errno;
    return err;
}

}  // namespace vfiod
