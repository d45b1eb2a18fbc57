// The policy: what the daemon does with a group on its own (the planned state, drift
// re-asserted once, the early-override clean-up, observe mode writing nothing) and what an
// operator's Bind or Release becomes. It turns a request into a Prepared operation and sets the
// statuses it decides; it must not run writes, queue operations or publish (the service does).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "core/plan.hpp"
#include "core/state.hpp"
#include "exec/executor.hpp"
#include "service/op_result.hpp"

namespace vfiod {

class HostModel;
class Journal;
class StatusStore;

// One operation split at its writes: decided on the loop, written off it.
struct Prepared {
    std::optional<OpResult> done;  // answered (or decided) without writing
    unsigned group = 0;
    GroupPlan plan;  // its functions are fenced while the writes run
    bool releasing = false;
    Trigger trigger{};
    // The early-override clean-up: each function's writes back to the host; the group's
    // status is then `after`, whatever the writes did.
    std::vector<std::pair<PciAddress, std::vector<Write>>> cleanup;
    std::optional<GroupStatus> after;
    // Finishing or rolling back what the last run left unfinished (the journal names the
    // functions); the group's decision follows in its queue.
    bool reconciling = false;
    std::vector<PciAddress> functions;
    // A group to decide again after this operation, in its own turn (a refused Bind).
    std::optional<unsigned> redecide;
    // SR-IOV (DESIGN §11; service/pf_decider), `group` being the PF's or the VF's: a PF's count
    // change; a VF no entry allowlists sent to its host driver; or settling a PF's journal
    // entry from the last run, with the count an entry wants now (nullopt: none governs it).
    std::optional<PfPlan> pf;
    std::optional<PciAddress> probe;
    std::optional<PciAddress> pf_reconcile;
    std::optional<unsigned> pf_wanted;
};

// What an operation's writes came to: a group's, or a PF's count change.
struct Written {
    GroupOutcome group;
    PfOutcome pf;
};

class Decider {
public:
    Decider(HostModel& host, StatusStore& store, Executor& executor, const Journal& journal,
            std::function<Mode()> mode)
        : host_(host), store_(store), executor_(executor), journal_(journal),
          mode_(std::move(mode)) {}

    Prepared decide(unsigned group, bool from_events);
    Prepared bind(std::string_view address);
    Prepared release(std::string_view address);
    // A new config is a deliberate act: drift gets its one re-assertion again.
    void forget_reassertions() { reasserted_.clear(); }
    // A refused plan said as the Refused answer: the reason code first.
    static OpResult refusal(const GroupPlan& gp);

private:
    static Prepared ended(OpResult r);  // a request answered without writes
    Prepared settle(unsigned group, GroupStatus st);
    // The function an operator's Bind or Release names, re-read now; nullptr, with the answer
    // in *why, when the address is malformed or names no function.
    const PciFunction* requested_function(std::string_view address, OpResult* why);
    const GroupPlan* bind_plan(const PciFunction& fn, std::optional<Plan>* whole) const;
    std::vector<const PciFunction*> parked_early(const GroupPlan& gp) const;
    bool clean_up_early(const GroupPlan& gp, const GroupStatus& planned, Prepared* p) const;
    std::optional<GroupStatus> drift(unsigned group, const GroupPlan& gp);

    HostModel& host_;
    StatusStore& store_;
    Executor& executor_;
    const Journal& journal_;
    std::function<Mode()> mode_;
    std::set<unsigned> reasserted_;  // groups whose drift was re-asserted once already
};

}  // namespace vfiod
