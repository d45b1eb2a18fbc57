// Stands in for the udev monitor in tests: PCI events the test queues, signalled through a pipe
// the event loop polls like the monitor's socket.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <mutex>
#include <utility>
#include <vector>

#include "app/udev_monitor.hpp"

namespace vfiod::test {

class ScriptedEvents final : public PciEventSource {
public:
    ScriptedEvents() {
        if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0)
            fds_[0] = fds_[1] = -1;
    }
    ~ScriptedEvents() override {
        close(fds_[0]);
        close(fds_[1]);
    }
    ScriptedEvents(const ScriptedEvents&) = delete;
    ScriptedEvents& operator=(const ScriptedEvents&) = delete;

    int fd() const override { return fds_[0]; }
    std::vector<PciEvent> receive() override {
        char buf[64];
        while (read(fds_[0], buf, sizeof buf) > 0) {
        }
        std::lock_guard lock(m_);
        return std::exchange(queued_, {});
    }
    // Any thread.
    void send(const char* action, const char* bdf) {
        send_event({action, PciAddress::parse(bdf), "", ""});
    }
    // Any event, e.g. an mdev parent's MDEV_STATE change or an mdev's own. Any thread.
    void send_event(PciEvent e) {
        {
            std::lock_guard lock(m_);
            queued_.push_back(std::move(e));
        }
        (void)!write(fds_[1], "e", 1);
    }

private:
    int fds_[2];
    std::mutex m_;
    std::vector<PciEvent> queued_;
};

}  // namespace vfiod::test
