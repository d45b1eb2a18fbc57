#include "service/mdev_ops.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "io/mdev_reader.hpp"
#include "io/proc_fds.hpp"
#include "io/vfio_use.hpp"

namespace vfiod {

namespace {

// What an mdev's plan record publishes before anything is written: its state, and its group
// while its /dev/vfio/<N> is there.
MdevInfo record_of(const MdevPlan& p, const MdevHost& host, const Topology& topo,
                   const HostFs& fs) {
    MdevInfo m{{}, p.uuid, p.parent, p.type, p.type_name, p.resource_name, std::nullopt, -1,
               planned_state(p.action, p.reason), p.reason, p.blockers};
    auto parent = host.parents.find(p.parent);
    if (parent != host.parents.end() && parent->second.address)
        if (const PciFunction* fn = topo.find(*parent->second.address))
            m.numa_node = fn->numa_node;
    auto mdev = host.mdevs.find(p.uuid);
    if (mdev != host.mdevs.end() && mdev->second.iommu_group &&
        vfio_node_exists(fs, *mdev->second.iommu_group))
        m.group = mdev->second.iommu_group;
    // Ready once bound to its vfio mdev driver with its node: a probe not yet done, or no vfio
    // mdev driver at all, leaves it pending.
    if (m.state == MdevState::Ready && (!m.group || mdev->second.driver.empty()))
        m.state = MdevState::Pending;
    return m;
}

}  // namespace

std::vector<MdevInfo> mdev_records(const std::vector<MdevPlan>& plan, const MdevHost& host,
                                   const Topology& topo, const HostFs& fs) {
    std::vector<MdevInfo> out;
    out.reserve(plan.size());
    for (const MdevPlan& p : plan)
        out.push_back(record_of(p, host, topo, fs));
    return out;
}

std::vector<MdevPlan> MdevOp::plan_pair(ServiceParts& s, const MdevHost& host,
                                        const HostUse& use) const {
    auto all = plan_mdevs(host, s.host.snapshot().topology, use, s.host.config())
                   .value_or(std::vector<MdevPlan>{});
    std::vector<MdevPlan> mine;  // the pair's, and the parent's foreign ones
    for (auto& p : all)
        if (p.parent == parent_ && (p.type == type_ || p.action == MdevAction::Foreign))
            mine.push_back(std::move(p));
    return mine;
}

std::vector<MdevPlan> MdevOp::read_and_plan(ServiceParts& s, bool with_use) {
    const HostFs& fs = s.host.view();  // never s.fs: a parent's write may be blocked
    MdevHost host = read_mdev_parents(fs, {parent_}, nullptr);
    std::vector<MdevPlan> mine = plan_pair(s, host, {});
    // Who holds mdevs open matters only to the pair's removes: proc/*/fd is walked for those,
    // and the pair planned again from the same read of its parent.
    auto removes = [](const MdevPlan& p) { return p.action == MdevAction::Remove; };
    if (with_use && std::ranges::any_of(mine, removes)) {
        HostUse use;
        read_mdev_use(fs, host, scan_open_nodes(fs), &use);
        mine = plan_pair(s, host, use);
    }
    published_ = mdev_records(mine, host, s.host.snapshot().topology, fs);
    std::erase_if(mine, [](const MdevPlan& p) { return p.action == MdevAction::Foreign; });
    return mine;
}

void MdevOp::publish(ServiceParts& s) const {
    s.store.set_mdevs(
        [&](const MdevInfo& m) {
            return m.parent == parent_ && (m.type == type_ || m.state == MdevState::Foreign);
        },
        published_);
}

std::optional<OpResult> MdevOp::prepare(ServiceParts& s) {
    plan_.clear();
    if (s.mdev_writer.stuck_names().count(parent_))
        return OpResult::error(OpResult::Code::Refused,
                               std::string(to_string(Reason::Stuck)) + ": " + parent_ +
                                   ": an earlier mdev write on it is still blocked");
    plan_ = read_and_plan(s, true);
    publish(s);
    const bool writes = std::ranges::any_of(plan_, [](const MdevPlan& p) {
        return !p.writes().empty();
    });
    if (writes && mode_ == Mode::Enforce)
        return std::nullopt;
    for (const MdevPlan& p : plan_)
        if (p.action == MdevAction::Refuse) {
            std::string why = std::string(to_string(p.reason)) + ": " + p.uuid + ": " +
                              (p.details.empty() ? "" : p.details.front());
            spdlog::warn("mdevs {} on {}: refused: {}", type_, parent_, why);
            return OpResult::error(OpResult::Code::Refused, std::move(why));
        }
    return OpResult{};
}

std::set<std::string> MdevOp::fenced_mdevs() const {
    std::set<std::string> names{parent_};
    for (const MdevPlan& p : plan_)
        if (p.action == MdevAction::Remove)
            names.insert(p.uuid);
    return names;
}

void MdevOp::run(ServiceParts& s) { results_ = s.mdev_writer.apply(plan_); }

OpResult MdevOp::complete(ServiceParts& s) {
    OpResult out;
    // What the writes left, read again (the parent is no longer fenced, unless a write of it
    // is stuck: then the records stay as published before the writes).
    if (!s.mdev_writer.stuck_names().count(parent_))
        read_and_plan(s, false);
    for (const MdevResult& r : results_) {
        const char* did = r.action == MdevAction::Create ? "created" : "removed";
        if (r.reason == Reason::None) {
            spdlog::info("mdev {} ({} on {}): {}", r.uuid, type_, parent_, did);
            continue;
        }
        spdlog::warn("mdev {} ({} on {}): not {}: {}: {}", r.uuid, type_, parent_, did,
                     to_string(r.reason), r.message);
        for (MdevInfo& m : published_)
            if (m.uuid == r.uuid && m.state != MdevState::Foreign) {
                m.state = r.reason == Reason::InUseMdev ? MdevState::Refused : MdevState::Failed;
                m.reason = r.reason;
            }
        if (out.ok())
            out = OpResult::error(OpResult::Code::Failed, std::string(to_string(r.reason)) +
                                                              ": " + r.uuid + ": " + r.message);
    }
    publish(s);
    return out;
}

}  // namespace vfiod
