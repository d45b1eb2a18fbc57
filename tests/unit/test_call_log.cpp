// The rate limiter behind the log of denied and failed D-Bus calls (daemon/dbus/call_log).
#include <gtest/gtest.h>

#include "dbus/call_log.hpp"

namespace vfiod {
namespace {

using Clock = RateLimiter::Clock;
using std::chrono::seconds;

TEST(RateLimiter, BurstThenSuppressedThenOneSummaryPerKey) {
    RateLimiter rl(3, seconds(10), 8);
    Clock::time_point t0{};
    int admitted = 0;
    for (int i = 0; i < 100; ++i)
        admitted += rl.admit(65534, t0 + seconds(1));
    EXPECT_EQ(admitted, 3);
    EXPECT_TRUE(rl.admit(1000, t0 + seconds(2))) << "another uid has lines of its own";
    EXPECT_TRUE(rl.expire(t0 + seconds(10)).empty()) << "no window has ended yet";
    auto s = rl.expire(t0 + seconds(12));
    ASSERT_EQ(s.size(), 1u) << "uid 1000 suppressed nothing: no summary";
    EXPECT_EQ(s[0].key, 65534);
    EXPECT_EQ(s[0].count, 97u);
    EXPECT_EQ(rl.keys(), 0u) << "ended windows are forgotten";
    EXPECT_FALSE(rl.next_deadline());
    EXPECT_TRUE(rl.admit(65534, t0 + seconds(13))) << "a new window starts afresh";
}

TEST(RateLimiter, KeysAreBoundedWhateverCalls) {
    RateLimiter rl(1, seconds(10), 4);
    Clock::time_point t0{};
    for (int uid = 0; uid < 10000; ++uid)
        rl.admit(uid, t0);
    EXPECT_EQ(rl.keys(), 5u) << "four keys and the shared overflow bucket";
    auto s = rl.expire(t0 + seconds(10));
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].key, RateLimiter::kOverflowKey);
    EXPECT_EQ(s[0].count, 10000u - 5u);
}

TEST(RateLimiter, DeadlineIsTheEarliestWindowEnd) {
    RateLimiter rl(1, seconds(10), 4);
    Clock::time_point t0{};
    rl.admit(1, t0 + seconds(5));
    rl.admit(2, t0 + seconds(1));
    ASSERT_TRUE(rl.next_deadline());
    EXPECT_EQ(*rl.next_deadline(), t0 + seconds(11));
}

TEST(RateLimiter, AnIdleWindowPastItsEndIsReplacedNotCounted) {
    RateLimiter rl(1, seconds(10), 4);
    Clock::time_point t0{};
    EXPECT_TRUE(rl.admit(7, t0));
    EXPECT_TRUE(rl.admit(7, t0 + seconds(20))) << "without expire() the old window must not bite";
}

}  // namespace
}  // namespace vfiod
