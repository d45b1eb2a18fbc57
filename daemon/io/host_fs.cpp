#include "host_fs.hpp"

#include "core/strings.hpp"
#include "infra/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
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

long real_openat2(int dirfd, const char* path, void* how, size_t size) {
    return ::syscall(SYS_openat2, dirfd, path, how, size);
}

std::atomic<sysfs_testing::Openat2Fn> g_openat2{real_openat2};
// Set once openat2 answered ENOSYS (a kernel before 5.6, or a seccomp filter that hides it):
// from then on every call takes the user-space resolver, without asking the kernel again.
std::atomic<bool> g_no_openat2{false};

// rel, or "." for the root itself: the *at() calls want a non-empty path.
const char* at_path(const std::string& rel) { return rel.empty() ? "." : rel.c_str(); }

// ("a/b", "c") for "a/b/c"; ("", "c") for "c".
std::pair<std::string, std::string> split_last(std::string_view rel) {
    auto slash = rel.rfind('/');
    if (slash == std::string_view::npos)
        return {"", std::string(rel)};
    return {std::string(rel.substr(0, slash)), std::string(rel.substr(slash + 1))};
}

}  // namespace

namespace sysfs_testing {

void set_openat2(Openat2Fn fn) {
    g_openat2 = fn ? fn : real_openat2;
    g_no_openat2 = false;
}

}  // namespace sysfs_testing

KernelHostFs::KernelHostFs(std::string root) : root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/')
        root_.pop_back();
    if (root_.empty())
        root_.push_back('/');
    // One dir fd for the root, kept for the object's life: every access starts from it.
    root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (char* canon = ::realpath(root_.c_str(), nullptr)) {
        canonical_root_ = canon;
        ::free(canon);
    }
}

KernelHostFs::~KernelHostFs() {
    if (root_fd_ >= 0)
        ::close(root_fd_);
}

std::string HostFs::path(std::string_view rel) const {
    std::string p = root();
    if (rel.empty())
        return p;
    if (p.back() != '/')
        p += '/';
    p += rel;
    return p;
}

std::string_view HostFs::rel_of(std::string_view host_path) {
    host_path.remove_prefix(std::min(host_path.find_first_not_of('/'), host_path.size()));
    return host_path;
}

std::string HostFs::own_dir_error(int err) const {
    if (err == EXDEV)
        return "a symlink on the way leads out of the root " + root();
    return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
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

int KernelHostFs::open_fd(std::string_view rel_view, int flags, bool beneath) const {
    if (root_fd_ < 0 || !valid_rel(rel_view)) {
        errno = ENOENT;
        return -1;
    }
    const std::string rel(rel_view);
    flags |= O_CLOEXEC;
    // The live host: the kernel walks the path from the cached "/" fd, links and all.
    if (live())
        return ::openat(root_fd_, at_path(rel), flags);
    // A captured or test tree: the kernel resolves every link as if the root were "/", so an
    // absolute link or a ".." in a link target stays in the tree, and magic links (/proc/PID/fd,
    // /proc/PID/root) are refused rather than followed out of it.
    if (!g_no_openat2) {
        struct open_how how {};
        how.flags = static_cast<uint64_t>(flags);
        how.resolve = (beneath ? RESOLVE_BENEATH : RESOLVE_IN_ROOT) | RESOLVE_NO_MAGICLINKS;
        for (int attempt = 0;; ++attempt) {
            long fd = g_openat2.load()(root_fd_, at_path(rel), &how, sizeof how);
            if (fd >= 0)
                return static_cast<int>(fd);
            // EAGAIN: a concurrent rename or mount somewhere in the tree; the walk is retried.
            if (errno == EAGAIN && attempt < 8)
                continue;
            if (errno != ENOSYS)
                return -1;
            g_no_openat2 = true;
            break;
        }
    }
    // No openat2: resolve the path here, one component at a time, and open the result.
    const bool follow_last = !(flags & O_NOFOLLOW);
    std::optional<std::string> resolved;
    if (follow_last) {
        resolved = resolve_walk(rel, beneath);
    } else {
        auto [parent, last] = split_last(rel);
        if (auto r = resolve_walk(parent, beneath))
            resolved = *r + (r->empty() ? "" : "/") + last;
    }
    if (!resolved)
        return -1;  // errno from resolve_walk
    return ::openat(root_fd_, at_path(*resolved), flags);
}

bool KernelHostFs::entry_of(const Dir* in, std::string_view rel, std::string* name) {
    if (!in || !in->ok())
        return false;
    const std::string& dir = in->rel_;
    if (!dir.empty()) {
        if (rel.size() <= dir.size() + 1 || rel.compare(0, dir.size(), dir) != 0 ||
            rel[dir.size()] != '/')
            return false;
        rel.remove_prefix(dir.size() + 1);
    }
    if (rel.empty() || rel == "." || rel == ".." || rel.find('/') != std::string_view::npos)
        return false;
    name->assign(rel);
    return true;
}

HostFs::Dir KernelHostFs::open_dir(std::string_view rel) const {
    Dir d;
    if (!valid_rel(rel))
        return d;
    Fd fd(open_fd(rel, O_PATH));
    if (fd.get() < 0)
        return d;
    if (auto w = where(fd.get(), rel)) {
        d.rel_ = std::move(*w);
        d.fd_ = std::move(fd);
    }
    return d;
}

namespace {

// Appends what fd holds to *out, up to end of file or `limit` bytes in all; 0 or the errno.
int read_upto(int fd, size_t limit, std::string* out) {
    char buf[4096];
    while (out->size() < limit) {
        size_t want = std::min(sizeof buf, limit - out->size());
        ssize_t n = ::read(fd, buf, want);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            break;
        out->append(buf, static_cast<size_t>(n));
    }
    return 0;
}

// The read of an open fd behind read() and read_own(): a regular file only; closes fd.
std::optional<std::string> read_fd(int fd, size_t max_bytes, std::string* why) {
    Fd owned(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0)
        return std::nullopt;
    if (!S_ISREG(st.st_mode)) {
        if (why)
            *why = std::string(file_kind(st.st_mode)) + ", not a regular file";
        return std::nullopt;
    }
    std::string out;
    if (read_upto(fd, max_bytes, &out) != 0)
        return std::nullopt;
    if (!out.empty() && out.back() == '\n')
        out.pop_back();
    return out;
}

HostFs::WholeFile::Status open_failure(int err) {
    using S = HostFs::WholeFile::Status;
    switch (err) {
    case ENOENT:
    case ENOTDIR:  // a component on the way is a file: nothing is at the path
        return S::Missing;
    case ENXIO:  // a socket, or a device without its driver
        return S::NotRegular;
    case EACCES:
    case EPERM:
        return S::Denied;
    default:
        return S::Failed;
    }
}

}  // namespace

std::optional<std::string> KernelHostFs::read(std::string_view rel, size_t max_bytes,
                                       std::string* why, const Dir* in) const {
    auto fail = [&](std::string reason) -> std::optional<std::string> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, in the kernel,
    // where no signal but SIGKILL reaches. It changes nothing for a regular file.
    const int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY;
    int fd = -1;
    std::string name;
    if (entry_of(in, rel, &name)) {
        // One lookup in the held directory. O_NOFOLLOW: a link there (never a kernel attribute)
        // is resolved from the root instead, and so gives the answer it gives without the Dir.
        fd = ::openat(in->fd_.get(), name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ELOOP)
            fd = open_fd(rel, flags);
    } else {
        fd = open_fd(rel, flags);
    }
    if (fd < 0) {
        if (errno == ENXIO)  // a socket, or a device without its driver
            return fail("a socket or device, not a regular file");
        return std::nullopt;
    }
    return read_fd(fd, max_bytes, why);
}

HostFs::WholeFile KernelHostFs::read_whole(std::string_view rel, size_t max_bytes) const {
    using S = WholeFile::Status;
    WholeFile f;
    // Opened as read() opens, and for the same reason: a FIFO must not hold the caller.
    Fd fd(open_fd(rel, O_RDONLY | O_NONBLOCK | O_NOCTTY));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
        f.err = errno;
        f.status = open_failure(f.err);
        return f;
    }
    if (!S_ISREG(st.st_mode)) {
        f.status = S::NotRegular;
        return f;
    }
    // One byte past the cap, instead of trusting st_size: the file may grow while it is read.
    const size_t limit = max_bytes < SIZE_MAX ? max_bytes + 1 : max_bytes;
    if (int err = read_upto(fd.get(), limit, &f.bytes)) {
        f.bytes.clear();
        f.err = err;
        return f;
    }
    if (f.bytes.size() > max_bytes) {
        f.bytes.clear();
        f.status = S::TooBig;
        return f;
    }
    f.status = S::Ok;
    return f;
}

std::optional<std::string> HostFs::read_own(int dirfd, const std::string& name, size_t max_bytes,
                                            std::string* why) {
    int fd = ::openat(dirfd, name.c_str(),
                      O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (why && errno == ELOOP)
            *why = "a symbolic link, not a regular file";
        else if (why && errno == ENXIO)
            *why = "a socket or device, not a regular file";
        return std::nullopt;
    }
    return read_fd(fd, max_bytes, why);
}

int HostFs::replace_own(int dirfd, const std::string& name, std::string_view text,
                        unsigned mode) {
    const std::string tmp = name + ".tmp";
    if (::unlinkat(dirfd, tmp.c_str(), 0) != 0 && errno != ENOENT)
        return errno;
    int fd = ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                      static_cast<mode_t>(mode));
    if (fd < 0)
        return errno;
    int err = 0;
    for (size_t done = 0; done < text.size() && !err;) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n > 0)
            done += static_cast<size_t>(n);
        else if (n == 0 || errno != EINTR)
            err = n == 0 ? EIO : errno;
    }
    // The mode as asked, whatever the umask took from it.
    if (!err && (::fchmod(fd, static_cast<mode_t>(mode)) != 0 || ::fsync(fd) != 0))
        err = errno;
    if (::close(fd) != 0 && !err)
        err = errno;
    if (!err && ::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0)
        err = errno;
    if (err) {
        ::unlinkat(dirfd, tmp.c_str(), 0);
        return err;
    }
    // The rename is durable only once the directory is.
    return ::fsync(dirfd) == 0 ? 0 : errno;
}

std::vector<std::string> HostFs::list_own(int dirfd) {
    std::vector<std::string> out;
    int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            ::close(fd);
        return out;
    }
    while (const dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name != "." && name != "..")
            out.push_back(std::move(name));
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

std::optional<std::string> KernelHostFs::readlink(std::string_view rel, const Dir* in) const {
    if (rel.empty())
        return std::nullopt;
    // The link itself is not followed: its parent is opened (inside the root) and asked, or the
    // Dir it is an entry of.
    std::string name;
    Fd parent_fd;
    int dirfd = -1;
    if (entry_of(in, rel, &name)) {
        dirfd = in->fd_.get();
    } else {
        auto [parent, last] = split_last(rel);
        parent_fd.reset(open_fd(parent, O_PATH | O_DIRECTORY));
        dirfd = parent_fd.get();
        name = std::move(last);
    }
    if (dirfd < 0)
        return std::nullopt;
    char buf[4096];
    ssize_t n = ::readlinkat(dirfd, name.c_str(), buf, sizeof buf);
    if (n < 0 || static_cast<size_t>(n) >= sizeof buf)
        return std::nullopt;
    return std::string(buf, static_cast<size_t>(n));
}

std::optional<std::string> HostFs::link_name(std::string_view rel, const Dir* in) const {
    auto target = readlink(rel, in);
    if (!target)
        return std::nullopt;
    auto parts = path_components(*target);
    if (parts.empty() || parts.back() == ".." || parts.back() == ".")
        return std::nullopt;
    return std::string(parts.back());
}

namespace {

// Calls f(name, d_type) for each entry of the directory `fd` (from open_fd) but "." and "..",
// then closes fd; nothing when fd < 0. getdents64 itself: a DIR stream (fdopendir) costs an
// fstat and two fcntls more per directory, and a reader lists one or two per PCI function.
// Returns 0, or the errno of a failed read of the directory.
template <class F>
int each_entry(int fd, F&& f) {
    if (fd < 0)
        return 0;
    Fd dir(fd);
    alignas(dirent64) char buf[32768];
    for (;;) {
        ssize_t n = ::getdents64(fd, buf, sizeof buf);
        if (n <= 0)
            return n < 0 ? errno : 0;
        for (ssize_t at = 0; at < n;) {
            const auto* e = reinterpret_cast<const dirent64*>(buf + at);
            at += e->d_reclen;
            std::string_view name = e->d_name;
            if (name != "." && name != "..")
                f(e->d_name, e->d_type);
        }
    }
}

}  // namespace

std::vector<std::string> KernelHostFs::list(std::string_view rel, int* err) const {
    std::vector<std::string> names;
    const int fd = open_fd(rel, O_RDONLY | O_DIRECTORY);
    const int open_err = fd < 0 ? errno : 0;
    const int read_err =
        each_entry(fd, [&](const char* name, unsigned char) { names.emplace_back(name); });
    if (err)
        *err = open_err ? open_err : read_err;
    std::sort(names.begin(), names.end());
    return names;
}

bool KernelHostFs::exists(std::string_view rel, const Dir* in) const {
    if (rel.empty())
        return root_fd_ >= 0;
    // As lstat: a link that exists counts even if its target is gone (ask resolve() for that).
    std::string name;
    struct stat st;
    if (entry_of(in, rel, &name))
        return ::fstatat(in->fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    // O_PATH | O_NOFOLLOW opens a link itself: one lookup, nothing read.
    Fd fd(open_fd(rel, O_PATH | O_NOFOLLOW));
    return fd.get() >= 0;
}

std::optional<std::string> KernelHostFs::resolve(std::string_view rel) const {
    if (!valid_rel(rel))
        return std::nullopt;
    if (!live() && g_no_openat2)
        return resolve_walk(rel);
    // The kernel resolves (inside the root) and names what it opened; the root is cut off.
    Fd fd(open_fd(rel, O_PATH));
    if (fd.get() < 0)
        return std::nullopt;
    return where(fd.get(), rel);
}

bool KernelHostFs::leads_somewhere(std::string_view rel) const {
    if (!valid_rel(rel))
        return false;
    Fd fd(open_fd(rel, O_PATH));
    return fd.get() >= 0;
}

std::optional<std::string> KernelHostFs::where(int fd, std::string_view rel) const {
    if (!live() && g_no_openat2)  // no openat2 (open_fd may just have learnt it)
        return resolve_walk(rel);
    char link[64], buf[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = ::readlink(link, buf, sizeof buf);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof buf)
        return resolve_walk(rel);  // no /proc to ask
    std::string_view abs(buf, static_cast<size_t>(n));
    if (canonical_root_ == "/")
        return std::string(abs.substr(1));
    if (abs == canonical_root_)
        return std::string();
    if (abs.size() > canonical_root_.size() && abs.substr(0, canonical_root_.size()) ==
                                                   canonical_root_ &&
        abs[canonical_root_.size()] == '/')
        return std::string(abs.substr(canonical_root_.size() + 1));
    return std::nullopt;  // the tree was moved under us: nothing outside it is ever named
}

namespace {

// "a", "b", "c" -> "a/b/c": a path relative to the root, as resolve_walk has reached it.
std::string join_components(const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += '/';
        out += p;
    }
    return out;
}

}  // namespace

std::optional<std::string> KernelHostFs::resolve_walk(std::string_view rel, bool beneath) const {
    auto fail = [](int err) -> std::optional<std::string> {
        errno = err;
        return std::nullopt;
    };
    if (!valid_rel(rel))
        return fail(ENOENT);
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
            // As the kernel's RESOLVE_IN_ROOT (and "/.." on any host): ".." of the root is the
            // root. Either way nothing above the root is ever reached. RESOLVE_BENEATH refuses.
            if (done.empty() && beneath)
                return fail(EXDEV);
            if (!done.empty())
                done.pop_back();
            continue;
        }
        done.push_back(std::move(part));
        const std::string so_far = join_components(done);
        struct stat st;
        if (::fstatat(root_fd_, so_far.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            return std::nullopt;  // errno from fstatat
        if (!S_ISLNK(st.st_mode))
            continue;
        if (++links > kMaxLinks)
            return fail(ELOOP);
        char buf[4096];
        ssize_t n = ::readlinkat(root_fd_, so_far.c_str(), buf, sizeof buf);
        if (n <= 0 || static_cast<size_t>(n) >= sizeof buf)
            return fail(ENOENT);
        std::string_view target(buf, static_cast<size_t>(n));
        done.pop_back();
        // An absolute target means "from the root": a captured tree keeps its meaning when it
        // is moved, and the live host (root "/") gets the usual behaviour.
        if (target.front() == '/' && beneath)
            return fail(EXDEV);
        if (target.front() == '/')
            done.clear();
        auto tparts = path_components(target);
        for (auto it = tparts.rbegin(); it != tparts.rend(); ++it)
            todo.emplace_front(*it);
    }
    return join_components(done);
}

std::optional<std::pair<unsigned, unsigned>> KernelHostFs::char_device(std::string_view rel) const {
    if (!live() || !valid_rel(rel))
        return std::nullopt;
    // stat, never open: opening a device node can have effects (a tty, a tape rewinding).
    struct stat st;
    if (::fstatat(root_fd_, at_path(std::string(rel)), &st, 0) != 0 || !S_ISCHR(st.st_mode))
        return std::nullopt;
    return std::make_pair(major(st.st_rdev), minor(st.st_rdev));
}

std::optional<unsigned long> KernelHostFs::inode(std::string_view rel) const {
    Fd f(open_fd(rel, O_PATH));
    struct stat st;
    if (f.get() < 0 || ::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode))
        return std::nullopt;
    return static_cast<unsigned long>(st.st_ino);
}

int KernelHostFs::probe_exclusive(std::string_view rel) const {
    if (!live() || !valid_rel(rel))
        return EOPNOTSUPP;
    // Looked at before it is opened: opening a node of another kind can act (a tty hangs up, a
    // watchdog arms). The fstat after the open catches a node swapped in between.
    struct stat before;
    if (::stat(path(rel).c_str(), &before) != 0)
        return errno;
    if (!S_ISBLK(before.st_mode))
        return ENOTBLK;
    int fd = ::open(path(rel).c_str(), O_RDONLY | O_EXCL | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return errno;
    struct stat st;
    int err = ::fstat(fd, &st) == 0 && S_ISBLK(st.st_mode) ? 0 : ENOTBLK;
    ::close(fd);
    return err;
}

std::vector<HostFs::Link> KernelHostFs::links(std::string_view rel,
                                              std::string_view stat_prefix) const {
    std::vector<Link> out;
    const int dfd = open_fd(rel, O_RDONLY | O_DIRECTORY);
    each_entry(dfd, [&](const char* name, unsigned char type) {
        if (type != DT_LNK && type != DT_UNKNOWN)
            return;
        char buf[4096];
        ssize_t n = ::readlinkat(dfd, name, buf, sizeof buf);
        if (n <= 0 || static_cast<size_t>(n) >= sizeof buf)
            return;
        Link l{name, std::string(buf, static_cast<size_t>(n)), std::nullopt};
        struct stat st;
        if (live() && !stat_prefix.empty() && l.target.rfind(stat_prefix, 0) == 0 &&
            ::fstatat(dfd, name, &st, 0) == 0 && S_ISCHR(st.st_mode))
            l.char_device = std::make_pair(major(st.st_rdev), minor(st.st_rdev));
        out.push_back(std::move(l));
    });
    std::sort(out.begin(), out.end(), [](const Link& a, const Link& b) { return a.name < b.name; });
    return out;
}

Fd KernelHostFs::open_own_dir(std::string_view rel, bool create, int* err) const {
    if (rel.empty() || !valid_rel(rel)) {
        *err = EINVAL;
        return Fd();
    }
    // One component at a time: a missing one is made in the directory opened just before it,
    // which was itself resolved beneath the root, so mkdir never follows a link either.
    std::string so_far;
    Fd dir;
    for (auto part : path_components(rel)) {
        const std::string name(part);
        so_far += (so_far.empty() ? "" : "/") + name;
        Fd next(open_fd(so_far, O_RDONLY | O_DIRECTORY, true));
        if (next.get() < 0 && errno == ENOENT && create) {
            int parent = dir.get() >= 0 ? dir.get() : root_fd_;
            if (::mkdirat(parent, name.c_str(), 0755) != 0 && errno != EEXIST) {
                *err = errno;
                return Fd();
            }
            next.reset(open_fd(so_far, O_RDONLY | O_DIRECTORY, true));
        }
        if (next.get() < 0) {
            *err = errno;
            return Fd();
        }
        dir = std::move(next);
    }
    return dir;
}

int KernelHostFs::write(std::string_view rel, std::string_view value) {
    if (!valid_rel(rel) || rel.empty())
        return EINVAL;
    // No O_CREAT: a sysfs attribute either exists or the write is a mistake, and creating a
    // regular file in its place would hide that. O_TRUNC is ignored by sysfs (as for a shell's
    // `>`), and in a captured tree it keeps a shorter value from leaving old bytes behind.
    int fd = open_fd(rel, O_WRONLY | O_TRUNC | O_NOCTTY);
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
