#include "infra/workers.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

namespace vfiod {

struct Workers::Shared {
    int fd = -1;
    std::mutex m;
    std::condition_variable idle;
    std::deque<std::function<void()>> finished;
    std::size_t running = 0;
};

Workers::Workers() : shared_(std::make_shared<Shared>()) {
    shared_->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (shared_->fd < 0)
        throw std::system_error(errno, std::generic_category(), "eventfd");
}

Workers::~Workers() {
    {
        std::unique_lock lock(shared_->m);
        shared_->idle.wait(lock, [&] { return shared_->running == 0; });
    }
    close(shared_->fd);
}

int Workers::fd() const { return shared_->fd; }

std::size_t Workers::running() const {
    std::lock_guard lock(shared_->m);
    return shared_->running;
}

bool Workers::run(std::function<void()> job, std::function<void()> done) {
    {
        std::lock_guard lock(shared_->m);
        ++shared_->running;
    }
    try {
        std::thread([shared = shared_, job = std::move(job), done = std::move(done)] {
            try {
                job();
            } catch (const std::exception& e) {
                // Executor and service return results; this is bad_alloc or worse. The
                // completion still runs so the caller gets an answer and the group is freed.
                spdlog::error("operation thread: {}", e.what());
            }
            std::lock_guard lock(shared->m);
            shared->finished.push_back(done);
            --shared->running;
            uint64_t one = 1;
            (void)!::write(shared->fd, &one, sizeof one);
            shared->idle.notify_all();
        }).detach();
    } catch (const std::system_error& e) {
        std::lock_guard lock(shared_->m);
        --shared_->running;
        spdlog::error("cannot start an operation thread: {}", e.what());
        return false;
    }
    return true;
}

void Workers::dispatch() {
    uint64_t n;
    (void)!::read(shared_->fd, &n, sizeof n);
    std::deque<std::function<void()>> ready;
    {
        std::lock_guard lock(shared_->m);
        ready.swap(shared_->finished);
    }
    for (auto& done : ready)
        done();
}

}  // namespace vfiod
