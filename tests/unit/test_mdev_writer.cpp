// The mdev writer (exec/mdev_writer) on the fake kernel: a pair's creates all or nothing and
// idempotent, the first failure ending them, and removes that are never attempted while a user
// holds the mdev and never hold the caller when the kernel blocks them.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "config_test_helpers.hpp"
#include "eventually.hpp"
#include "exec/mdev_writer.hpp"
#include "fake_kernel.hpp"
#include "mdev_test_host.hpp"
#include "io/mdev_reader.hpp"
#include "io/snapshot.hpp"

namespace vfiod {
namespace {

using namespace std::chrono_literals;
using test::FakeKernel;
using test::FakeTree;

std::string U(unsigned i, const char* type = "mbochs-small") {
    return mdev_uuid("mbochs", type, i);
}

std::string entry(const char* type, unsigned count) {
    return "[[mdev]]\nparent = \"mbochs\"\ntype = \"" + std::string(type) +
           "\"\ncount = " + std::to_string(count) + "\n";
}

struct Host : test::FakeMdevHost {
    Host() { kernel->register_mdev_parent(test::mbochs_parent()); }
    // The plan for `doc` on the host as it is now.
    std::vector<MdevPlan> plan(const std::string& doc) {
        Snapshot s = read_snapshot(*kernel);
        return *plan_mdevs(s.mdevs, s.topology, s.use, test::Parsed(doc));
    }
    MdevHost mdevs() { return read_mdev_host(*kernel, nullptr); }
};

// "uuid reason" per result, for comparing a whole outcome.
std::vector<std::string> summary(const std::vector<MdevResult>& rs) {
    std::vector<std::string> out;
    for (const auto& r : rs)
        out.push_back(r.uuid + " " + to_string(r.action) +
                      (r.reason == Reason::None ? "" : std::string(" ") + to_string(r.reason)));
    return out;
}

TEST(MdevWriter, CreatesThePairAndFinishingAgainIsHarmless) {
    Host h;
    MdevWriter w(*h.kernel, 5s);
    auto plan = h.plan(entry("mbochs-small", 2));
    EXPECT_EQ(summary(w.apply(plan)),
              (std::vector<std::string>{U(0) + " create", U(1) + " create"}));
    MdevHost m = h.mdevs();
    ASSERT_EQ(m.mdevs.size(), 2u);
    EXPECT_EQ(m.mdevs.at(U(0)).type, "mbochs-small");
    // The same plan again (a crash after the writes): EEXIST is made, nothing else happens.
    EXPECT_EQ(summary(w.apply(plan)),
              (std::vector<std::string>{U(0) + " create", U(1) + " create"}));
    EXPECT_EQ(h.mdevs(), m);
    EXPECT_TRUE(h.plan(entry("mbochs-small", 2))[1].action == MdevAction::Ready);
}

// available_instances is read again right before: a pair the budget can no longer hold gets
// none, though the plan (made earlier) said it fit.
TEST(MdevWriter, APairThatNoLongerFitsIsNotStarted) {
    Host h;
    MdevWriter w(*h.kernel, 5s);
    auto large = h.plan(entry("mbochs-large", 3));  // 256 MB: 4 large fit now
    ASSERT_EQ(large[2].action, MdevAction::Create);
    EXPECT_EQ(w.apply(h.plan(entry("mbochs-medium", 8))).size(), 8u);  // 128 MB taken
    auto rs = w.apply(large);
    ASSERT_EQ(rs.size(), 3u);
    for (const auto& r : rs)
        EXPECT_EQ(r.reason, Reason::MdevUnavailable) << r.uuid;
    EXPECT_EQ(rs[0].message, "mbochs type mbochs-large: 3 to create, 2 available_instances now; "
                             "none of them is created");
    EXPECT_EQ(h.mdevs().mdevs.size(), 8u);
}

// Right before its creates the writer reads its type's available_instances, and nothing else of
// the parent: neither the list of its types nor their files.
TEST(MdevWriter, CreatesReadOnlyTheirTypesAvailableInstances) {
    Host h;
    MdevWriter w(*h.kernel, 5s);
    auto plan = h.plan(entry("mbochs-small", 1));
    h.noting->take_noted();
    ASSERT_EQ(summary(w.apply(plan)), std::vector<std::string>{U(0) + " create"});
    std::vector<std::string> types;
    for (const std::string& p : h.noting->take_noted())
        if (p.find(mdev_paths::kTypes) != std::string::npos)
            types.push_back(p);
    EXPECT_EQ(types, std::vector<std::string>{
                         mdev_paths::type_dir("mbochs", "mbochs-small") + "/available_instances"});
}

// The driver's probe fails (ENOSPC after add, as mbochs does): the first failure ends the
// creates, and what was made stays.
TEST(MdevWriter, TheFirstFailedCreateEndsThePair) {
    Host h;
    MdevWriter w(*h.kernel, 5s);
    ASSERT_EQ(summary(w.apply(h.plan(entry("mbochs-small", 1)))),
              std::vector<std::string>{U(0) + " create"});
    h.kernel->fail_mdev_probe("mbochs", ENOSPC);
    auto rs = w.apply(h.plan(entry("mbochs-small", 3)));
    EXPECT_EQ(summary(rs), (std::vector<std::string>{U(1) + " create write-failed",
                                                     U(2) + " create write-failed"}));
    EXPECT_NE(rs[0].message.find("No space left on device"), std::string::npos) << rs[0].message;
    EXPECT_EQ(rs[1].message, "not written: an earlier create failed");
    EXPECT_EQ(h.mdevs().mdevs.size(), 1u);
}

// count 2 -> 0: highest index first; one held through its group node is not written at all.
TEST(MdevWriter, RemovesSkipWhatAUserHolds) {
    Host h;
    MdevWriter w(*h.kernel, 5s);
    w.apply(h.plan(entry("mbochs-small", 3)));
    const auto g = h.mdevs().mdevs.at(U(1)).iommu_group;
    ASSERT_TRUE(g);
    const std::string group = std::to_string(*g);
    auto plan = h.plan(entry("mbochs-small", 0));
    ASSERT_EQ(plan.size(), 3u);
    h.tree.hold_open(4242, "qemu-system-x86", 20, "/dev/vfio/" + group);
    auto rs = w.apply(plan);
    EXPECT_EQ(summary(rs), (std::vector<std::string>{
                               U(2) + " remove", U(1) + " remove in-use-mdev", U(0) + " remove"}));
    EXPECT_EQ(rs[1].message.find("/dev/vfio/" + group + " is open by "), 0u) << rs[1].message;
    MdevHost m = h.mdevs();
    ASSERT_EQ(m.mdevs.size(), 1u);
    EXPECT_TRUE(m.mdevs.count(U(1)));
}

// A remove the kernel holds (the VM has the device open, which no fd walk of a tree shows)
// returns Stuck after the timeout, is never written again while blocked, and ends when the
// device is closed.
TEST(MdevWriter, ABlockedRemoveDoesNotHoldTheCaller) {
    Host h;
    MdevWriter w(*h.kernel, 200ms);
    w.apply(h.plan(entry("mbochs-small", 1)));
    h.kernel->open_mdev_device(U(0));
    auto plan = h.plan(entry("mbochs-small", 0));
    auto start = std::chrono::steady_clock::now();
    auto rs = w.apply(plan);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    EXPECT_EQ(summary(rs), std::vector<std::string>{U(0) + " remove stuck"});
    EXPECT_TRUE(w.stuck(U(0)));
    EXPECT_EQ(w.stuck_names(), (std::set<std::string>{"mbochs", U(0)}));  // the loop's fence
    EXPECT_EQ(w.apply(plan).at(0).message, "an earlier remove of it is still blocked");
    h.kernel->close_mdev_device(U(0));
    EXPECT_TRUE(test::eventually([&] { return !w.stuck(U(0)); }, 10s));
    EXPECT_TRUE(w.stuck_names().empty());
    EXPECT_TRUE(h.mdevs().mdevs.empty());
}

// Each write is in the journal while it runs (stored before, removed after); one that blocks
// stays there, `stuck`, for the next start to settle.
TEST(MdevWriter, EachWriteIsJournaledWhileItRuns) {
    Host h;
    Journal j(*h.kernel);
    MdevWriter w(*h.kernel, 200ms, &j);
    std::vector<std::string> seen;  // the journal as each write starts
    h.kernel->before_step([&](unsigned, const std::string&) {
        for (const auto& e : j.load_all_mdevs())
            seen.push_back(e.uuid + (e.create ? " create " : " remove ") + to_string(e.phase));
    });
    w.apply(h.plan(entry("mbochs-small", 1)));
    EXPECT_EQ(seen, std::vector<std::string>{U(0) + " create started"});
    EXPECT_TRUE(j.load_all_mdevs().empty());
    h.kernel->open_mdev_device(U(0));
    seen.clear();
    EXPECT_EQ(summary(w.apply(h.plan(entry("mbochs-small", 0)))),
              std::vector<std::string>{U(0) + " remove stuck"});
    EXPECT_EQ(seen, std::vector<std::string>{U(0) + " remove started"});
    auto left = j.load_all_mdevs();
    ASSERT_EQ(left.size(), 1u);
    EXPECT_EQ(left[0].phase, MdevJournalEntry::Phase::Stuck);
    h.kernel->close_mdev_device(U(0));
    EXPECT_TRUE(test::eventually([&] { return !w.stuck(U(0)); }, 10s));
}

}  // namespace
}  // namespace vfiod
