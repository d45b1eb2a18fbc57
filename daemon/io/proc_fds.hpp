// One pass over proc/*/fd: the device nodes processes hold open. Both the vfio reader (Release's
// in-use-vfio) and the device-node detector (in-use-device) match against this one scan, so a
// plan walks /proc once (DESIGN §4).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/host_fs.hpp"

namespace vfiod {

struct OpenNode {
    std::string pid;
    std::string target;  // the fd link as the kernel shows it: "/dev/snd/controlC0"
    // On the live host, the character device the fd refers to (matched by number: a container
    // may name the node differently); nullopt in a tree, whose fds are matched by path.
    std::optional<std::pair<unsigned, unsigned>> devnum;
};

// Every fd under /dev held by any process. Reading the links changes nothing on the host; other
// users' processes need CAP_SYS_PTRACE (the unit grants it), and what cannot be read is skipped.
std::vector<OpenNode> scan_open_nodes(const HostFs& fs);

// "pid 812 (pulseaudio)", the comm made printable: a process names itself.
std::string process_name(const HostFs& fs, const std::string& pid);

}  // namespace vfiod
