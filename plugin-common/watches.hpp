// The inotify watches the plugin follows: the kubelet directory (kubelet.sock and our sockets
// come and go there) and /dev/vfio for the groups' nodes (health), or /dev until /dev/vfio
// exists. It owns the inotify descriptor and says what its events concern; what to do about
// them is the Plugin's.
#pragma once

#include <string>

#include "infra/fd.hpp"
#include "io/host_fs.hpp"

namespace vfiod::plugin {

class Watches {
public:
    // What one read() of the queued events saw.
    struct Seen {
        bool kubelet_dir = false;        // something changed in the kubelet directory
        bool kubelet_restarted = false;  // kubelet.sock was (re)created
        bool vfio = false;               // a /dev/vfio node came or went
    };

    // The inotify instance and the kubelet directory's watch; false with *err when either fails.
    bool open(const std::string& kubelet_dir, std::string* err);
    int fd() const { return inotify_.get(); }
    // Watches /dev/vfio under `host`, or /dev for its creation; nothing when already watched.
    void watch_vfio_dir(const KernelHostFs& host);
    // Reads every queued event; never blocks.
    Seen read();

private:
    Fd inotify_;
    int wd_kubelet_ = -1, wd_vfio_ = -1, wd_dev_ = -1;
};

}  // namespace vfiod::plugin
