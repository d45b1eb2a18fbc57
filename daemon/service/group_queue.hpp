// Operations one at a time per group, other groups' meanwhile, their writes on worker threads,
// and the reload barrier. Generic: a group is a number and an operation an opaque closure; it
// must not know PCI functions, plans, fences or statuses (the operations' closures do that).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "service/op_result.hpp"

namespace vfiod {

class Workers;

class GroupQueue {
public:
    using Reply = std::function<void(const OpResult&)>;
    // An operation once it reaches its group's front, started on the loop: answered at once
    // (`done`), or `job` runs on a worker and then `complete`, back on the loop, gives the answer.
    struct Started {
        std::optional<OpResult> done;
        std::function<void()> job;
        std::function<OpResult()> complete;
    };
    struct Op {
        std::function<Started()> start;
        Reply reply;  // may be empty: nobody waits for the answer
    };
    struct Hooks {
        std::function<void(Reply, OpResult)> answer;  // sends (or holds) an answer
        std::function<OpResult()> reload;             // the one reload serving waiting Reloads
        std::function<void(unsigned)> group_idle;     // a group's queue has just emptied
    };
    // Operator requests a group's queue or a waiting reload holds at most; more are answered Busy,
    // so callers queuing behind a hung write cannot grow vfiod without bound.
    static constexpr std::size_t kMaxWaiting = 32;

    explicit GroupQueue(Hooks hooks) : hooks_(std::move(hooks)) {}

    // Without workers every operation runs on the caller's thread.
    void set_workers(Workers* workers) { workers_ = workers; }
    // At most `n` operations of all groups run at once (0: no bound); a group whose turn comes
    // meanwhile waits for a slot, in the order the groups came. For the health checks, which a
    // start or a Reload queues for every group at once: each runs on a thread of its own.
    void set_max_running(std::size_t n) { max_running_ = n; }
    std::size_t running() const { return running_; }
    bool threaded() const { return workers_ != nullptr; }
    // True while an operation on the group runs or waits.
    bool busy(unsigned group) const { return queues_.count(group) != 0; }
    bool idle() const { return queues_.empty(); }

    // An operator's request: answered Busy when kMaxWaiting already wait in that group.
    void submit(unsigned group, Op op);
    // The daemon's own operations (decisions, reconciling): never refused.
    void enqueue(unsigned group, Op op);
    // True while a Reload waits: requests arriving now must wait for it (hold()).
    bool reload_waiting() const { return !reloads_.empty(); }
    // Runs `later` with `reply` once the waiting reload has run, or answers Busy past the limit.
    void hold(Reply reply, std::function<void(Reply)> later);
    // A Reload: at once when nothing runs, otherwise once the operations in flight have ended.
    void reload(Reply reply);
    // Runs `cb` once no operation runs or waits (at once if none does).
    void when_idle(std::function<void()> cb);

private:
    struct Held {
        Reply reply;
        std::function<void(Reply)> later;
    };
    void start_next(unsigned group);
    void finish(unsigned group, const Started& s);
    void group_idle(unsigned group);
    void serve_reloads();

    Hooks hooks_;
    Workers* workers_ = nullptr;
    std::size_t max_running_ = 0;
    std::size_t running_ = 0;            // started and not yet finished
    std::deque<unsigned> slot_waiters_;  // groups whose front operation waits for a slot
    std::map<unsigned, std::deque<Op>> queues_;  // per group; the front one is running
    std::vector<Reply> reloads_;  // waiting for the operations in flight; served by one reload
    std::deque<Held> held_;       // arrived while a reload waits
    bool serving_reloads_ = false;  // serve_reloads() is running
    std::vector<std::function<void()>> idle_waiters_;
};

}  // namespace vfiod
