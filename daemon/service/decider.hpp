// The policy: what the daemon does with a group on its own (the planned state, drift
// re-asserted once, the early-override clean-up, observe mode writing nothing) and what an
// operator's Bind or Release becomes. It turns a request into the group's writes and sets the
// statuses it decides; it must not run writes, queue operations or publish (the operations and
// the service do).
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

// One group's writes as the Decider decides them (service/group_ops runs them).
struct GroupWrite {
    std::optional<OpResult> done;  // answered (or decided) without writing
    unsigned group = 0;
    GroupPlan plan;  // its functions are fenced while the writes run
    bool releasing = false;
    Trigger trigger{};
    // The early-override clean-up: each function's writes back to the host; the group's
    // status is then `after`, whatever the writes did.
    std::vector<std::pair<PciAddress, std::vector<Write>>> cleanup;
    std::optional<GroupStatus> after;
    // A group to decide again after this operation, in its own turn (a refused Bind).
    std::optional<unsigned> redecide;
};

class Decider {
public:
    Decider(HostModel& host, StatusStore& store, Executor& executor, const Journal& journal,
            std::function<Mode()> mode)
        : host_(host), store_(store), executor_(executor), journal_(journal),
          mode_(std::move(mode)) {}

    GroupWrite decide(unsigned group, bool from_events);
    GroupWrite bind(std::string_view address);
    GroupWrite release(std::string_view address);
    // A new config is a deliberate act: drift gets its one re-assertion again.
    void forget_reassertions() { reasserted_.clear(); }
    // A refused plan said as the Refused answer: the reason code first.
    static OpResult refusal(const GroupPlan& gp);

private:
    static GroupWrite ended(OpResult r);  // a request answered without writes
    GroupWrite settle(unsigned group, GroupStatus st);
    // The function an operator's Bind or Release names, re-read now; nullptr, with the answer
    // in *why, when the address is malformed or names no function.
    const PciFunction* requested_function(std::string_view address, OpResult* why);
    const GroupPlan* bind_plan(const PciFunction& fn, std::optional<Plan>* whole) const;
    std::vector<const PciFunction*> parked_early(const GroupPlan& gp) const;
    bool clean_up_early(const GroupPlan& gp, const GroupStatus& planned, GroupWrite* p) const;
    std::optional<GroupStatus> drift(unsigned group, const GroupPlan& gp);

    HostModel& host_;
    StatusStore& store_;
    Executor& executor_;
    const Journal& journal_;
    std::function<Mode()> mode_;
    std::set<unsigned> reasserted_;  // groups whose drift was re-asserted once already
};

}  // namespace vfiod
