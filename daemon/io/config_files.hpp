// The config loader's file access: one config file read whole (capped at 1 MiB) and the
// conf.d/*.toml names of a directory, with the reasons it reports when it cannot. The files come
// from one of two places (DESIGN §2): under the root (etc/vfiod), through the host access layer,
// so a link in a captured tree stays inside it and a FIFO cannot hold the loader; or a
// `--config FILE` and the conf.d beside it, plain paths read as given (std::filesystem).
#pragma once

#include <string>
#include <vector>

namespace vfiod {

class HostFs;

enum class ReadStatus { Ok, Missing, Failed };

// A plain path's exact bytes, as the host follows it (a --config FILE, or the KubeVirt CR of
// vfioctl doctor --kubevirt-cr): regular files only, at most `limit` bytes (a whole number of
// MiB); when Failed, *why says why ("cannot read: ...", "larger than 4 MiB; refusing to read it").
ReadStatus read_plain_file(const std::string& path, size_t limit, std::string* text,
                           std::string* why);

// Where one load's files come from. Holds the HostFs by pointer (it must outlive this) and
// nothing else: no file is cached, every call reads again.
class ConfigSource {
public:
    // Paths relative to host's root ("etc/vfiod/vfiod.toml").
    explicit ConfigSource(const HostFs& host) : host_(&host) {}
    // Plain paths, as given.
    ConfigSource() = default;

    // How path p is named in messages and Origins: the path under the root, or p as given.
    std::string shown(const std::string& p) const;
    // The file's exact bytes into *text; when Failed, *why says why ("cannot read: ...",
    // "larger than 1 MiB; refusing to read it").
    ReadStatus read(const std::string& p, std::string* text, std::string* why) const;
    // conf.d/*.toml in byte order of the names, as paths the other methods take; a missing
    // directory is simply empty. Errors name the directory as shown().
    std::vector<std::string> list_confd(const std::string& dir,
                                        std::vector<std::string>& errors) const;

private:
    const HostFs* host_ = nullptr;  // null: plain paths
};

}  // namespace vfiod
