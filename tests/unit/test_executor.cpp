// The executor against the fake kernel: whole groups bound and verified, every injected fault
// rolled back to the original drivers, blocked writes contained, crashes reconciled, releases
// given back or refused while a user holds the group, and kept released until an operator binds.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "eventually.hpp"
#include "exec_world.hpp"

using namespace vfiod;
using namespace vfiod::test::world;
using vfiod::test::eventually;

TEST(Executor, BindsATwoFunctionGroupInDesignOrderAndVerifies) {
    World w;
    GroupPlan plan = w.plan(13);
    ASSERT_EQ(plan.action, Action::Bind);
    GroupOutcome out = w.exec->apply(plan, Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Bound) << out.message;
    EXPECT_EQ(out.group, 13u);
    expect_bound(w);
    EXPECT_TRUE(w.exists("dev/vfio/13"));

    // Exactly the plan's writes, in its order: override, unbind, probe per function.
    auto writes = w.kernel->writes();
    auto planned = plan.writes();
    ASSERT_EQ(writes.size(), 6u);
    ASSERT_EQ(writes.size(), planned.size());
    for (size_t i = 0; i < writes.size(); ++i) {
        EXPECT_EQ(writes[i].path, planned[i].path());
        EXPECT_EQ(writes[i].value, planned[i].value);
        EXPECT_EQ(writes[i].result, 0);
        EXPECT_EQ(writes[i].path.find(kPort), std::string::npos) << "bridge written";
    }
    EXPECT_EQ(writes[0].path, "sys/bus/pci/devices/0000:01:00.0/driver_override");
    EXPECT_EQ(writes[1].path, "sys/bus/pci/devices/0000:01:00.0/driver/unbind");
    EXPECT_EQ(writes[2].path, "sys/bus/pci/drivers_probe");

    auto entry = w.journal->load(13);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->phase, JournalEntry::Phase::Done);
    EXPECT_EQ(entry->originals().at(A(kGpu)), "nvidia");
    EXPECT_EQ(entry->originals().at(A(kAudio)), "snd_hda_intel");

    // Planned again, the group is bound: a no-op that writes nothing.
    GroupPlan again = w.plan(13);
    EXPECT_EQ(again.action, Action::Bound);
    EXPECT_EQ(w.exec->apply(again, Trigger::Automatic).state, Outcome::Bound);
    EXPECT_EQ(w.kernel->writes().size(), 6u);
}

TEST(Executor, AFailureAtEveryStepLeavesEveryFunctionOnItsOriginalDriver) {
    for (int err : {EBUSY, ENODEV, EINVAL}) {
        for (unsigned k = 1; k <= 6; ++k) {
            SCOPED_TRACE("step " + std::to_string(k) + ", errno " + std::to_string(err));
            World w;
            w.kernel->fail_step(k, err);
            GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
            EXPECT_EQ(out.state, Outcome::Failed);
            EXPECT_EQ(out.reason, Reason::WriteFailed);
            std::string failed_path = w.kernel->writes()[k - 1].path;
            EXPECT_NE(out.message.find(failed_path), std::string::npos) << out.message;
            EXPECT_NE(out.message.find(std::strerror(err)), std::string::npos) << out.message;
            EXPECT_NE(out.message.find("rolled back"), std::string::npos) << out.message;
            ASSERT_EQ(out.blockers.size(), 1u);
            EXPECT_EQ(out.blockers[0], A(k <= 3 ? kGpu : kAudio));
            expect_original(w);
            EXPECT_FALSE(w.exists("dev/vfio/13"));
            EXPECT_EQ(w.journal->load(13)->phase, JournalEntry::Phase::RolledBack);
        }
    }
}

TEST(Executor, AProbeThatAttachesNothingFailsVerificationAndRollsBack) {
    World w;
    // The kernel's drivers_probe succeeds even when the driver's probe() fails.
    w.kernel->fail_probe(kAudio, "vfio-pci");
    GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_NE(out.message.find("verify: driver is none, expected 'vfio-pci'"), std::string::npos)
        << out.message;
    expect_original(w);
}

TEST(Executor, RemovalMidBindFailsTheGroupAndRestoresTheRest) {
    World w;
    // The GPU vanishes right before its unbind (its override is already set).
    w.kernel->before_step([&](unsigned k, const std::string&) {
        if (k == 2)
            w.kernel->remove_function(kGpu);
    });
    GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_EQ(out.blockers, std::vector<PciAddress>{A(kGpu)});
    EXPECT_FALSE(w.exists(std::string("sys/bus/pci/devices/") + kGpu));
    EXPECT_EQ(w.driver(kAudio), "snd_hda_intel");
    EXPECT_EQ(w.override_of(kAudio), "(null)");
}

TEST(Executor, RemovalOfASecondFunctionRollsBackTheFirst) {
    World w;
    w.kernel->before_step([&](unsigned k, const std::string&) {
        if (k == 4)  // the audio function's override
            w.kernel->remove_function(kAudio);
    });
    GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_NE(out.message.find(std::strerror(ENOENT)), std::string::npos) << out.message;
    EXPECT_EQ(w.driver(kGpu), "nvidia");
    EXPECT_EQ(w.override_of(kGpu), "(null)");
}

TEST(Executor, ABlockedUnbindIsReportedStuckAndTheNextGroupProceeds) {
    World w(World::kFull, 3000ms);  // only the blocked write may time out, even on a loaded CI machine
    const std::string audio_unbind = std::string("sys/bus/pci/devices/") + kAudio + "/driver/unbind";
    w.kernel->block_path(audio_unbind);
    // Planned first: once the write blocks, reading the audio function's attributes would block
    // too (as on 6.1), which is the daemon's loop's business to avoid, not this test's.
    GroupPlan gpu_group = w.plan(13), nic_group = w.plan(14);

    auto t0 = std::chrono::steady_clock::now();
    GroupOutcome out = w.exec->apply(gpu_group, Trigger::Automatic);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(out.state, Outcome::Stuck);
    EXPECT_EQ(out.reason, Reason::Stuck);
    EXPECT_EQ(out.blockers, std::vector<PciAddress>{A(kAudio)});
    EXPECT_NE(out.message.find(audio_unbind), std::string::npos) << out.message;
    EXPECT_LT(took, 8s);
    EXPECT_EQ(w.kernel->blocked_now(), 1u);
    // The GPU, already moved, went back; the blocked function was left alone.
    EXPECT_EQ(w.driver(kGpu), "nvidia");
    EXPECT_EQ(w.override_of(kGpu), "(null)");
    EXPECT_EQ(w.exec->stuck(), std::vector<PciAddress>{A(kAudio)});
    EXPECT_EQ(w.journal->load(13)->phase, JournalEntry::Phase::Stuck);

    // Another group proceeds while the write is still blocked.
    GroupOutcome nic = w.exec->apply(nic_group, Trigger::Automatic);
    EXPECT_EQ(nic.state, Outcome::Bound) << nic.message;
    EXPECT_EQ(w.driver(kNic), "vfio-pci");

    // No retry: the stuck group is not written to again while the write hangs.
    size_t before = w.kernel->writes().size();
    GroupOutcome again = w.exec->apply(gpu_group, Trigger::Automatic);
    EXPECT_EQ(again.state, Outcome::Stuck);
    EXPECT_EQ(w.kernel->writes().size(), before);

    // Once the kernel lets go, the function is no longer held.
    w.kernel->unblock();
    EXPECT_TRUE(eventually([&] { return w.exec->stuck().empty(); }, 2s));
}

TEST(Executor, AWriteOutsideAPlanIsTimedAndRememberedAsStuck) {
    World w(World::kFull, 1000ms);  // the first, ordinary write must not time out under load
    const std::string override_path =
        std::string("sys/bus/pci/devices/") + kAudio + "/driver_override";
    EXPECT_EQ(w.exec->write(A(kAudio), override_path, "vfio-pci"), 0);
    EXPECT_EQ(w.override_of(kAudio), "vfio-pci");
    w.kernel->block_path(override_path);
    EXPECT_EQ(w.exec->write(A(kAudio), override_path, "\n"), ETIMEDOUT);
    EXPECT_EQ(w.exec->stuck(), std::vector<PciAddress>{A(kAudio)});
    size_t before = w.kernel->writes().size();
    EXPECT_EQ(w.exec->write(A(kAudio), override_path, "\n"), EBUSY);
    EXPECT_EQ(w.kernel->writes().size(), before);
    w.kernel->unblock();
}

TEST(Executor, MissingVfioDriverFailsWithoutWriting) {
    World w(World::kNoVfio);
    GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_EQ(out.reason, Reason::VfioUnavailable);
    EXPECT_NE(out.message.find("sys/bus/pci/drivers/vfio-pci"), std::string::npos) << out.message;
    EXPECT_TRUE(w.kernel->writes().empty());
    EXPECT_FALSE(w.journal->load(13));
    expect_original(w);
}

TEST(Executor, ARefusedPlanWritesNothing) {
    World w;
    w.config.companions = CompanionPolicy::Refuse;  // the audio function is not allowlisted
    GroupPlan plan = w.plan(13);
    ASSERT_EQ(plan.action, Action::Refuse);
    GroupOutcome out = w.exec->apply(plan, Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Refused);
    EXPECT_EQ(out.reason, Reason::Companion);
    EXPECT_EQ(out.blockers, plan.blockers);
    EXPECT_TRUE(w.kernel->writes().empty());
}

TEST(Executor, AnUnwritableJournalStopsBeforeTheFirstWrite) {
    World w;
    w.tree.write_file("run/vfiod", "not a directory\n");
    GroupOutcome out = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_NE(out.message.find("journal"), std::string::npos) << out.message;
    EXPECT_TRUE(w.kernel->writes().empty());
}

TEST(Executor, ReleaseRestoresOriginalDriversAndIsSticky) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    GroupPlan rel = w.release_plan(13);
    ASSERT_EQ(rel.action, Action::Release);
    GroupOutcome out = w.exec->release(rel);
    EXPECT_EQ(out.state, Outcome::Released) << out.message;
    expect_original(w);
    EXPECT_FALSE(w.exists("dev/vfio/13"));
    EXPECT_TRUE(w.journal->released(13));

    // The mark outlives a restart; nothing automatic undoes it, only an operator's bind.
    w.start();
    EXPECT_TRUE(w.journal->released(13));
    size_t writes = w.kernel->writes().size();
    GroupOutcome kept = w.exec->apply(w.plan(13), Trigger::Automatic);
    EXPECT_EQ(kept.state, Outcome::Released) << kept.message;
    EXPECT_EQ(w.kernel->writes().size(), writes);
    EXPECT_TRUE(w.exec->released(13));
    expect_original(w);
    EXPECT_EQ(w.exec->apply(w.plan(13), Trigger::Operator).state, Outcome::Bound);
    EXPECT_FALSE(w.journal->released(13));
    expect_bound(w);
    EXPECT_EQ(w.journal->load(13)->originals().at(A(kGpu)), "nvidia");
}

TEST(Executor, AFailedReleaseGoesBackToVfio) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    w.kernel->fail_probe(kAudio, "snd_hda_intel");  // its host driver will not take it back
    GroupOutcome out = w.exec->release(w.release_plan(13));
    EXPECT_EQ(out.state, Outcome::Failed);
    EXPECT_EQ(out.blockers, std::vector<PciAddress>{A(kAudio)});
    expect_bound(w);  // never half released
    EXPECT_FALSE(w.journal->released(13));
}

TEST(Executor, ReleaseIsRefusedWhileTheGroupIsOpen) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    w.tree.write_file("proc/4242/comm", "qemu-system-x86\n");
    w.tree.symlink("proc/4242/fd/0", "/dev/null");
    w.tree.symlink("proc/4242/fd/17", "/dev/vfio/13");
    size_t before = w.kernel->writes().size();
    GroupPlan rel = w.release_plan(13);
    ASSERT_EQ(rel.action, Action::Refuse);
    GroupOutcome out = w.exec->release(rel);
    EXPECT_EQ(out.state, Outcome::Refused);
    EXPECT_EQ(out.reason, Reason::InUseVfio);
    EXPECT_NE(out.message.find("qemu-system-x86"), std::string::npos) << out.message;
    EXPECT_EQ(w.kernel->writes().size(), before);
    expect_bound(w);
}

namespace {

// Copies a whole tree as it is at one instant: what a crash would leave behind.
void snapshot(const std::string& from, const std::string& to) {
    namespace fs = std::filesystem;
    fs::create_directories(to);
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks |
                           fs::copy_options::overwrite_existing);
}

// After restart + reconcile the group is whole: all bound, or all as before, with the journal
// saying which.
void expect_consistent_after_restart(const std::string& snap, bool release) {
    World w(World::kEmpty);
    snapshot(snap, w.tree.root());
    w.start();
    auto outs = w.exec->reconcile(w.config);
    for (const auto& o : outs) {
        EXPECT_NE(o.state, Outcome::Failed) << o.message;
    }
    auto entry = w.journal->load(13);
    ASSERT_TRUE(entry);
    bool bound = w.driver(kGpu) == "vfio-pci";
    if (release) {
        expect_original(w);
        EXPECT_TRUE(entry->released);
    } else if (bound) {
        EXPECT_EQ(w.driver(kAudio), "vfio-pci");
        EXPECT_EQ(entry->phase, JournalEntry::Phase::Done);
    } else {
        expect_original(w);
        EXPECT_NE(entry->phase, JournalEntry::Phase::Started);
    }
    // A second start finds nothing left to do.
    w.start();
    EXPECT_TRUE(w.exec->reconcile(w.config).empty());
}

}  // namespace

TEST(Executor, ACrashAfterEveryStepIsReconciledOnRestart) {
    // Scenarios: a clean bind, a bind that fails at its 5th write (crash during the rollback),
    // and a release. Every write point is a possible crash: snapshot right before it.
    for (int scenario = 0; scenario < 3; ++scenario) {
        SCOPED_TRACE("scenario " + std::to_string(scenario));
        World w;
        if (scenario == 2) {
            ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
        }
        const size_t first = w.kernel->writes().size();
        std::vector<std::unique_ptr<FakeTree>> snaps;
        w.kernel->before_step([&](unsigned, const std::string&) {
            snaps.push_back(std::make_unique<FakeTree>());
            snapshot(w.tree.root(), snaps.back()->root());
        });
        if (scenario == 1)
            w.kernel->fail_step(5, EIO);
        GroupOutcome out = scenario == 2 ? w.exec->release(w.release_plan(13))
                                         : w.exec->apply(w.plan(13), Trigger::Automatic);
        EXPECT_EQ(out.state, scenario == 1 ? Outcome::Failed
                                           : scenario == 2 ? Outcome::Released
                                                           : Outcome::Bound)
            << out.message;
        ASSERT_EQ(snaps.size(), w.kernel->writes().size() - first);
        ASSERT_GE(snaps.size(), 6u);
        // And after the final journal update, and right before it: every write done, the
        // entry still "started" (store() is an atomic rename, so that is the only other state).
        for (int before_final = 0; before_final < 2; ++before_final) {
            snaps.push_back(std::make_unique<FakeTree>());
            snapshot(w.tree.root(), snaps.back()->root());
        }
        std::string err;
        auto last = parse_journal(*w.kernel->read("run/vfiod/group-13") + "\n", &err);
        ASSERT_TRUE(last) << err;
        last->phase = JournalEntry::Phase::Started;
        last->released = false;
        snaps.back()->write_file("run/vfiod/group-13", serialize(*last));
        for (size_t i = 0; i < snaps.size(); ++i) {
            SCOPED_TRACE("crash before write " + std::to_string(i + 1));
            expect_consistent_after_restart(snaps[i]->root(), scenario == 2);
        }
    }
}
