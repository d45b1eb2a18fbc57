// GroupQueue's own rules, apart from PCI: operations on one group run one at a time and in
// order, other groups' meanwhile; past kMaxWaiting an operator's request is answered Busy; a
// Reload waits for the operations in flight, one reload answers every Reload waiting, and the
// requests held for it run after it, before anyone hears that the queue is idle.
#include <gtest/gtest.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infra/workers.hpp"
#include "service/group_queue.hpp"

namespace vfiod::test {
namespace {

using Started = GroupQueue::Started;

class GroupQueueTest : public ::testing::Test {
protected:
    GroupQueueTest() { queue.set_workers(&workers); }

    // What the loop saw, in order (the jobs' own lines are taken under the lock).
    void note(std::string s) {
        std::lock_guard lock(m);
        log.push_back(std::move(s));
    }
    std::vector<std::string> seen() {
        std::lock_guard lock(m);
        return log;
    }
    GroupQueue::Reply reply(std::string name) {
        return [this, name](const OpResult& r) {
            const char* how = r.code == OpResult::Code::Busy ? " busy" : r.ok() ? " ok" : " failed";
            note("answer " + name + how);
        };
    }
    // An operation whose writes run on a worker: `job` there, then an Ok answer.
    GroupQueue::Op writing(std::string name, std::function<void()> job = {}) {
        return {[this, name, job] {
                    note("start " + name);
                    return Started{std::nullopt,
                                   [this, name, job] {
                                       if (job)
                                           job();
                                       note("job " + name);
                                   },
                                   [this, name] {
                                       note("complete " + name);
                                       return OpResult{};
                                   }};
                },
                reply(name)};
    }
    // An operation settled on the loop, without writes.
    GroupQueue::Op settled(std::string name) {
        return {[this, name] {
                    note("start " + name);
                    return Started{OpResult{}, {}, {}};
                },
                reply(name)};
    }
    // The loop's side of the workers until the queue is idle, for at most 10 s.
    void run_until_idle() {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        auto ended = [&] { return queue.idle() && workers.running() == 0; };
        while (!ended() && std::chrono::steady_clock::now() < until) {
            pollfd p{workers.fd(), POLLIN, 0};
            if (::poll(&p, 1, 10) > 0)
                workers.dispatch();
        }
        ASSERT_TRUE(queue.idle()) << "the queue never went idle";
    }

    std::mutex m;
    std::vector<std::string> log;
    int reloads = 0;
    GroupQueue queue{GroupQueue::Hooks{
        .answer =
            [](GroupQueue::Reply r, OpResult res) {
                if (r)
                    r(res);
            },
        .reload =
            [this] {
                ++reloads;
                note("reload");
                return OpResult{};
            },
        .group_idle = [this](unsigned g) { note("idle " + std::to_string(g)); },
    }};
    Workers workers;  // last: it goes first, waiting for jobs that use the queue
};

TEST_F(GroupQueueTest, OneGroupsOperationsRunOneAtATimeInOrder) {
    queue.submit(1, writing("a"));
    queue.submit(1, writing("b"));
    queue.enqueue(1, writing("c"));
    EXPECT_TRUE(queue.busy(1));
    run_until_idle();
    EXPECT_EQ(seen(), (std::vector<std::string>{
                          "start a", "job a", "complete a", "answer a ok",
                          "start b", "job b", "complete b", "answer b ok",
                          "start c", "job c", "complete c", "answer c ok", "idle 1"}));
    EXPECT_FALSE(queue.busy(1));
}

TEST_F(GroupQueueTest, OtherGroupsRunMeanwhile) {
    // Group 1's writes wait for group 2's: they end only if group 2 runs while group 1 does.
    std::promise<void> two_ran;
    std::shared_future<void> ran = two_ran.get_future().share();
    bool released = false;
    queue.submit(1, writing("one", [&] {
        released = ran.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    }));
    queue.submit(2, writing("two", [&] { two_ran.set_value(); }));
    EXPECT_TRUE(queue.busy(1));
    EXPECT_TRUE(queue.busy(2));
    run_until_idle();
    EXPECT_TRUE(released) << "group 2 did not run while group 1's writes did";
}

// Bounded: with at most 2 running, 6 groups' operations (and a second one of group 1) all
// run, never more than 2 at once, the groups in the order they came, each group's in order.
TEST_F(GroupQueueTest, AtMostMaxRunningOperationsRunAtOnce) {
    queue.set_max_running(2);
    std::mutex mu;
    int inside = 0, peak = 0;
    auto work = [&] {
        {
            std::lock_guard l(mu);
            peak = std::max(peak, ++inside);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::lock_guard l(mu);
        --inside;
    };
    for (unsigned g = 1; g <= 6; ++g)
        queue.enqueue(g, writing("g" + std::to_string(g), work));
    queue.enqueue(1, writing("g1b", work));
    EXPECT_EQ(queue.running(), 2u);
    run_until_idle();
    EXPECT_EQ(peak, 2);
    EXPECT_EQ(queue.running(), 0u);
    std::vector<std::string> starts;
    for (const auto& s : seen())
        if (s.rfind("start ", 0) == 0)
            starts.push_back(s.substr(6));
    // g1b waits behind the groups that were waiting when g1's first operation ended.
    EXPECT_EQ(starts, (std::vector<std::string>{"g1", "g2", "g3", "g4", "g5", "g6", "g1b"}));
    for (unsigned g = 1; g <= 6; ++g)
        EXPECT_EQ(std::count(log.begin(), log.end(), "idle " + std::to_string(g)), 1) << g;
}

TEST_F(GroupQueueTest, AnOperatorsRequestPastTheLimitIsBusy) {
    std::promise<void> open;
    std::shared_future<void> gate = open.get_future().share();
    queue.submit(7, writing("first", [gate] { gate.wait(); }));
    for (std::size_t i = 1; i < GroupQueue::kMaxWaiting; ++i)
        queue.submit(7, settled("w" + std::to_string(i)));
    queue.submit(7, settled("over"));
    EXPECT_EQ(seen().back(), "answer over busy");
    // The daemon's own operations are never refused, and other groups are not limited by it.
    queue.enqueue(7, settled("own"));
    queue.submit(8, settled("other"));
    open.set_value();
    run_until_idle();
    auto l = seen();
    EXPECT_EQ(std::count(l.begin(), l.end(), std::string("answer over busy")), 1);
    EXPECT_EQ(std::count(l.begin(), l.end(), std::string("answer own ok")), 1);
    EXPECT_EQ(std::count(l.begin(), l.end(), std::string("answer other ok")), 1);
    std::string last = "answer w" + std::to_string(GroupQueue::kMaxWaiting - 1) + " ok";
    EXPECT_EQ(std::count(l.begin(), l.end(), last), 1);
}

TEST_F(GroupQueueTest, AReloadWaitsForTheOperationsInFlightAndServesEveryWaitingReload) {
    std::promise<void> open;
    std::shared_future<void> gate = open.get_future().share();
    queue.submit(1, writing("op", [gate] { gate.wait(); }));
    queue.reload(reply("reload1"));
    queue.reload(reply("reload2"));
    EXPECT_TRUE(queue.reload_waiting());
    queue.hold(reply("held"), [this](GroupQueue::Reply r) {
        queue.submit(2, {writing("held").start, std::move(r)});
    });
    bool idle = false;
    queue.when_idle([&] {
        idle = true;
        note("when_idle");
    });
    EXPECT_EQ(reloads, 0);
    EXPECT_FALSE(idle);
    open.set_value();
    run_until_idle();
    EXPECT_EQ(reloads, 1);
    EXPECT_EQ(seen(), (std::vector<std::string>{
                          "start op", "job op", "complete op", "answer op ok", "idle 1", "reload",
                          "answer reload1 ok", "answer reload2 ok", "start held", "job held",
                          "complete held", "answer held ok", "idle 2", "when_idle"}));
}

TEST_F(GroupQueueTest, ARequestHeldForAReloadThatSettlesAtOnceDoesNotEndTheWaitEarly) {
    std::promise<void> open;
    std::shared_future<void> gate = open.get_future().share();
    queue.submit(1, writing("op", [gate] { gate.wait(); }));
    queue.reload(reply("reload"));
    // The first held request empties its group from within the reload's service; the second
    // is still to come, so nobody may hear "idle" before it.
    queue.hold(reply("h1"), [this](GroupQueue::Reply r) {
        queue.submit(2, {settled("h1").start, std::move(r)});
    });
    queue.hold(reply("h2"), [this](GroupQueue::Reply r) {
        queue.submit(3, {writing("h2").start, std::move(r)});
    });
    queue.when_idle([&] { note("when_idle"); });
    open.set_value();
    run_until_idle();
    auto l = seen();
    auto at = [&](const std::string& s) { return std::find(l.begin(), l.end(), s) - l.begin(); };
    ASSERT_LT(at("when_idle"), static_cast<long>(l.size()));
    EXPECT_GT(at("when_idle"), at("answer h2 ok"));
    EXPECT_EQ(std::count(l.begin(), l.end(), std::string("when_idle")), 1);
}

TEST_F(GroupQueueTest, ReloadsPastTheLimitAreBusyAndAnIdleQueueReloadsAtOnce) {
    queue.reload(reply("now"));
    EXPECT_EQ(reloads, 1);
    EXPECT_EQ(seen().back(), "answer now ok");
    std::promise<void> open;
    std::shared_future<void> gate = open.get_future().share();
    queue.submit(1, writing("op", [gate] { gate.wait(); }));
    for (std::size_t i = 0; i < GroupQueue::kMaxWaiting; ++i)
        queue.reload(reply("r"));
    queue.reload(reply("over"));
    EXPECT_EQ(seen().back(), "answer over busy");
    for (std::size_t i = 0; i < GroupQueue::kMaxWaiting; ++i)
        queue.hold(reply("h"), [](GroupQueue::Reply) {});
    queue.hold(reply("held-over"), [](GroupQueue::Reply) {});
    EXPECT_EQ(seen().back(), "answer held-over busy");
    open.set_value();
    run_until_idle();
    EXPECT_EQ(reloads, 2);
}

}  // namespace
}  // namespace vfiod::test
