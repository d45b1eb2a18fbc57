// How polkit's slots are shared between uids (daemon/dbus/authorization, PolkitSlots): the
// bookkeeping behind "a uid holding none always gets a slot" (issue 23, finding 4).
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "dbus/authorization.hpp"

namespace vfiod {
namespace {

using Kind = PolkitSlots::Decision::Kind;
constexpr std::size_t kTotal = PolkitSlots::kTotal, kShare = PolkitSlots::kShare;

// Does what the Authorizer does with a decision; returns it.
PolkitSlots::Decision admit(PolkitSlots& s, uid_t uid) {
    auto d = s.ask(uid);
    if (d.kind == Kind::Preempt)
        s.give_back(d.victim);
    if (d.kind != Kind::Refuse)
        s.take(uid);
    return d;
}

TEST(PolkitSlots, FewerThanTheBusAllowsAndASharePerUid) {
    static_assert(kTotal < 128, "dbus-daemon's max_replies_per_connection on the system bus");
    static_assert(kShare * 2 <= kTotal, "one uid never holds what a second one needs");
    PolkitSlots s;
    for (std::size_t i = 0; i < kShare; ++i)
        EXPECT_EQ(admit(s, 65534).kind, Kind::Take);
    EXPECT_EQ(admit(s, 65534).kind, Kind::Refuse) << "a uid holding its share waits for none";
    EXPECT_EQ(s.held(65534), kShare);
    EXPECT_EQ(admit(s, 1000).kind, Kind::Take) << "however many callers the first uid has";
    s.give_back(65534);
    EXPECT_EQ(admit(s, 65534).kind, Kind::Take) << "a slot given back can be taken again";
    s.give_back(4242);  // holds none: nothing changes
    EXPECT_EQ(s.total(), kShare + 1);
}

TEST(PolkitSlots, WhenAllAreTakenTheUidHoldingMostGivesWay) {
    PolkitSlots s;
    for (uid_t uid = 1; uid <= kTotal / kShare; ++uid)
        for (std::size_t i = 0; i < kShare; ++i)
            ASSERT_EQ(admit(s, uid).kind, Kind::Take);
    ASSERT_EQ(s.total(), kTotal);
    auto d = admit(s, 1000);
    EXPECT_EQ(d.kind, Kind::Preempt) << "a uid holding none gets a slot";
    EXPECT_EQ(d.victim, 1u) << "from the lowest uid of those holding the most";
    EXPECT_EQ(s.held(1), kShare - 1);
    EXPECT_EQ(admit(s, 1000).victim, 2u) << "then from the next that holds the most";
    EXPECT_EQ(s.total(), kTotal) << "never more than the bus allows";
}

TEST(PolkitSlots, AUidHoldingOneLessThanTheMostDoesNotTakeFromIt) {
    PolkitSlots s;
    const uid_t full = kTotal / kShare - 1;  // uids 1..full hold their share
    for (uid_t uid = 1; uid <= full; ++uid)
        for (std::size_t i = 0; i < kShare; ++i)
            admit(s, uid);
    for (std::size_t i = 0; i < kShare - 1; ++i)
        admit(s, 100);
    admit(s, 200);
    ASSERT_EQ(s.total(), kTotal);
    // Taking one from a uid holding kShare would leave 100 holding the most, and 1 would take
    // it back: two uids would answer each other's calls LimitsExceeded in turn.
    EXPECT_EQ(admit(s, 100).kind, Kind::Refuse);
    EXPECT_EQ(admit(s, 200).kind, Kind::Preempt) << "200 holds one: far below the most";
}

// Random asks and answers from 30 uids: the bounds hold at every step, and a uid holding none
// is refused only when kTotal uids hold one each.
TEST(PolkitSlots, RandomLoadKeepsTheBoundsAndNewcomersAlwaysGetIn) {
    std::mt19937 rng(23);
    PolkitSlots s;
    std::map<uid_t, std::size_t> held;
    for (int step = 0; step < 200000; ++step) {
        uid_t uid = rng() % 30;
        if (rng() % 3 == 0 && held[uid] > 0) {
            s.give_back(uid);
            --held[uid];
        } else {
            auto d = admit(s, uid);
            if (d.kind == Kind::Preempt)
                --held[d.victim];
            if (d.kind != Kind::Refuse)
                ++held[uid];
            if (d.kind == Kind::Refuse && held[uid] == 0)
                FAIL() << "a uid holding none was refused at step " << step;
        }
        std::size_t total = 0;
        for (auto [u, n] : held) {
            ASSERT_LE(n, kShare);
            ASSERT_EQ(s.held(u), n);
            total += n;
        }
        ASSERT_EQ(s.total(), total);
        ASSERT_LE(total, kTotal);
    }
}

}  // namespace
}  // namespace vfiod
