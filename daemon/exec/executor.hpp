// Turns a GroupPlan into kernel state (DESIGN §4): whole groups or nothing, every write checked,
// failures rolled back to the original drivers, blocked writes contained, all of it journaled.
// No D-Bus here: the service publishes published_state(outcome) (core/state.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/pci_address.hpp"
#include "core/plan.hpp"
#include "exec/hang_safe_write.hpp"
#include "exec/journal.hpp"
#include "exec/journal_check.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// What a plan's execution came to (core/state.hpp, Verdict): reason VfioUnavailable,
// WriteFailed (also when the journal could not be written: then nothing was), Stuck, or the
// plan's refuse reason; None otherwise. The group is the journal entry's, which may be unknown.
struct GroupOutcome : Verdict<Outcome> {
    std::optional<unsigned> group;
};

// What a PF's count change (DESIGN §11) came to: Ready, Refused (the plan's), or Failed, with
// reason WriteFailed (ENOENT: the PF has no driver; also when the journal could not be
// written), Stuck (a write blocked past write_timeout), or the plan's refuse reason; None when
// Ready. The blockers are the plan's, or the PF. The same type the PF's status is published as.
using PfOutcome = Verdict<PfState>;

// Who asks for a bind. DESIGN §6: a group an operator released stays released until an
// explicit Bind; the executor enforces it, so no caller has to remember to check.
enum class Trigger {
    Automatic,  // coldplug, udev events, a reload, vfioctl apply: a released group is left alone
    Operator,   // D-Bus Bind: clears the sticky mark, then binds
};

class Executor {
public:
    // journal may be null (nothing recorded, nothing to reconcile). fs must outlive every write
    // still blocked when the executor goes away: such a write cannot be cancelled.
    Executor(HostFs& fs, Journal* journal,
             std::chrono::milliseconds write_timeout = std::chrono::seconds(10));
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // A bind plan: its writes, function by function, each verified; `bound` is a no-op and
    // `refuse` writes nothing. A released group, triggered automatically, is Released with
    // nothing written.
    GroupOutcome apply(const GroupPlan& plan, Trigger trigger);
    // A plan from plan_release(): back to the original drivers, then marked released.
    GroupOutcome release(const GroupPlan& plan);
    // On start: finish (if complete) or roll back every journal entry a crash or a blocked
    // write left unfinished. One outcome per entry it touched. An entry is acted on only when
    // the host, read right then, still agrees with every function it names and config's rules
    // allow each (exec/journal_check); any other is reported Refused, naming each function and
    // rule, nothing is written for it, and it is removed.
    std::vector<GroupOutcome> reconcile(const Config& config);
    // The same a group at a time, so each can run off the daemon's loop: the unfinished
    // entries (group -> the functions they name; unreadable ones in *errors), and one group's.
    std::map<unsigned, std::vector<PciAddress>> unfinished(std::vector<std::string>* errors) const;
    std::optional<GroupOutcome> reconcile(unsigned group, const Config& config);

    // SR-IOV PFs (DESIGN §11; exec/executor_pf.cpp). A PfPlan's writes in order, journaled as
    // the PF's own entry (recorded before the first write, removed once the count is reached),
    // each with write_timeout like any write. Refuse writes nothing; Ready is a no-op.
    PfOutcome apply_pf(const PfPlan& plan);
    // PFs whose count change a crash or a blocked write left unfinished; unreadable entries
    // are named in *errors.
    std::vector<PciAddress> unfinished_pfs(std::vector<std::string>* errors) const;
    // Settles one such entry on start: with `wanted` (an [[sriov]] entry still governs the PF)
    // the entry is dropped and the daemon's decision, which follows, finishes the change;
    // without, the PF goes back to the count it had before the change. nullopt when the PF has
    // no entry, or none that can be read (unfinished_pfs names those; they are left alone).
    // Vetted as a group's entry is, right before the first write (pf_entry_problems()): a
    // protected PF, or one whose count would change while a VF is in use, is reported Refused,
    // naming the rule and the VF; nothing is written for it, and the entry is removed.
    std::optional<PfOutcome> reconcile_pf(const PciAddress& pf, std::optional<unsigned> wanted,
                                          const Config& config);

    // Whether an operator's Release holds the group (sticky until Bind or clear_released()).
    bool released(unsigned group) const;
    // Lifts the mark without binding: a reload changed the entries that match the group.
    // 0 or an errno.
    int clear_released(unsigned group);

    // One write outside a plan (the daemon clearing an early override on a refused group), with
    // the same timeout and stuck bookkeeping as plan writes. Returns 0 or an errno: ETIMEDOUT
    // when it blocked (the function is then remembered as stuck), EBUSY when an earlier write
    // to that function is still blocked.
    int write(const PciAddress& fn, const std::string& rel, const std::string& value);

    // Functions with a write still blocked in the kernel; groups holding one are not touched
    // again (no retry loop) until it returns.
    std::vector<PciAddress> stuck() const;

    // A reloaded config's write_timeout, for the writes that start from now on. Any thread:
    // operations may be running, so the daemon keeps its one executor (and what it knows of
    // stuck writes) rather than replace it.
    void set_write_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

    using Pending = PendingWrite;  // one write in flight on its own thread
    struct Home;     // where a function should end up

private:
    // The steps of one operation, in order: run() checks the plan and stuck writes, record()s
    // the journal entry, stores it as started, then write_all() (verify() each function,
    // abandon() with rollback on the first failure). reconcile_entry() finishes what a crash left.
    GroupOutcome run(const GroupPlan& plan, JournalEntry::Op op);
    std::optional<GroupOutcome> held_by_stuck_write(const GroupPlan& plan);
    JournalEntry record(const GroupPlan& plan, JournalEntry::Op op,
                        const std::optional<JournalEntry>& prev) const;
    GroupOutcome keep_released(JournalEntry entry, const std::optional<JournalEntry>& prev);
    std::optional<GroupOutcome> missing_driver(const GroupPlan& plan) const;
    GroupOutcome write_all(const GroupPlan& plan, JournalEntry& entry);
    std::optional<std::string> verify(const PciAddress& fn, const Home& want) const;
    GroupOutcome abandon(JournalEntry& entry, const std::vector<size_t>& moved,
                         const PciAddress& at, const std::string& what, bool stuck);
    GroupOutcome reconcile_entry(JournalEntry& e);
    GroupOutcome discard(const JournalEntry& e, const std::vector<EntryProblem>& problems);
    bool converge(const PciAddress& fn, const Home& home, std::string* note);
    // 0, an errno, or kStuck: the write did not return within the timeout.
    int timed_write(const PciAddress& fn, const std::string& rel, const std::string& value);
    static constexpr int kStuck = kWriteStuck;
    // Those of fns with a write still blocked (forgetting the writes that have returned).
    std::vector<PciAddress> stuck_among(const std::vector<PciAddress>& fns);
    // Stores the entry; "" or "journal <path>: <error>" for the message.
    std::string store(const JournalEntry& entry);

    // The PF half (executor_pf.cpp): a PF held by its own blocked write; the writes that take
    // it to `to`, verified, with the entry settled; the entry kept (stuck) or dropped.
    std::optional<PfOutcome> pf_held(const PciAddress& pf);
    PfOutcome write_pf(const std::vector<Write>& writes, unsigned to, PfJournalEntry& entry);
    // After the write at `failed` failed: sriov_drivers_autoprobe back to 1 if an earlier write
    // of the sequence set it to 0; what came of it, for the message ("" when nothing to do).
    std::string autoprobe_back(const PciAddress& pf, const std::vector<Write>& writes,
                               size_t failed);
    std::string store_pf(const PfJournalEntry& entry);
    PfOutcome drop_pf(const PciAddress& pf, PfOutcome out);

    HostFs& fs_;
    Journal* journal_;
    std::atomic<std::chrono::milliseconds> timeout_;
    // Operations on different groups run on their own threads (the service's workers) and
    // share this bookkeeping.
    mutable std::mutex stuck_m_;
    std::map<PciAddress, std::shared_ptr<Pending>> stuck_;
};

}  // namespace vfiod
