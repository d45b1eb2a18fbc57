// The files Prepare writes (CDI specs, device-metadata files, checkpoints), written and removed
// beneath the root: every file is reached through a directory opened beneath it
// (HostFs::open_own_dir), so a link on the way that leads out of a --root tree is refused,
// never followed, and nothing is written, renamed or removed outside it. Paths are host paths
// ("/var/run/cdi/x.json"); the errors name them as this process reaches them, with the errno.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "infra/fd.hpp"
#include "io/host_fs.hpp"

namespace vfiod::dra {

class StateFiles {
public:
    explicit StateFiles(const HostFs& host) : host_(host) {}

    const HostFs& host() const { return host_; }
    // `host_path` as this process reaches it: for messages.
    std::string path(const std::string& host_path) const;
    // "No such file or directory (errno 2)".
    static std::string errno_text(int e);

    // The directory at host path `dir`, made (0755) when missing and `create`; else errno in *e.
    Fd open_dir(const std::string& dir, bool create, int* e) const;
    // One of the plugin's own directories (checkpoints, metadata, damaged ones): made and kept
    // 0700, whoever made it before.
    Fd open_private(const std::string& dir, int* e) const;

    // Replaces the file whole (HostFs::replace_own), its directory made when missing (0700 when
    // `private_dir`). "" or why, naming the file and the errno.
    std::string write(const std::string& host_path, const std::string& data, mode_t mode,
                      bool private_dir = false) const;
    // Removes a file and its temp sibling; "" when both are gone (a missing directory on the
    // way counts as gone). durable: the directory is fsynced after.
    std::string remove(const std::string& host_path, bool durable = false) const;
    // Removes the empty directory at host path `dir`; "" when it is gone.
    std::string remove_dir(const std::string& dir) const;

private:
    const HostFs& host_;
};

// A host path's directory and last component ("/a/b/c.json": "/a/b", "c.json").
std::string dir_of(const std::string& p);
std::string base_of(const std::string& p);

namespace prepare_testing {
// Called before each file StateFiles writes (its host path); a non-zero errno fails that write
// as the kernel would (ENOSPC: a full disk). Empty: none. Tests only.
void set_write_hook(std::function<int(const std::string& host_path)> hook);
}  // namespace prepare_testing

}  // namespace vfiod::dra
