#include "watches.hpp"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/pci_paths.hpp"

namespace vfiod::plugin {

bool Watches::open(const std::string& kubelet_dir, std::string* err) {
    inotify_.reset(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (inotify_.get() < 0) {
        *err = std::string("cannot create an inotify instance: ") + std::strerror(errno);
        return false;
    }
    wd_kubelet_ = inotify_add_watch(inotify_.get(), kubelet_dir.c_str(),
                                    IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM);
    if (wd_kubelet_ < 0) {
        *err = "cannot watch " + kubelet_dir + ": " + std::strerror(errno);
        return false;
    }
    return true;
}

void Watches::watch_vfio_dir(const KernelHostFs& host) {
    if (wd_vfio_ >= 0)
        return;
    wd_vfio_ = inotify_add_watch(inotify_.get(), host.path(pci_paths::kVfioDir).c_str(),
                                 IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                     IN_DELETE_SELF);
    if (wd_vfio_ < 0 && wd_dev_ < 0)
        wd_dev_ = inotify_add_watch(inotify_.get(), host.path("dev").c_str(),
                                    IN_CREATE | IN_MOVED_TO);
}

Watches::Seen Watches::read() {
    alignas(inotify_event) char buf[4096];
    Seen seen;
    for (;;) {
        ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
        if (n <= 0)
            break;
        for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<inotify_event*>(p);
            std::string name = ev->len ? ev->name : "";
            if (ev->wd == wd_kubelet_) {
                seen.kubelet_dir = true;
                if (name == "kubelet.sock" && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
                    seen.kubelet_restarted = true;
            } else if (ev->wd == wd_vfio_) {
                seen.vfio = true;
                if (ev->mask & (IN_DELETE_SELF | IN_IGNORED))
                    wd_vfio_ = -1;
            } else if (ev->wd == wd_dev_ && name == "vfio") {
                seen.vfio = true;
            }
            p += sizeof(inotify_event) + ev->len;
        }
    }
    return seen;
}

}  // namespace vfiod::plugin
