#include "service/group_ops.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "io/claims.hpp"

namespace vfiod {

namespace {

GroupStatus from_outcome(const GroupOutcome& o) {
    GroupState state = published_state(o.state);
    // A success publishes no reason and no message: those describe what stands in the way.
    if (state == GroupState::Bound || state == GroupState::Released)
        return {state, Reason::None, "", {}};
    return {state, o.reason, o.message, o.blockers};
}

void log_interrupted(const GroupOutcome& o) {
    std::string g = o.group ? std::to_string(*o.group) : "?";
    if (published_state(o.state) == GroupState::Failed)
        spdlog::error("group {}: unfinished operation from the last run: {} {}: {}", g,
                      to_string(o.state), to_string(o.reason), o.message);
    else
        spdlog::warn("group {}: unfinished operation from the last run: {}{}{}", g,
                     to_string(o.state), o.message.empty() ? "" : ": ", o.message);
}

}  // namespace

std::optional<OpResult> GroupWriteOp::prepare(ServiceParts& s) {
    write_ = decide(s);
    return write_.done;
}

std::set<PciAddress> GroupWriteOp::fenced() const {
    std::set<PciAddress> out;
    for (const auto& d : write_.plan.devices)
        out.insert(d.address);
    return out;
}

void GroupWriteOp::run(ServiceParts& s) {
    const GroupWrite& w = write_;
    for (const auto& [fn, writes] : w.cleanup) {
        for (const auto& one : writes)
            if (int err = s.executor.write(fn, one.path(), one.value)) {
                spdlog::error("group {}: writing {}: {}", w.group, one.path(), std::strerror(err));
                break;
            }
    }
    if (!w.cleanup.empty())
        return;  // `after` says what to publish
    if (w.releasing) {
        outcome_ = s.executor.release(w.plan);
        return;
    }
    // Exclusive claims are probed here, off the loop and just before the first write, since the
    // probe is itself a claim for an instant (DESIGN §4). A claimed disk makes the plan a
    // refusal, which the executor reports without writing.
    GroupPlan checked = w.plan;
    refuse_if_claimed(s.fs, &checked);
    outcome_ = s.executor.apply(checked, w.trigger);
}

OpResult GroupWriteOp::complete(ServiceParts& s) {
    const GroupWrite& w = write_;
    GroupStatus st = w.after ? *w.after : from_outcome(outcome_);
    // The drivers the functions go back to, as published before the release (DESIGN §13:
    // quarantine when one does not take its function back).
    std::map<PciAddress, std::string> originals;
    if (w.releasing)
        for (const auto& d : w.plan.devices)
            if (auto it = s.store.inventory().devices.find(d.address);
                it != s.store.inventory().devices.end())
                originals[d.address] = it->second.original_driver;
    // First, so the state-change line names the drivers the functions went to.
    std::set<PciAddress> written = s.host.members({w.group});
    for (const auto& d : w.plan.devices)
        written.insert(d.address);
    s.host.refresh(std::move(written));
    s.store.set_status(w.group, st);
    if (w.releasing || w.trigger == Trigger::Operator)
        s.then.retry_pfs();
    if (!w.releasing && w.trigger == Trigger::Operator && st.state == GroupState::Bound)
        s.then.check_health(w.group, HealthCheck::Clear);
    if (w.releasing && st.state == GroupState::Released) {
        s.then.check_health(w.group, HealthCheck::Event, originals);
    } else if (w.releasing && st.state == GroupState::Failed) {
        // Rolled back at the function the executor names as at fault (its driver did not take
        // it, or its write failed): that function alone is a quarantine candidate, which the
        // check confirms only if its loaded original driver does not have it; its companions
        // were put back with it.
        std::map<PciAddress, std::string> candidates;
        for (const auto& fn : st.blockers)
            if (auto it = originals.find(fn); it != originals.end())
                candidates.insert(*it);
        if (!candidates.empty())
            s.then.check_health(w.group, HealthCheck::Event, std::move(candidates));
    }
    GroupState want = w.releasing ? GroupState::Released : GroupState::Bound;
    if (st.state == want)
        return {};
    if (st.state == GroupState::Refused) {  // a claim found on the worker, said as refusal() does
        GroupPlan refused;
        refused.group = w.group;
        refused.reason = st.reason;
        refused.blockers = st.blockers;
        if (!st.message.empty())
            refused.details.push_back(st.message);
        return Decider::refusal(refused);
    }
    return OpResult::error(OpResult::Code::Failed,
                           std::string(to_string(st.reason)) + ": " + st.message);
}

GroupWrite DecideOp::decide(ServiceParts& s) {
    s.then.deciding(group_);
    return s.decider.decide(group_, from_events_);
}

GroupWrite BindOp::decide(ServiceParts& s) {
    GroupWrite w = s.decider.bind(address_);
    if (w.redecide)
        s.then.decide(*w.redecide);
    // An operator's Bind clears the group's health states once its functions read fine
    // (DESIGN §13): checked now when there is nothing to write, else once the writes end.
    if (w.done && w.done->ok())
        if (auto a = PciAddress::parse(address_))
            if (auto g = s.host.group_of(*a))
                s.then.check_health(*g, HealthCheck::Clear);
    return w;
}

GroupWrite ReleaseOp::decide(ServiceParts& s) { return s.decider.release(address_); }

std::optional<OpResult> ReconcileOp::prepare(ServiceParts& s) {
    if (auto entry = s.journal.load(group_))
        for (const auto& f : entry->functions)
            functions_.insert(f.address);
    return std::nullopt;
}

void ReconcileOp::run(ServiceParts& s) {
    auto o = s.executor.reconcile(group_, s.host.config());
    outcome_ = o ? *o : GroupOutcome{{Outcome::RolledBack, Reason::None, "", {}}, group_};
}

OpResult ReconcileOp::complete(ServiceParts& s) {
    if (!outcome_.message.empty())  // empty: the entry was finished already
        log_interrupted(outcome_);
    s.host.reread();
    return {};
}

}  // namespace vfiod
