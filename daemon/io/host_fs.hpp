// The host access layer: every read of sysfs, procfs, /dev and /run, every kernel attribute
// write, and the directory of vfiod's own journal (run/vfiod, open_own_dir(): exec/journal
// writes, renames and removes its files relative to it), resolved under one root directory
// (DESIGN §2). HostFs is the interface every reader takes; KernelHostFs asks the kernel.
//
// The config files under the root (etc/vfiod/vfiod.toml and conf.d, io/config_files) are read
// through it too (read_whole(), list()), so a link in a captured tree's etc/vfiod stays in the
// tree like any other. `--config FILE` is not under the root: a plain path, read without it
// (DESIGN §2).
//
// One thing touches the host without it, on purpose: io/host_tables asks getifaddrs(3) for
// addresses on the live host only (netlink, not a file: nothing here could fake it, and a tree
// has no live addresses to report), and on the live host keeps /proc/1/mountinfo, /proc/swaps
// and an rtnetlink socket open to learn of changes.
#pragma once

#include "infra/fd.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vfiod {

// Paths are resolved by the kernel: openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS from a
// dir fd of the root (Linux >= 5.6), so no link, absolute or with "..", leads out of a captured
// tree; plain openat(2) from a cached "/" fd on the live host. A kernel without openat2 (ENOSYS)
// gets the same answers from a resolver that walks the tree one component at a time.
namespace sysfs_testing {
using Openat2Fn = long (*)(int dirfd, const char* path, void* how, size_t size);
// Replaces the openat2 system call (nullptr: the real one again), and forgets an earlier ENOSYS.
void set_openat2(Openat2Fn fn);
}  // namespace sysfs_testing

// What vfiod may ask of the host, as an interface: the kernel's answers come from KernelHostFs
// below; the event loop's fenced view (io/fenced_host_fs) wraps another HostFs. Every
// method that touches the host is pure virtual, so a wrapper that misses one does not compile;
// the few non-virtual helpers (live, path, link_name) only call the virtual ones.
class HostFs {
public:
    HostFs() = default;
    virtual ~HostFs() = default;
    HostFs(const HostFs&) = delete;
    HostFs& operator=(const HostFs&) = delete;

    // "/" for the live host, or a captured/synthetic tree. Paths given to the methods are
    // relative to it ("sys/bus/pci/devices/0000:01:00.0/vendor") and never start with '/'.
    virtual const std::string& root() const = 0;
    bool live() const { return root() == "/"; }
    // The absolute path of rel under the root.
    std::string path(std::string_view rel) const;
    // A host path ("/var/lib/kubelet") as the methods take it, relative to the root.
    static std::string_view rel_of(std::string_view host_path);

    // A directory held open while several of its entries are read (one PCI function's
    // attributes and links): each entry is then looked up in it, instead of the whole path being
    // walked again from the root for every one. The methods below still take the entry's full
    // path (what a wrapper filters or fakes by) and the Dir only as the way there: an entry
    // that is a symlink, or a path that is not an entry of the Dir, is resolved from the root as
    // without one. Opened by a KernelHostFs (a wrapper hands open_dir on to the host it wraps),
    // and valid for it or one over the same root, while it is alive.
    class Dir {
    public:
        bool ok() const { return fd_.get() >= 0; }
        // Where the path given to open_dir() led, relative to the root (as resolve() says).
        const std::string& rel() const { return rel_; }

    private:
        friend class KernelHostFs;
        std::string rel_;
        Fd fd_;
    };
    // Opens rel, links followed inside the root; !ok() when it leads nowhere. One open and one
    // resolve() together: what a reader of a function's attributes needs first anyway.
    virtual Dir open_dir(std::string_view rel) const = 0;

    // Contents of a small file with one trailing newline removed; nullopt when it is missing or
    // unreadable. Reads at most max_bytes. Only a regular file is read, and opened non-blocking:
    // sysfs and procfs attributes are regular files, and a FIFO or device put in their place
    // would block open() or read() forever (the loop, and SIGTERM with it). When something is
    // there but not a regular file, *why (if given) says what ("a FIFO, not a regular file").
    // in: a Dir that rel is an entry of (see Dir).
    virtual std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                            std::string* why = nullptr,
                                            const Dir* in = nullptr) const = 0;
    // The target of a symlink as stored; nullopt when rel is not a symlink.
    virtual std::optional<std::string> readlink(std::string_view rel,
                                                const Dir* in = nullptr) const = 0;
    // The last path component of a symlink's target ("driver" -> "e1000e"); nullopt when absent.
    // Computed from readlink(), so a wrapper's readlink() decides it.
    std::optional<std::string> link_name(std::string_view rel, const Dir* in = nullptr) const;
    // A whole file exactly as stored, for a reader that needs every byte (a config file, whose
    // errors name line and column) and must tell its user why it could not have them. Unlike
    // read(): no newline is dropped, a file over max_bytes is refused (TooBig) rather than cut
    // short, and a failure says what it was. Opened as read() opens: regular files only,
    // non-blocking, so a FIFO answers NotRegular at once instead of waiting for a writer.
    struct WholeFile {
        enum class Status {
            Ok,
            Missing,     // nothing there (ENOENT), or a component on the way is not a directory
            NotRegular,  // a directory, FIFO, socket or device
            TooBig,      // more than max_bytes
            Denied,      // EACCES, EPERM
            Failed,      // anything else: err says what
        };
        Status status = Status::Failed;
        std::string bytes;  // Ok: the contents
        int err = 0;        // Denied, Failed: the errno
    };
    virtual WholeFile read_whole(std::string_view rel, size_t max_bytes) const = 0;
    // Entry names of a directory, sorted; empty when it is missing. *err (if given): 0, or the
    // errno of the open or read that failed (ENOENT missing, ENOTDIR something else is there);
    // what was listed before a failed read is still returned.
    virtual std::vector<std::string> list(std::string_view rel, int* err = nullptr) const = 0;
    // Whether rel is there (a link counts, wherever it leads).
    virtual bool exists(std::string_view rel, const Dir* in = nullptr) const = 0;
    // rel with every symlink resolved, relative to the root ("sys/devices/pci0000:00/…");
    // nullopt when something on the way is missing. Links resolve as if the root were "/": an
    // absolute target starts at the root, and ".." of the root is the root.
    virtual std::optional<std::string> resolve(std::string_view rel) const = 0;
    // resolve() as a yes or no: whether rel leads to something inside the root. One open, and
    // no asking the kernel where it led.
    virtual bool leads_somewhere(std::string_view rel) const = 0;

    // The device number (major, minor) of the character device rel leads to, links followed;
    // live host only: a tree's links name the real host's nodes, never the tree's.
    virtual std::optional<std::pair<unsigned, unsigned>> char_device(
        std::string_view rel) const = 0;

    // The inode number of the regular file rel leads to (links followed); nullopt when it is
    // missing or something else (a FIFO, a directory). A network namespace's identity:
    // /run/netns/<name> is a bind mount of its nsfs inode, which stats as a regular file.
    virtual std::optional<unsigned long> inode(std::string_view rel) const = 0;

    // Opens the block device node rel O_RDONLY|O_EXCL|O_NONBLOCK and closes it at once: 0 when
    // nobody holds it exclusively, EBUSY when the kernel does, another errno when it cannot
    // tell; ENOTBLK, without opening it, when rel is not a block device. Read-only, so closing
    // it sends no change event; EOPNOTSUPP in a tree.
    virtual int probe_exclusive(std::string_view rel) const = 0;

    // The symlinks of directory rel, read through one open of it: a walk of every
    // /proc/<pid>/fd would otherwise spend its time looking up the same path again per fd. On the
    // live host, links whose target starts with stat_prefix also carry the character device
    // they lead to (as char_device()). Sorted by name; empty when rel is missing.
    struct Link {
        std::string name;
        std::string target;
        std::optional<std::pair<unsigned, unsigned>> char_device;
    };
    virtual std::vector<Link> links(std::string_view rel,
                                    std::string_view stat_prefix = {}) const = 0;

    // Writes value with a single write(2) and checks close(2), as the kernel's attribute files
    // need. Returns 0 or the errno of the failing call.
    virtual int write(std::string_view rel, std::string_view value) = 0;

    // A directory of vfiod's own (run/vfiod, the journal), opened O_RDONLY|O_DIRECTORY for its
    // owner to read, replace (temp file, fsync, rename), remove and fsync its files relative to
    // it with the *at() calls, so writes land where reads look. Missing components are made
    // (0755) when `create`, each inside the directory opened before it. Stricter than reads: a
    // symlink on the way that leads out of the root (an absolute target, ".." past the root) is
    // refused with EXDEV instead of being followed from the root, so a tree's run -> /run can
    // never reach the live host's journal, in either direction. The live host ("/") opens it
    // plainly, as it always has. On failure the Fd is not valid and *err holds the errno.
    virtual Fd open_own_dir(std::string_view rel, bool create, int* err) const = 0;
    // open_own_dir()'s errno in words, for a message that names the path: EXDEV says which root
    // a link on the way leads out of, where strerror would say "Invalid cross-device link".
    std::string own_dir_error(int err) const;
    // The regular file `name` in a directory from open_own_dir(), as read() reads (non-blocking,
    // at most max_bytes, one trailing newline dropped, *why for what is there instead), never
    // through a symlink: vfiod writes none there. Touches only dirfd, never the root.
    static std::optional<std::string> read_own(int dirfd, const std::string& name,
                                               size_t max_bytes, std::string* why);
    // Replaces the file `name` in such a directory with `text`, whole or not at all: written to
    // "<name>.tmp" (whatever had that name removed first, the new one created O_EXCL, so a FIFO
    // planted there cannot block the write), fsynced, renamed over `name` (a symlink there is
    // replaced, never followed), and the directory fsynced. The temp file never outlives a
    // failure. 0 or the errno of the call that failed.
    static int replace_own(int dirfd, const std::string& name, std::string_view text,
                           unsigned mode);
    // The entry names of such a directory, sorted, "." and ".." left out; empty when it cannot
    // be read. Touches only dirfd.
    static std::vector<std::string> list_own(int dirfd);
};

// The kernel's answers: paths resolved under one root directory with the system calls described
// above. Tests subclass it (a fake kernel that gives writes kernel semantics, fault injection).
class KernelHostFs : public HostFs {
public:
    // root: "/" for the live host, or a captured/synthetic tree.
    explicit KernelHostFs(std::string root);
    ~KernelHostFs() override;

    const std::string& root() const override { return root_; }
    Dir open_dir(std::string_view rel) const override;
    std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                    std::string* why = nullptr,
                                    const Dir* in = nullptr) const override;
    std::optional<std::string> readlink(std::string_view rel,
                                        const Dir* in = nullptr) const override;
    WholeFile read_whole(std::string_view rel, size_t max_bytes) const override;
    std::vector<std::string> list(std::string_view rel, int* err = nullptr) const override;
    bool exists(std::string_view rel, const Dir* in = nullptr) const override;
    std::optional<std::string> resolve(std::string_view rel) const override;
    bool leads_somewhere(std::string_view rel) const override;
    std::optional<std::pair<unsigned, unsigned>> char_device(std::string_view rel) const override;
    std::optional<unsigned long> inode(std::string_view rel) const override;
    int probe_exclusive(std::string_view rel) const override;
    std::vector<Link> links(std::string_view rel,
                            std::string_view stat_prefix = {}) const override;
    int write(std::string_view rel, std::string_view value) override;
    Fd open_own_dir(std::string_view rel, bool create, int* err) const override;

private:
    // An fd for rel opened with flags (O_CLOEXEC added), resolved inside the root; -1 and errno.
    // beneath: links that lead out of the root fail with EXDEV rather than resolve from it.
    int open_fd(std::string_view rel, int flags, bool beneath = false) const;
    // rel's last component when rel is an entry of `in` (nullptr otherwise): looked up in it,
    // never followed, it cannot lead out of the root.
    static bool entry_of(const Dir* in, std::string_view rel, std::string* name);
    // Where the open fd for rel leads, relative to the root (resolve()'s answer).
    std::optional<std::string> where(int fd, std::string_view rel) const;
    // resolve() without openat2: one lstat/readlink per component, ".." of the root is the root
    // (beneath: an absolute link or ".." past the root fails, errno EXDEV). Failures set errno.
    std::optional<std::string> resolve_walk(std::string_view rel, bool beneath = false) const;

    std::string root_;
    std::string canonical_root_;  // realpath of root_, to cut off what /proc/self/fd/N names
    int root_fd_ = -1;            // O_PATH dir fd of the root, opened once
};

}  // namespace vfiod
