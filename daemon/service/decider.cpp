#include "service/decider.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/plan_text.hpp"
#include "core/strings.hpp"
#include "exec/journal.hpp"
#include "service/host_model.hpp"
#include "service/status_store.hpp"

namespace vfiod {

GroupWrite Decider::ended(OpResult r) {
    GroupWrite p;
    p.done = std::move(r);
    return p;
}

GroupWrite Decider::settle(unsigned group, GroupStatus st) {
    store_.set_status(group, std::move(st));
    return ended({});
}

// What the daemon does with a group on its own: a status to publish at once, or writes (a bind,
// or the early-override clean-up of a refused group) to run off the loop.
GroupWrite Decider::decide(unsigned id, bool from_events) {
    const GroupPlan* found = host_.group_plan(id);
    if (!found) {
        store_.forget_group(id);
        reasserted_.erase(id);
        return ended({});
    }
    const GroupPlan& gp = *found;
    if (executor_.released(id))  // what to publish; the executor would not bind it anyway
        return settle(id, {GroupState::Released, Reason::None, "", {}});
    GroupStatus planned{planned_state(gp.action), gp.reason, join(gp.details, "; "), gp.blockers};
    GroupWrite p;
    p.group = id;
    p.trigger = Trigger::Automatic;
    if (gp.action == Action::Refuse && mode_() == Mode::Enforce && clean_up_early(gp, planned, &p))
        return p;
    if (gp.action != Action::Bind)
        return settle(id, planned);
    const GroupStatus* prev = store_.status(id);
    if (from_events && prev && prev->state == GroupState::Bound)
        if (auto failed = drift(id, gp))
            return settle(id, std::move(*failed));
    if (mode_() == Mode::Observe)
        return settle(id, {planned_state(gp.action), Reason::None,
                           "would bind " + describe_devices(gp), {}});
    // Consumers see `pending` while the writes run.
    store_.set_status(
        id, {planned_state(gp.action), Reason::None, "binding " + describe_devices(gp), {}});
    p.plan = gp;
    return p;
}

// A refused group's functions parked on an early override go back to the host: true (and *p
// holds their writes) when there are any.
bool Decider::clean_up_early(const GroupPlan& gp, const GroupStatus& planned, GroupWrite* p) const {
    for (const PciFunction* fn : parked_early(gp)) {
        spdlog::warn("group {}: {} refused; clearing its early driver_override '{}' and "
                     "probing the host driver",
                     *gp.group, fn->address.str(), printable(fn->driver_override));
        p->cleanup.emplace_back(fn->address, release_writes(*fn));
    }
    if (p->cleanup.empty())
        return false;
    store_.set_status(*gp.group, planned);
    p->plan = gp;
    p->after = planned;
    return true;
}

// Someone moved a function of a bound group back to a host driver. Re-assert once; a second
// drift is a human (or a tool) meaning it, and fighting it would be a bind loop. Returns the
// status to settle on when it is not re-asserted.
std::optional<GroupStatus> Decider::drift(unsigned id, const GroupPlan& gp) {
    spdlog::warn("group {}: drift: no longer bound ({})", id, describe_devices(gp));
    if (mode_() != Mode::Enforce)
        return std::nullopt;
    if (reasserted_.count(id))
        return GroupStatus{GroupState::Failed, Reason::Drift,
                      "drifted again after one re-assertion; use Bind to take it back", {}};
    reasserted_.insert(id);
    spdlog::warn("group {}: re-asserting the binding once", id);
    return std::nullopt;
}

// The udev rule set driver_override on an `early` function before its group could be judged;
// once the group is refused, such a function goes back to the host rather than stay parked on an
// override nothing will ever complete. A group in the journal was moved by vfiod itself: that
// is Release's business, not this clean-up's.
std::vector<const PciFunction*> Decider::parked_early(const GroupPlan& gp) const {
    std::vector<const PciFunction*> out;
    if (journal_.load(*gp.group))
        return out;
    const HostUse& use = host_.snapshot().use;  // the snapshot's one proc/*/fd scan found vfio's users
    for (const auto& d : gp.devices) {
        const PciFunction* fn = host_.snapshot().topology.find(d.address);
        if (!fn || !d.target || fn->driver_override.empty() || fn->is_bridge())
            continue;
        if (!fn->driver.empty() && fn->driver != fn->driver_override)
            continue;  // a host driver holds it despite the override: nothing is parked
        if (use.vfio.count(fn->address))
            continue;  // a user holds it: never pull a device from under a VM
        out.push_back(fn);
    }
    return out;
}

OpResult Decider::refusal(const GroupPlan& gp) {
    std::string msg = std::string(to_string(gp.reason)) + ": group " +
                      (gp.group ? std::to_string(*gp.group) : "(none)");
    if (!gp.blockers.empty())
        msg += ", blocked by " + addresses(gp.blockers);
    if (!gp.details.empty())
        msg += ": " + join(gp.details, "; ");
    return OpResult::error(OpResult::Code::Refused, msg);
}

const PciFunction* Decider::requested_function(std::string_view address, OpResult* why) {
    std::string err;
    auto addr = PciAddress::parse(address, &err);
    if (!addr) {
        *why = OpResult::error(OpResult::Code::InvalidArgs, err);
        return nullptr;
    }
    host_.refresh({*addr});  // decide on the host as it is now (the whole group), not as the last event left it
    const PciFunction* fn = host_.snapshot().topology.find(*addr);
    if (!fn)
        *why = OpResult::error(OpResult::Code::NotFound, "no PCI function " + addr->str());
    return fn;
}

// The plan that holds `fn`: its group's, or for a function outside any group its no-iommu
// entry in the whole plan (kept in *whole); nullptr when no entry allowlists it.
const GroupPlan* Decider::bind_plan(const PciFunction& fn, std::optional<Plan>* whole) const {
    auto holds = [&](const GroupPlan& g) {
        return std::any_of(g.devices.begin(), g.devices.end(),
                           [&](const PlannedDevice& d) { return d.address == fn.address; });
    };
    if (fn.iommu_group)
        if (const GroupPlan* g = host_.group_plan(*fn.iommu_group); g && holds(*g))
            return g;
    if (fn.iommu_group && host_.snapshot().topology.iommu_enabled)
        return nullptr;
    *whole = host_.whole_plan();
    for (const auto& g : (*whole)->groups)
        if (!g.group && holds(g))
            return &g;
    return nullptr;
}

GroupWrite Decider::bind(std::string_view address) {
    OpResult why;
    const PciFunction* fn = requested_function(address, &why);
    if (!fn)
        return ended(why);
    const PciAddress addr = fn->address;
    std::optional<Plan> whole;  // only for a function outside any group: its no-iommu entry
    const GroupPlan* gp = bind_plan(*fn, &whole);
    if (!gp)
        return ended(OpResult::error(OpResult::Code::NotAllowlisted,
                                     addr.str() + " matches no [[device]] entry, nor does any "
                                                  "function of its IOMMU group"));
    if (gp->action == Action::Refuse) {
        // Published as the daemon decides it, early-override clean-up included: after this
        // request, in the group's turn.
        GroupWrite refused = ended(refusal(*gp));
        refused.redecide = gp->group;
        return refused;
    }
    unsigned id = *gp->group;
    if (mode_() == Mode::Observe)
        return ended(OpResult::error(OpResult::Code::Failed,
                                     "vfiod runs in observe mode and writes nothing; group " +
                                         std::to_string(id) + " stays pending"));
    spdlog::info("group {}: Bind requested for {}", id, addr.str());
    reasserted_.erase(id);
    if (gp->action == Action::Bound) {
        executor_.clear_released(id);  // the operator takes the group back; nothing to write
        return settle(id, {GroupState::Bound, Reason::None, "", {}});
    }
    // Consumers see `pending` while the writes run.
    store_.set_status(
        id, {planned_state(gp->action), Reason::None, "binding " + describe_devices(*gp), {}});
    GroupWrite p;
    p.group = id;
    p.plan = *gp;
    p.trigger = Trigger::Operator;  // an explicit Bind is the one way to undo a Release
    return p;
}

GroupWrite Decider::release(std::string_view address) {
    OpResult why;
    const PciFunction* fn = requested_function(address, &why);
    if (!fn)
        return ended(why);
    const PciAddress addr = fn->address;
    if (!fn->iommu_group || !store_.status(*fn->iommu_group))
        return ended(OpResult::error(OpResult::Code::NotAllowlisted,
                                     addr.str() + " is not in a group vfiod manages"));
    unsigned id = *fn->iommu_group;
    if (mode_() == Mode::Observe)
        return ended(OpResult::error(OpResult::Code::Failed,
                                     "vfiod runs in observe mode and writes nothing"));
    GroupPlan rp = plan_release(host_.snapshot().topology, host_.snapshot().use, id,
                                journal_.originals(id));
    if (rp.action == Action::Refuse) {
        spdlog::warn("group {}: Release refused: {}", id, join(rp.details, "; "));
        return ended(refusal(rp));
    }
    spdlog::info("group {}: Release requested for {}", id, addr.str());
    GroupWrite p;
    p.group = id;
    p.plan = std::move(rp);
    p.releasing = true;
    return p;
}

}  // namespace vfiod
