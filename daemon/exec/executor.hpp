// Turns a GroupPlan into kernel state (DESIGN §4): whole groups or nothing, every write checked,
// failures rolled back to the original drivers, blocked writes contained, all of it journaled.
// No D-Bus here: the service publishes published_state(outcome) (core/state.hpp).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/pci_address.hpp"
#include "core/plan.hpp"
#include "exec/journal.hpp"
#include "io/sysfs.hpp"

namespace vfiod {

struct GroupOutcome {
    std::optional<unsigned> group;
    Outcome state = Outcome::Failed;
    // VfioUnavailable, WriteFailed (also when the journal could not be written: then nothing
    // was), Stuck, or the plan's refuse reason; None otherwise.
    Reason reason = Reason::None;
    std::string message;               // step, path and strerror(errno), for humans and logs
    std::vector<PciAddress> blockers;  // the functions at fault
};

class Executor {
public:
    // journal may be null (nothing recorded, nothing to reconcile). fs must outlive every write
    // still blocked when the executor goes away: such a write cannot be cancelled.
    Executor(Sysfs& fs, Journal* journal,
             std::chrono::milliseconds write_timeout = std::chrono::seconds(10));
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // A bind plan: its writes, function by function, each verified; `bound` is a no-op and
    // `refuse` writes nothing. Clears a sticky `released` mark, so automatic callers check
    // Journal::released() first: only an explicit Bind may undo a Release.
    GroupOutcome apply(const GroupPlan& plan);
    // A plan from plan_release(): back to the original drivers, then marked released.
    GroupOutcome release(const GroupPlan& plan);
    // On start: finish (if complete) or roll back every journal entry a crash or a blocked
    // write left unfinished. One outcome per entry it touched.
    std::vector<GroupOutcome> reconcile();

    // One write outside a plan (the daemon clearing an early override on a refused group), with
    // the same timeout and stuck bookkeeping as plan writes. Returns 0 or an errno: ETIMEDOUT
    // when it blocked (the function is then remembered as stuck), EBUSY when an earlier write
    // to that function is still blocked.
    int write(const PciAddress& fn, const std::string& rel, const std::string& value);

    // Functions with a write still blocked in the kernel; groups holding one are not touched
    // again (no retry loop) until it returns.
    std::vector<PciAddress> stuck() const;

    struct Pending;  // one write in flight on its worker thread
    struct Home;     // where a function should end up

private:
    int timed_write(const PciAddress& fn, const std::string& rel, const std::string& value);
    GroupOutcome run(const GroupPlan& plan, JournalEntry::Op op);
    bool converge(const PciAddress& fn, const Home& home, std::string* note);
    std::optional<GroupOutcome> held_by_stuck_write(const GroupPlan& plan);

    Sysfs& fs_;
    Journal* journal_;
    std::chrono::milliseconds timeout_;
    // Operations on different groups run on their own threads (the service's workers) and
    // share this bookkeeping.
    mutable std::mutex stuck_m_;
    std::map<PciAddress, std::shared_ptr<Pending>> stuck_;
};

}  // namespace vfiod
