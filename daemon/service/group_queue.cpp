#include "service/group_queue.hpp"

#include <memory>
#include <string>

#include "infra/workers.hpp"

namespace vfiod {

void GroupQueue::submit(unsigned g, Op op) {
    if (auto q = queues_.find(g); q != queues_.end() && q->second.size() >= kMaxWaiting)
        return hooks_.answer(std::move(op.reply),
                             OpResult::error(OpResult::Code::Busy,
                                             "group " + std::to_string(g) + " already has " +
                                                 std::to_string(q->second.size()) +
                                                 " operations waiting; try again when they end"));
    enqueue(g, std::move(op));
}

void GroupQueue::enqueue(unsigned g, Op op) {
    auto& q = queues_[g];
    q.push_back(std::move(op));
    if (q.size() == 1)
        start_next(g);
}

void GroupQueue::hold(Reply reply, std::function<void(Reply)> later) {
    if (held_.size() >= kMaxWaiting)
        return hooks_.answer(std::move(reply),
                             OpResult::error(OpResult::Code::Busy,
                                             std::to_string(held_.size()) +
                                                 " requests already wait for a reload; try again later"));
    held_.push_back({std::move(reply), std::move(later)});
}

void GroupQueue::reload(Reply reply) {
    if (!workers_ || queues_.empty())
        return hooks_.answer(std::move(reply), hooks_.reload());
    // Waits for the operations in flight; requests that come meanwhile wait for it.
    if (reloads_.size() >= kMaxWaiting)
        return hooks_.answer(std::move(reply),
                             OpResult::error(OpResult::Code::Busy,
                                             std::to_string(reloads_.size()) +
                                                 " reloads already wait for the operations in flight"));
    reloads_.push_back(std::move(reply));
}

void GroupQueue::when_idle(std::function<void()> cb) {
    if (queues_.empty())
        cb();
    else
        idle_waiters_.push_back(std::move(cb));
}

void GroupQueue::start_next(unsigned g) {
    for (;;) {
        auto it = queues_.find(g);
        if (it == queues_.end() || it->second.empty()) {
            queues_.erase(g);
            group_idle(g);
            return;
        }
        if (max_running_ && running_ >= max_running_) {
            slot_waiters_.push_back(g);  // started by the finish() that frees a slot
            return;
        }
        Started s = it->second.front().start();
        if (s.done) {
            Reply reply = std::move(it->second.front().reply);
            it->second.pop_front();
            hooks_.answer(std::move(reply), *s.done);
            continue;
        }
        auto started = std::make_shared<Started>(std::move(s));
        ++running_;
        bool on_worker = workers_ && workers_->run([started] { started->job(); },
                                                   [this, g, started] { finish(g, *started); });
        if (!on_worker) {
            started->job();
            finish(g, *started);
        }
        return;
    }
}

void GroupQueue::finish(unsigned g, const Started& s) {
    --running_;
    OpResult res = s.complete();
    auto it = queues_.find(g);
    if (it != queues_.end() && !it->second.empty()) {
        Reply reply = std::move(it->second.front().reply);
        it->second.pop_front();
        hooks_.answer(std::move(reply), res);
    }
    // The slot freed goes to the group that waited longest; this group's next operation
    // queues behind them.
    auto q = queues_.find(g);
    if (!slot_waiters_.empty() && q != queues_.end() && !q->second.empty())
        slot_waiters_.push_back(g);
    else
        start_next(g);
    while (!slot_waiters_.empty() && (!max_running_ || running_ < max_running_)) {
        unsigned next = slot_waiters_.front();
        slot_waiters_.pop_front();
        start_next(next);
    }
}

void GroupQueue::group_idle(unsigned g) {
    if (hooks_.group_idle)
        hooks_.group_idle(g);
    // A group that serve_reloads() settles without writes comes back here from within it:
    // serve_reloads() finishes first (the held requests are still to come), then looks again.
    if (!queues_.empty() || serving_reloads_)
        return;
    if (!reloads_.empty())
        serve_reloads();
    if (!queues_.empty())
        return;
    std::vector<std::function<void()>> waiters;
    waiters.swap(idle_waiters_);
    for (auto& cb : waiters)
        cb();
}

// One reload for every Reload waiting: a second one would re-read and re-decide the host while
// the first one's operations run. Then the requests held for it, in the order they came.
void GroupQueue::serve_reloads() {
    struct Serving {
        bool& flag;
        explicit Serving(bool& f) : flag(f) { flag = true; }
        ~Serving() { flag = false; }
    } serving(serving_reloads_);
    std::vector<Reply> reloads;
    reloads.swap(reloads_);
    OpResult reloaded = hooks_.reload();
    for (auto& reply : reloads)
        hooks_.answer(std::move(reply), reloaded);
    std::deque<Held> held;
    held.swap(held_);
    for (auto& h : held)
        h.later(std::move(h.reply));
}

}  // namespace vfiod
