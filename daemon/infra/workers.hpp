// Runs operations off the event loop: each job on a thread of its own, its completion handed
// back to the loop (an eventfd it polls) and run there, in the order the jobs finished.
#pragma once

#include <functional>
#include <memory>

namespace vfiod {

class Workers {
public:
    Workers();
    // Waits for the jobs still running (each ends within its writes' timeouts; a write stuck in
    // the kernel is left behind by the executor, not by this).
    ~Workers();
    Workers(const Workers&) = delete;
    Workers& operator=(const Workers&) = delete;

    // The loop polls this for POLLIN.
    int fd() const;
    // `job` runs on a new thread; `done` runs later on the loop, from dispatch(). False (and
    // nothing runs) when no thread can be started.
    bool run(std::function<void()> job, std::function<void()> done);
    // Runs the completions of the jobs that have finished. Loop thread only.
    void dispatch();
    std::size_t running() const;

    struct Shared;

private:
    std::shared_ptr<Shared> shared_;
};

}  // namespace vfiod
