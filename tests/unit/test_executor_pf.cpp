// The executor's PF writes (exec/executor_pf.cpp, DESIGN §11) on issue 24's host: the
// sriov-host fixture's PF (1b36:0010 on nvme, sriov_totalvfs 2) under the fake kernel, whose
// sriov_numvfs answers as Linux 6.1's does (EBUSY between two non-zero counts, ENOENT without a
// PF driver). Plans come from the real planner, as the daemon makes them.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/plan.hpp"
#include "eventually.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "fake_kernel.hpp"
#include "io/config_loader.hpp"
#include "io/snapshot.hpp"
#include "scenarios.hpp"

using namespace vfiod;
using namespace std::chrono_literals;
using vfiod::test::eventually;
using vfiod::test::FakeKernel;
using vfiod::test::FakeTree;
using vfiod::test::kSriovPf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

namespace {

const char* kVf0 = "0000:02:00.1";
const char* kVf1 = "0000:02:00.2";
const std::string kPfDir = std::string("sys/bus/pci/devices/") + kSriovPf + "/";
const std::string kNumVfs = kPfDir + "sriov_numvfs";
const std::string kAutoprobe = kPfDir + "sriov_drivers_autoprobe";
const PciAddress kPf = *PciAddress::parse(kSriovPf);

// The sriov-host fixture with a journal and an executor over it, restartable like a daemon; the
// kernel's uevents are kept, so a test can tell whether a VF ever reached a driver.
struct PfHost {
    FakeTree tree;
    std::unique_ptr<FakeKernel> kernel;
    std::unique_ptr<Journal> journal;
    std::unique_ptr<Executor> exec;
    std::mutex m;
    std::vector<std::string> events;

    // empty: the caller lays out the tree (a snapshot) and calls start().
    explicit PfHost(bool empty = false, std::chrono::milliseconds timeout = 5s) {
        if (!empty) {
            test::build_sriov_host(tree);
            start(timeout);
        }
    }
    void start(std::chrono::milliseconds timeout = 5s) {
        exec.reset();
        journal.reset();
        kernel = std::make_unique<FakeKernel>(tree);
        kernel->on_uevent([this](const std::string& action, const std::string& bdf) {
            std::lock_guard lock(m);
            events.push_back(action + " " + bdf);
        });
        journal = std::make_unique<Journal>(*kernel);
        exec = std::make_unique<Executor>(*kernel, journal.get(), timeout);
    }
    // The PF's plan under an [[sriov]] entry asking for n VFs, as the daemon makes it.
    PfPlan plan(unsigned n) {
        std::string toml = "[[sriov]]\naddress = \"" + std::string(kSriovPf) +
                           "\"\nnum_vfs = " + std::to_string(n) + "\n";
        ConfigResult cr = parse_config(toml, "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        Snapshot s = read_snapshot(*kernel);
        Plan p = make_plan(s.topology, s.use, cr.config.value_or(Config{}));
        EXPECT_TRUE(p.pfs && p.pfs->size() == 1);
        return p.pfs && !p.pfs->empty() ? p.pfs->front() : PfPlan{};
    }
    // VFs made as vfiod makes them, before the test starts.
    void make_vfs(unsigned n) {
        ASSERT_EQ(kernel->write(kAutoprobe, "0"), 0);
        ASSERT_EQ(kernel->write(kNumVfs, std::to_string(n)), 0);
    }
    std::string read(const std::string& rel) const { return kernel->read(rel).value_or("(absent)"); }
    std::string driver(const char* bdf) const {
        return kernel->link_name(std::string("sys/bus/pci/devices/") + bdf + "/driver")
            .value_or("");
    }
    bool exists(const char* bdf) const {
        return kernel->exists(std::string("sys/bus/pci/devices/") + bdf);
    }
    // Whether any VF was ever bound to a driver: the "bind" uevents of VFs so far.
    std::vector<std::string> vf_binds() {
        std::lock_guard lock(m);
        std::vector<std::string> out;
        for (const auto& e : events)
            if (e == std::string("bind ") + kVf0 || e == std::string("bind ") + kVf1)
                out.push_back(e);
        return out;
    }
    std::vector<std::string> writes() const {
        std::vector<std::string> out;
        for (const auto& r : kernel->writes())
            out.push_back(r.path + " <- " + r.value + " = " + std::to_string(r.result));
        return out;
    }
    bool journal_empty() const {
        std::vector<std::string> errors;
        return journal->load_all_pfs(&errors).empty() && errors.empty() &&
               !kernel->exists("run/vfiod/pf-" + std::string(kSriovPf));
    }
};

}  // namespace

// 0 -> 2: autoprobe off first, then the count, then autoprobe back on; the journal entry exists
// from before the first write until the count is reached; the VFs arrive driverless (autoprobe
// was 0 when they were made), and the PF keeps nvme.
TEST(ExecutorPf, CreatesDriverlessVfsJournaledFromBeforeTheFirstWrite) {
    PfHost h;
    PfPlan plan = h.plan(2);
    ASSERT_EQ(plan.action, PfAction::Create);
    std::vector<std::string> seen;  // the entry as each write finds it
    h.kernel->before_step([&](unsigned, const std::string&) {
        auto e = h.journal->load_pf(kPf);
        seen.push_back(e ? std::to_string(e->from) + "->" + std::to_string(e->to) + " " +
                               to_string(e->phase)
                         : "none");
    });
    PfOutcome out = h.exec->apply_pf(plan);
    EXPECT_EQ(out.state, PfState::Ready) << out.message;
    EXPECT_EQ(out.reason, Reason::None);
    EXPECT_THAT(h.writes(), ElementsAre(kAutoprobe + " <- 0 = 0", kNumVfs + " <- 2 = 0",
                                        kAutoprobe + " <- 1 = 0"));
    EXPECT_THAT(seen, ElementsAre("0->2 started", "0->2 started", "0->2 started"));
    EXPECT_EQ(h.read(kNumVfs), "2");
    EXPECT_EQ(h.read(kAutoprobe), "1");
    for (const char* vf : {kVf0, kVf1}) {
        EXPECT_TRUE(h.exists(vf)) << vf;
        EXPECT_EQ(h.driver(vf), "") << vf;
    }
    EXPECT_THAT(h.vf_binds(), IsEmpty());
    EXPECT_EQ(h.driver(kSriovPf), "nvme");
    EXPECT_TRUE(h.journal_empty());
    EXPECT_TRUE(h.exec->stuck().empty());

    // Planned again, the PF is ready: nothing is written.
    PfPlan again = h.plan(2);
    ASSERT_EQ(again.action, PfAction::Ready);
    EXPECT_EQ(h.exec->apply_pf(again).state, PfState::Ready);
    EXPECT_EQ(h.kernel->writes().size(), 3u);
}

// 1 -> 2 goes through 0: the kernel refuses a change between two non-zero counts (EBUSY), which
// the same plan without its "0" shows, failing with the step, path and strerror.
TEST(ExecutorPf, GrowsThroughZeroBecauseTheKernelRefusesAnythingElse) {
    PfHost h;
    h.make_vfs(1);
    PfPlan plan = h.plan(2);
    ASSERT_EQ(plan.action, PfAction::Create);

    PfPlan skipping = plan;
    std::erase_if(skipping.writes, [](const Write& w) { return w.value == "0"; });
    PfOutcome refused = h.exec->apply_pf(skipping);
    EXPECT_EQ(refused.state, PfState::Failed);
    EXPECT_EQ(refused.reason, Reason::WriteFailed);
    EXPECT_THAT(refused.message, HasSubstr("sriov_numvfs: writing '2' to " + kNumVfs));
    EXPECT_THAT(refused.message, HasSubstr(std::strerror(EBUSY)));
    EXPECT_EQ(refused.blockers, std::vector<PciAddress>{kPf});
    EXPECT_EQ(h.read(kNumVfs), "1");
    // The sequence without its "0"s never turned autoprobe off: it is not written back.
    EXPECT_THAT(refused.message, Not(HasSubstr(kAutoprobe)));
    EXPECT_TRUE(h.journal_empty());

    size_t before = h.kernel->writes().size();
    PfOutcome out = h.exec->apply_pf(plan);
    EXPECT_EQ(out.state, PfState::Ready) << out.message;
    auto writes = h.writes();
    EXPECT_THAT(std::vector<std::string>(writes.begin() + before, writes.end()),
                ElementsAre(kAutoprobe + " <- 0 = 0", kNumVfs + " <- 0 = 0",
                            kNumVfs + " <- 2 = 0", kAutoprobe + " <- 1 = 0"));
    EXPECT_EQ(h.read(kNumVfs), "2");
    EXPECT_EQ(h.driver(kVf0), "");
    EXPECT_EQ(h.driver(kVf1), "");
    EXPECT_THAT(h.vf_binds(), IsEmpty());
    EXPECT_TRUE(h.journal_empty());
}

// Without a PF driver the kernel cannot make VFs: ENOENT, named in the message; nothing to roll
// back, so the entry goes (the PF's bind event brings the change back).
TEST(ExecutorPf, ADriverlessPfFailsWithEnoentAndLeavesNoEntry) {
    PfHost h;
    ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers/nvme/unbind", kSriovPf), 0);
    PfPlan plan = h.plan(2);
    ASSERT_EQ(plan.action, PfAction::Create);
    PfOutcome out = h.exec->apply_pf(plan);
    EXPECT_EQ(out.state, PfState::Failed);
    EXPECT_EQ(out.reason, Reason::WriteFailed);
    EXPECT_THAT(out.message, HasSubstr(kSriovPf + std::string(": sriov_numvfs: writing '2' to ") +
                                       kNumVfs + ": " + std::strerror(ENOENT)));
    EXPECT_EQ(out.blockers, std::vector<PciAddress>{kPf});
    EXPECT_EQ(h.read(kNumVfs), "0");
    // Autoprobe, turned off by the sequence's first write, is back on: VFs a driver makes later
    // reach their driver, and a PF refused from now on is never written again.
    EXPECT_EQ(h.read(kAutoprobe), "1");
    EXPECT_THAT(out.message, HasSubstr(kAutoprobe + " set back to 1"));
    EXPECT_FALSE(h.exists(kVf0));
    EXPECT_TRUE(h.journal_empty());
}

// A sriov_numvfs write that hangs (a PF driver taking its time, a VF held open): Stuck within
// about write_timeout, the entry kept as stuck; a second try writes nothing while it hangs.
TEST(ExecutorPf, AHangingWriteIsStuckAndTheNextTryWritesNothing) {
    const auto timeout = 1000ms;  // the autoprobe write before it must not time out under load
    PfHost h(false, timeout);
    PfPlan plan = h.plan(2);  // before the block: reads of the PF's attributes would block too
    h.kernel->block_path(kNumVfs);
    auto t0 = std::chrono::steady_clock::now();
    PfOutcome out = h.exec->apply_pf(plan);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(out.state, PfState::Failed);
    EXPECT_EQ(out.reason, Reason::Stuck);
    EXPECT_THAT(out.message, HasSubstr("writing '2' to " + kNumVfs + ": no answer within 1000 ms"));
    EXPECT_EQ(out.blockers, std::vector<PciAddress>{kPf});
    EXPECT_GE(took, timeout);
    EXPECT_LT(took, timeout + 4s);
    EXPECT_EQ(h.exec->stuck(), std::vector<PciAddress>{kPf});
    auto entry = h.journal->load_pf(kPf);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->phase, PfJournalEntry::Phase::Stuck);
    EXPECT_EQ(entry->from, 0u);
    EXPECT_EQ(entry->to, 2u);
    // The groups' half of the journal, in the same directory, does not take it for a group's.
    std::vector<std::string> group_errors;
    EXPECT_THAT(h.exec->unfinished(&group_errors), IsEmpty());
    EXPECT_THAT(group_errors, IsEmpty());

    size_t before = h.kernel->writes().size();
    PfOutcome again = h.exec->apply_pf(plan);
    EXPECT_EQ(again.state, PfState::Failed);
    EXPECT_EQ(again.reason, Reason::Stuck);
    EXPECT_THAT(again.message, HasSubstr(std::strerror(EBUSY)));
    EXPECT_EQ(h.kernel->writes().size(), before);
    // So is settling it: the entry stays while the write hangs.
    auto held = h.exec->reconcile_pf(kPf, 2u, Config{});
    ASSERT_TRUE(held);
    EXPECT_EQ(held->reason, Reason::Stuck);
    EXPECT_TRUE(h.journal->load_pf(kPf));

    // Once the kernel lets go, the write completes and the entry is settled like any other.
    h.kernel->unblock();
    EXPECT_TRUE(eventually([&] { return h.exec->stuck().empty(); }, 2s));
    EXPECT_EQ(h.exec->unfinished_pfs(nullptr), std::vector<PciAddress>{kPf});
    auto settled = h.exec->reconcile_pf(kPf, 2u, Config{});
    ASSERT_TRUE(settled);
    EXPECT_EQ(settled->state, PfState::Ready) << settled->message;
    EXPECT_TRUE(h.journal_empty());
    EXPECT_EQ(h.read(kNumVfs), "2");
}

// A journal that cannot be written stops the change before its first write.
TEST(ExecutorPf, AnUnwritableJournalStopsBeforeTheFirstWrite) {
    PfHost h;
    h.tree.write_file("run/vfiod", "not a directory\n");
    PfOutcome out = h.exec->apply_pf(h.plan(2));
    EXPECT_EQ(out.state, PfState::Failed);
    EXPECT_EQ(out.reason, Reason::WriteFailed);
    EXPECT_THAT(out.message, HasSubstr("journal run/vfiod/pf-0000:02:00.0: "));
    EXPECT_THAT(out.message, HasSubstr("nothing was written"));
    EXPECT_THAT(h.writes(), IsEmpty());
}

// A refusal is the plan's, with nothing written.
TEST(ExecutorPf, ARefusedPlanWritesNothing) {
    PfHost h;
    PfPlan plan = h.plan(3);  // above sriov_totalvfs
    ASSERT_EQ(plan.action, PfAction::Refuse);
    PfOutcome out = h.exec->apply_pf(plan);
    EXPECT_EQ(out.state, PfState::Refused);
    EXPECT_EQ(out.reason, Reason::VfsExceedTotal);
    EXPECT_EQ(out.blockers, plan.blockers);
    EXPECT_THAT(out.message, HasSubstr("sriov_totalvfs"));
    EXPECT_THAT(h.writes(), IsEmpty());
    EXPECT_TRUE(h.journal_empty());
}

namespace {

// A whole tree as it is at one instant: what a crash would leave behind.
void copy_tree(const std::string& from, const std::string& to) {
    namespace fs = std::filesystem;
    fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks |
                           fs::copy_options::overwrite_existing);
}

// A daemon started on a crash's tree settles the PF's entry: with its [[sriov]] entry still
// there (wanted), the entry goes and a fresh plan reaches the count; without, the PF is back
// at `from`. Either way no VF ever reaches a host driver, and a second start finds nothing.
void expect_settled_after_restart(const std::string& snap, unsigned from, unsigned to,
                                  std::optional<unsigned> wanted) {
    PfHost r(true);
    copy_tree(snap, r.tree.root());
    r.start();
    std::vector<std::string> errors;
    EXPECT_EQ(r.exec->unfinished_pfs(&errors), std::vector<PciAddress>{kPf});
    EXPECT_THAT(errors, IsEmpty());
    auto settled = r.exec->reconcile_pf(kPf, wanted, Config{});
    ASSERT_TRUE(settled);
    EXPECT_EQ(settled->state, PfState::Ready) << settled->message;
    EXPECT_EQ(settled->reason, Reason::None);
    EXPECT_TRUE(r.journal_empty());
    if (wanted) {
        EXPECT_THAT(settled->message, HasSubstr("follows"));
        PfOutcome out = r.exec->apply_pf(r.plan(*wanted));
        EXPECT_EQ(out.state, PfState::Ready) << out.message;
    }
    EXPECT_EQ(r.read(kNumVfs), std::to_string(wanted ? to : from));
    // Back on whatever write the crash came before, so VFs left to the host can be probed.
    EXPECT_EQ(r.read(kAutoprobe), "1");
    EXPECT_EQ(r.driver(kVf0), "");
    EXPECT_EQ(r.driver(kVf1), "");
    EXPECT_THAT(r.vf_binds(), IsEmpty());
    EXPECT_EQ(r.driver(kSriovPf), "nvme");
    r.start();
    EXPECT_THAT(r.exec->unfinished_pfs(&errors), IsEmpty());
    EXPECT_FALSE(r.exec->reconcile_pf(kPf, wanted, Config{}));
}

}  // namespace

// Every write is a possible crash: the tree is copied right before each, and once more after
// the last with the entry still there (its removal is an unlink: the only other state).
TEST(ExecutorPf, ACrashBeforeEveryWriteIsSettledOnRestart) {
    for (auto [from, to] : {std::pair{0u, 2u}, {1u, 2u}, {2u, 1u}, {2u, 0u}}) {
        SCOPED_TRACE(std::to_string(from) + " -> " + std::to_string(to));
        PfHost h;
        if (from)
            h.make_vfs(from);
        std::vector<std::unique_ptr<FakeTree>> snaps;
        h.kernel->before_step([&](unsigned, const std::string&) {
            snaps.push_back(std::make_unique<FakeTree>());
            copy_tree(h.tree.root(), snaps.back()->root());
        });
        const size_t first = h.kernel->writes().size();
        ASSERT_EQ(h.exec->apply_pf(h.plan(to)).state, PfState::Ready);
        ASSERT_EQ(snaps.size(), h.kernel->writes().size() - first);
        ASSERT_GE(snaps.size(), 1u);
        snaps.push_back(std::make_unique<FakeTree>());
        copy_tree(h.tree.root(), snaps.back()->root());
        snaps.back()->write_file("run/vfiod/pf-" + std::string(kSriovPf),
                                 serialize(PfJournalEntry{kPf, from, to}));
        for (size_t i = 0; i < snaps.size(); ++i) {
            SCOPED_TRACE("crash before write " + std::to_string(i + 1));
            {
                SCOPED_TRACE("its [[sriov]] entry kept");
                expect_settled_after_restart(snaps[i]->root(), from, to, to);
            }
            {
                SCOPED_TRACE("its [[sriov]] entry gone");
                expect_settled_after_restart(snaps[i]->root(), from, to, std::nullopt);
            }
        }
    }
}

// What vfiod did not write in run/vfiod is named and left alone: nothing is written for it, and
// the group loader, which shares the directory, never takes a PF entry for a group's.
TEST(ExecutorPf, UnreadablePfEntriesAreReportedAndNeverActedOn) {
    PfHost h;
    FakeTree outside;
    const std::string good = serialize(PfJournalEntry{kPf, 0, 2});
    const std::map<std::string, std::string> planted = {
        {"pf-0000:02:00.0", good + "phase stuck\n"},                         // a key twice
        {"pf-0000:03:00.0", good + std::string(kMaxPfEntryBytes, '\n')},     // too big
        {"pf-0000:05:00.0", "vfiod-journal 1\ngroup 5\nop bind\nphase started\n"},
        {"pf-0000:06:00.0", "vfiod-pf-journal 1\npf 0000:06:00.0\nfrom 00\nto 2\nphase started\n"},
        {"pf-0000:02:00.0.tmp", good},  // an interrupted store's: not an entry
        {"pf-2:00.0", good},            // not an address as vfiod spells it
    };
    for (const auto& [name, text] : planted)
        h.tree.write_file("run/vfiod/" + name, text);
    outside.write_file("entry", serialize(PfJournalEntry{*PciAddress::parse("0000:04:00.0"), 0, 2}));
    h.tree.symlink("run/vfiod/pf-0000:04:00.0", outside.root() + "/entry");

    std::vector<std::string> errors;
    EXPECT_THAT(h.exec->unfinished_pfs(&errors), IsEmpty());
    EXPECT_THAT(errors,
                ElementsAre(HasSubstr("run/vfiod/pf-0000:02:00.0: line 6: 'phase' given twice"),
                            "run/vfiod/pf-0000:03:00.0: larger than 4096 bytes: not an entry "
                            "vfiod wrote",
                            "run/vfiod/pf-0000:04:00.0: a symbolic link, not a regular file",
                            HasSubstr("run/vfiod/pf-0000:05:00.0: not a vfiod PF journal"),
                            HasSubstr("run/vfiod/pf-0000:06:00.0: line 3: bad count '00'")));
    EXPECT_FALSE(h.exec->reconcile_pf(kPf, std::nullopt, Config{}));
    EXPECT_FALSE(h.exec->reconcile_pf(*PciAddress::parse("0000:04:00.0"), std::nullopt, Config{}));
    EXPECT_THAT(h.writes(), IsEmpty());
    for (const auto& [name, text] : planted) {
        std::ifstream in(h.tree.root() + "/run/vfiod/" + name, std::ios::binary);
        EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text) << name;
    }
    EXPECT_EQ(outside.root() + "/entry",
              std::filesystem::read_symlink(h.tree.root() + "/run/vfiod/pf-0000:04:00.0"));

    std::vector<std::string> group_errors;
    EXPECT_THAT(h.exec->unfinished(&group_errors), IsEmpty());
    EXPECT_THAT(group_errors, IsEmpty());
}

// The text form round-trips, and the parser takes only what serialize() writes.
TEST(PfJournalText, RoundTripsAndRefusesWhatItDidNotWrite) {
    PfJournalEntry e{kPf, 65535, 0, PfJournalEntry::Phase::Stuck};
    std::string err;
    auto back = parse_pf_journal(serialize(e), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->pf, e.pf);
    EXPECT_EQ(back->from, 65535u);
    EXPECT_EQ(back->to, 0u);
    EXPECT_EQ(back->phase, PfJournalEntry::Phase::Stuck);

    const std::string head = "vfiod-pf-journal 1\n";
    const std::string rest = "from 1\nto 2\nphase started\n";
    for (const std::string& bad : {
             std::string("vfiod-journal 1\npf 0000:02:00.0\n") + rest,  // a group entry's magic
             head + rest,                                               // no pf
             head + "pf 0000:02:00.0\nfrom 1\nto 2\n",                  // no phase
             head + "pf 2:00.0\n" + rest,                               // not as str() spells it
             head + "pf 0000:02:00.0 x\n" + rest,                       // a second value
             head + "pf 0000:02:00.0\n" + rest + "to 3\n",              // a key twice
             head + "pf 0000:02:00.0\n" + rest + "group 13\n",          // a group entry's key
             head + "pf 0000:02:00.0\nfrom 65536\nto 2\nphase started\n",
             head + "pf 0000:02:00.0\nfrom -1\nto 2\nphase started\n",
             head + "pf 0000:02:00.0\nfrom 1\nto 2\nphase done\n",      // a group phase
             head + "pf 0000:02:00.0\nfrom 1\nto 0x2\nphase started\n",
         }) {
        err.clear();
        EXPECT_FALSE(parse_pf_journal(bad, &err)) << bad;
        EXPECT_FALSE(err.empty()) << bad;
    }
    EXPECT_FALSE(parse_pf_journal(head + "pf 0000:02:00.0\nfrom 1\nto 2\n", &err));
    EXPECT_EQ(err, "incomplete entry (pf, from, to and phase are required)");
}

namespace {

// Issue 37's host: the PF has 2 VFs, the first carrying the host's default route; an entry of
// an interrupted 0 -> 2 change, whose [[sriov]] entry was removed since (or a planted file).
struct RoutedVfHost : PfHost {
    RoutedVfHost() : PfHost(true) {
        test::build_sriov_routed_vf(tree);
        start();
        tree.write_file("run/vfiod/pf-" + std::string(kSriovPf),
                        serialize(PfJournalEntry{kPf, 0, 2}));
    }
    Config config(const std::string& toml) {
        ConfigResult cr = parse_config(toml, "t.toml");
        EXPECT_TRUE(cr.config) << (cr.errors.empty() ? "" : cr.errors[0]);
        return cr.config.value_or(Config{});
    }
};

const std::string kProtectPf = "[[protect]]\naddress = \"" + std::string(kSriovPf) + "\"\n";

}  // namespace

// Settling the entry would take the PF back to 0 VFs, destroying the VF the host routes through:
// a protected PF, or a VF in use, keeps its VFs; the entry is refused naming the rule and the
// function, nothing is written, and it is gone, so no later start acts on it either.
TEST(ExecutorPf, AnEntryNeverDestroysAVfInUseOrTouchesAProtectedPf) {
    struct Case {
        const char* name;
        std::string toml;
        bool route;  // the VF carries the default route
        bool vm;     // a VM holds the second VF through vfio
        std::vector<std::string> says;
        std::vector<PciAddress> blockers;
    };
    const PciAddress vf1 = *PciAddress::parse(kVf1);
    const PciAddress vf0 = *PciAddress::parse(kVf0);
    for (const Case& c : {
             Case{"protected, VF routed", kProtectPf, true, false,
                  {"0000:02:00.0: protected: matches a [[protect]] entry",
                   "0000:02:00.1: a VF of 0000:02:00.0, in-use-network: enp2s0v0 carries a route"},
                  {kPf, vf0}},
             Case{"VF routed", "", true, false,
                  {"0000:02:00.1: a VF of 0000:02:00.0, in-use-network: enp2s0v0 carries a route"},
                  {vf0}},
             Case{"protected", kProtectPf, false, false,
                  {"0000:02:00.0: protected: matches a [[protect]] entry"}, {kPf}},
             Case{"VF open by a VM", "", false, true,
                  {"0000:02:00.2: a VF of 0000:02:00.0, in-use-vfio: ", "qemu-system-x86"}, {vf1}},
         }) {
        SCOPED_TRACE(c.name);
        RoutedVfHost h;
        if (!c.route)
            h.tree.write_file("proc/net/route", "Iface\tDestination\tGateway \tFlags\n");
        if (c.vm) {
            const std::string vf_dir = std::string("sys/bus/pci/devices/") + kVf1 + "/";
            ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers/igbvf/unbind", kVf1), 0);
            ASSERT_EQ(h.kernel->write(vf_dir + "driver_override", "vfio-pci"), 0);
            ASSERT_EQ(h.kernel->write("sys/bus/pci/drivers_probe", kVf1), 0);
            ASSERT_EQ(h.driver(kVf1), "vfio-pci");
            h.tree.write_file("proc/4242/comm", "qemu-system-x86\n");
            h.tree.symlink("proc/4242/fd/30", "/dev/vfio/9");
        }
        const size_t before = h.kernel->writes().size();
        auto out = h.exec->reconcile_pf(kPf, std::nullopt, h.config(c.toml));
        ASSERT_TRUE(out);
        EXPECT_EQ(out->state, PfState::Refused);
        EXPECT_EQ(out->blockers, c.blockers);
        EXPECT_THAT(out->message, HasSubstr("run/vfiod/pf-0000:02:00.0 was not acted on"));
        for (const auto& s : c.says)
            EXPECT_THAT(out->message, HasSubstr(s));
        EXPECT_EQ(h.kernel->writes().size(), before) << out->message;
        EXPECT_EQ(h.read(kNumVfs), "2");
        EXPECT_TRUE(h.exists(kVf0));
        EXPECT_TRUE(h.journal_empty());
    }
}

// A protected PF is not written at all, not even autoprobe, where its [[sriov]] entry still
// governs it; a VF in use blocks only what destroys it: with the count already where the entry
// started, or an [[sriov]] entry governing, autoprobe alone goes back to 1 as before.
TEST(ExecutorPf, AVfInUseBlocksOnlyACountChange) {
    const std::string sriov =
        "[[sriov]]\naddress = \"" + std::string(kSriovPf) + "\"\nnum_vfs = 2\n";
    {
        SCOPED_TRACE("protected, [[sriov]] entry kept");
        RoutedVfHost h;
        auto out = h.exec->reconcile_pf(kPf, 2u, h.config(kProtectPf + sriov));
        ASSERT_TRUE(out);
        EXPECT_EQ(out->state, PfState::Refused);
        EXPECT_THAT(out->message, HasSubstr("protected: matches a [[protect]] entry"));
        EXPECT_THAT(out->message, Not(HasSubstr("in-use-network")));
        EXPECT_THAT(h.writes(), IsEmpty());
        EXPECT_TRUE(h.journal_empty());
    }
    {
        SCOPED_TRACE("VF routed, [[sriov]] entry kept");
        RoutedVfHost h;
        auto out = h.exec->reconcile_pf(kPf, 2u, h.config(sriov));
        ASSERT_TRUE(out);
        EXPECT_EQ(out->state, PfState::Ready) << out->message;
        EXPECT_THAT(h.writes(), ElementsAre(kAutoprobe + " <- 1 = 0"));
        EXPECT_EQ(h.read(kNumVfs), "2");
    }
    {
        SCOPED_TRACE("VF routed, the count already the entry's from");
        RoutedVfHost h;
        h.tree.write_file("run/vfiod/pf-" + std::string(kSriovPf),
                          serialize(PfJournalEntry{kPf, 2, 0}));
        auto out = h.exec->reconcile_pf(kPf, std::nullopt, h.config(""));
        ASSERT_TRUE(out);
        EXPECT_EQ(out->state, PfState::Ready) << out->message;
        EXPECT_THAT(h.writes(), ElementsAre(kAutoprobe + " <- 1 = 0"));
        EXPECT_EQ(h.read(kNumVfs), "2");
        EXPECT_TRUE(h.journal_empty());
    }
}
