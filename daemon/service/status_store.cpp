#include "service/status_store.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "core/plan_text.hpp"
#include "core/strings.hpp"
#include "exec/journal.hpp"
#include "service/health_tracker.hpp"
#include "service/host_model.hpp"

namespace vfiod {

const GroupStatus* StatusStore::status(unsigned group) const {
    auto it = status_.find(group);
    return it == status_.end() ? nullptr : &it->second;
}

void StatusStore::mark(std::optional<unsigned> group) {
    if (group)
        dirty_.groups.insert(*group);
    else
        dirty_.all = true;
}

void StatusStore::set_status(unsigned group, GroupStatus s) {
    dirty_.groups.insert(group);
    auto it = status_.find(group);
    if (it != status_.end() && it->second == s)
        return;
    const GroupPlan* gp = in_.host.group_plan(group);
    // A released group's plan would bind it again; what matters is where its functions are now.
    std::string devices = gp ? describe_devices(*gp, s.state != GroupState::Released) : "";
    switch (s.state) {
    case GroupState::Bound:
    case GroupState::Released:
        spdlog::info("group {}: {} ({})", group, to_string(s.state), devices);
        break;
    case GroupState::Pending:
        spdlog::info("group {}: pending: {}", group, s.message);
        break;
    case GroupState::Refused:
        spdlog::warn("group {}: refused {} (blockers {}): {}", group, to_string(s.reason),
                     addresses(s.blockers), s.message);
        break;
    case GroupState::Failed:
        spdlog::error("group {}: failed{}{}: {} ({})", group, s.reason == Reason::None ? "" : " ",
                      to_string(s.reason), s.message, devices);
        break;
    }
    status_[group] = std::move(s);
}

const PfStatus* StatusStore::pf_status(const PciAddress& pf) const {
    auto it = pf_status_.find(pf);
    return it == pf_status_.end() ? nullptr : &it->second;
}

void StatusStore::set_pf_status(const PciAddress& pf, PfStatus s) {
    auto it = pf_status_.find(pf);
    if (it != pf_status_.end() && it->second == s)
        return;
    const std::string a = pf.str();
    switch (s.state) {
    case PfState::Ready: spdlog::info("PF {}: ready", a); break;
    case PfState::Pending: spdlog::info("PF {}: pending: {}", a, s.message); break;
    case PfState::Refused:
        spdlog::warn("PF {}: refused {} (blockers {}): {}", a, to_string(s.reason),
                     addresses(s.blockers), s.message);
        break;
    case PfState::Failed:
        spdlog::error("PF {}: failed {}: {}", a, to_string(s.reason), s.message);
        break;
    }
    pf_status_[pf] = std::move(s);
}

void StatusStore::update_pfs(InventoryChange* change) {
    std::map<PciAddress, PfInfo> now;
    for (const auto& [a, plan] : in_.host.pf_plans()) {
        auto st = pf_status_.find(a);
        if (st == pf_status_.end())
            continue;  // not decided yet
        PfInfo& info = now[a];
        info.address = a;
        info.total_vfs = plan.total_vfs;
        info.num_vfs = plan.num_vfs;
        info.wanted_vfs = plan.wanted_vfs;
        info.state = st->second.state;
        info.reason = st->second.reason;
        info.blockers = st->second.blockers;
    }
    // A PF no entry governs any more (or gone) has its object and status dropped.
    std::erase_if(pf_status_, [&](const auto& kv) { return !in_.host.pf_plan(kv.first); });
    for (const auto& [a, info] : inventory_.pfs)
        if (!now.count(a))
            change->pfs.insert(a);
    for (const auto& [a, info] : now) {
        auto old = inventory_.pfs.find(a);
        if (old == inventory_.pfs.end() || !(old->second == info))
            change->pfs.insert(a);
    }
    inventory_.pfs = std::move(now);
}

namespace {

void log_mdev(const MdevInfo& m) {
    // One line per state change, at info: a refusal's or a failure's why is the pair's own
    // warning line (service/mdev_ops.cpp), with the numbers.
    std::string why = m.reason == Reason::None ? "" : std::string(" ") + to_string(m.reason);
    if (!m.blockers.empty())
        why += " (" + join(m.blockers, ", ") + ")";
    spdlog::info("mdev {} ({} on {}): {}{}{}", m.uuid, m.type, m.parent, to_string(m.state), why,
                 m.group ? ", /dev/vfio/" + std::to_string(*m.group) : "");
}

}  // namespace

void StatusStore::set_mdevs(const std::function<bool(const MdevInfo&)>& replaced,
                            std::vector<MdevInfo> now) {
    std::map<std::string, MdevInfo> next;
    for (auto& m : now) {
        stamp_health(&m);
        next.insert_or_assign(m.uuid, std::move(m));
    }
    auto& published = inventory_.mdevs;
    // Straight into the inventory, each change noted for the next publication: an mdev's
    // record is what its operation read, and nothing else derives it.
    std::erase_if(published, [&](const auto& kv) {
        if (next.count(kv.first) || !replaced(kv.second))
            return false;
        spdlog::info("mdev {} ({} on {}): gone", kv.first, kv.second.type, kv.second.parent);
        unsent_.mdevs.insert(kv.first);
        return true;
    });
    for (auto& [uuid, m] : next) {
        auto old = published.find(uuid);
        if (old != published.end() && old->second == m)
            continue;
        if (old == published.end() || old->second.state != m.state ||
            old->second.reason != m.reason || old->second.group != m.group)
            log_mdev(m);
        unsent_.mdevs.insert(uuid);
        published.insert_or_assign(uuid, std::move(m));
    }
}

void StatusStore::stamp_health(MdevInfo* m) const {
    if (auto parent = PciAddress::parse(m->parent)) {
        m->health = in_.health.health(*parent);
        m->health_reason = in_.health.reason(*parent);
    } else {
        m->health = Health::Unknown;
        m->health_reason = "no-aer: the parent is not a PCI function";
    }
}

void StatusStore::health_changed(const PciAddress& fn) {
    if (auto g = in_.host.group_of(fn))
        dirty_.groups.insert(*g);
    const std::string name = fn.str();
    for (auto& [uuid, m] : inventory_.mdevs) {
        if (m.parent != name)
            continue;
        stamp_health(&m);
        unsent_.mdevs.insert(uuid);
    }
}

bool StatusStore::is_mdev_parent(const PciAddress& fn) const {
    const std::string name = fn.str();
    return std::any_of(inventory_.mdevs.begin(), inventory_.mdevs.end(),
                       [&](const auto& kv) { return kv.second.parent == name; });
}

void StatusStore::forget_group(unsigned group) {
    dirty_.groups.insert(group);
    if (status_.erase(group))
        spdlog::info("group {}: gone (no allowlisted function left)", group);
}

// The published view of one group (nullopt: not published): its object and its functions'.
std::optional<std::pair<GroupInfo, std::vector<DeviceInfo>>> StatusStore::group_view(unsigned id) const {
    const GroupPlan* gp = in_.host.group_plan(id);
    auto st = status_.find(id);
    if (!gp || st == status_.end())
        return std::nullopt;
    std::pair<GroupInfo, std::vector<DeviceInfo>> out;
    GroupInfo& gi = out.first;
    gi.id = id;
    gi.state = st->second.state;
    gi.reason = st->second.reason;
    gi.blockers = st->second.blockers;
    const auto orig = in_.journal.originals(id);
    for (const auto& d : gp->devices) {
        gi.devices.push_back(d.address);
        DeviceInfo di;
        static_cast<DeviceRecord&>(di) = d;  // the planner's record as it is, its writes aside
        auto o = orig.find(d.address);
        if (o != orig.end())
            di.original_driver = o->second;
        else if (!d.target || d.driver != *d.target)
            di.original_driver = d.driver;  // still on it: the host driver is the original
        di.group = id;
        di.health = in_.health.health(d.address);
        di.health_reason = in_.health.reason(d.address);
        gi.health = worst(gi.health, di.health);
        out.second.push_back(std::move(di));
    }
    return out;
}

void StatusStore::publish() {
    try {
        publish_changes();
    } catch (const std::exception& e) {
        // What the consumers were told is unknown: the groups being published are marked
        // failed, and everything not acknowledged goes again.
        spdlog::error("publishing: {}; the groups it was publishing are marked failed", e.what());
        for (unsigned g : unsent_.groups)
            if (in_.host.group_plan(g) && status_.count(g))
                set_status(g, {GroupState::Failed, Reason::None,
                               std::string("internal error: publishing: ") + e.what(), {}});
        try {
            publish_changes();
        } catch (const std::exception& again) {
            spdlog::error("publishing again: {}", again.what());
        }
    }
    send_replies();
}

void StatusStore::answer(Reply reply, OpResult r) {
    if (reply)
        replies_.emplace_back(std::move(reply), std::move(r));
}

void StatusStore::send_replies() {
    std::vector<std::pair<Reply, OpResult>> replies;
    replies.swap(replies_);
    for (auto& [reply, r] : replies) {
        // One reply that cannot be sent (a caller gone, no memory) costs the others nothing.
        try {
            reply(r);
        } catch (const std::exception& e) {
            spdlog::error("answering a request: {}", e.what());
        }
    }
}

void StatusStore::update_group(unsigned g, InventoryChange* change) {
    auto view = group_view(g);
    auto old = inventory_.groups.find(g);
    if (old != inventory_.groups.end() && view && old->second == view->first &&
        std::all_of(view->second.begin(), view->second.end(), [&](const DeviceInfo& d) {
            auto it = inventory_.devices.find(d.address);
            return it != inventory_.devices.end() && it->second == d;
        }))
        return;
    if (old == inventory_.groups.end() && !view)
        return;
    change->groups.insert(g);
    if (old != inventory_.groups.end()) {
        for (const auto& a : old->second.devices) {
            change->devices.insert(a);
            if (auto d = inventory_.devices.find(a);
                d != inventory_.devices.end() && d->second.group == g)
                inventory_.devices.erase(d);
        }
        inventory_.groups.erase(old);
    }
    if (!view)
        return;
    inventory_.groups.emplace(g, std::move(view->first));
    for (auto& d : view->second) {
        change->devices.insert(d.address);
        inventory_.devices.insert_or_assign(d.address, std::move(d));
    }
}

void StatusStore::publish_changes() {
    // Only the groups that may have changed are rebuilt (each costs a journal read), and only
    // they go to the consumers: an event about one group costs the same on a host of four
    // groups or four thousand.
    std::set<unsigned> groups;
    if (dirty_.all) {
        for (const auto& [g, gp] : in_.host.plans())
            groups.insert(g);
        for (const auto& [g, gi] : inventory_.groups)
            groups.insert(g);
    } else {
        groups = dirty_.groups;
    }
    InventoryChange change;
    std::string m = to_string(mode_());
    const bool iommu = in_.host.snapshot().topology.iommu_enabled;
    if (inventory_.mode != m || inventory_.iommu != iommu) {
        inventory_.mode = std::move(m);
        inventory_.iommu = iommu;
        change.manager = true;
    }
    for (unsigned g : groups)
        update_group(g, &change);
    update_pfs(&change);
    dirty_.groups.clear();
    dirty_.all = false;
    // Until on_change_ returns, consumers may hold a partial view: kept, and sent again.
    unsent_.merge(std::move(change));
    if (unsent_.empty())
        return;
    if (on_change_)
        on_change_(inventory_, unsent_);
    unsent_ = {};
}

}  // namespace vfiod
