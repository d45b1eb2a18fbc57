#include "service/host_model.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>

#include "io/fenced_host_fs.hpp"
#include "io/host_use.hpp"
#include "io/topology_reader.hpp"

namespace vfiod {

namespace {

// What decides a function's fate in a config: its first matching [[device]] entry and whether a
// [[protect]] entry matches. Origins are left out: moving an entry to another line changes
// nothing about the group.
std::string entry_signature(const Config& c, const PciFunction& fn) {
    std::string sig = protected_by(c, fn) ? "protected;" : "";
    if (const DeviceEntry* e = governing_entry(c, fn))
        sig += (e->selector ? e->selector->str() : "") + "|" +
               (e->address ? e->address->str() : "") + "|" + e->driver + "|" + e->resource_name +
               "|" + (e->early ? "early" : "");
    return sig;
}

}  // namespace

HostModel::HostModel(HostFs& fs) : view_(std::make_unique<FencedHostFs>(fs)) {}

HostModel::~HostModel() = default;

Config HostModel::replace_config(Config c) {
    Config before = std::move(config_);
    config_ = std::move(c);
    return before;
}

void HostModel::replanned(std::optional<unsigned> group) const {
    if (on_replan_)
        on_replan_(group);
}

void HostModel::reread() {
    // The functions being written keep their last record: their files are not read.
    snapshot_ = read_snapshot(*view_, &view_->fenced(), &snapshot_);
    log_host_warnings(snapshot_.warnings, true);
    strays_.clear();
    vfs_.clear();
    for (const auto& [a, fn] : snapshot_.topology.functions) {
        if (fn.iommu_group && !listed_in(a, *fn.iommu_group))
            strays_[*fn.iommu_group].insert(a);
        if (fn.physfn)
            add_vf(*fn.physfn, a);
    }
    plans_.clear();
    for (auto& gp : make_plan(snapshot_.topology, snapshot_.use, config_).groups)
        if (gp.group)
            plans_.emplace(*gp.group, std::move(gp));
    replan_pfs();
    replanned(std::nullopt);
}

// Every PF, from the index of VFs reread() has just built: the same planning as a refresh's.
void HostModel::replan_pfs() {
    pf_plans_.clear();
    std::set<PciAddress> pfs;
    for (const auto& [a, fn] : snapshot_.topology.functions)
        if (fn.sriov_totalvfs)
            pfs.insert(a);
    replan_pfs(pfs);
}

// The PFs whose plan the functions `read` can change: a PF among them (or one that went), and
// the PF of a VF among them. Each is planned from its own VFs, so a burst costs what it names.
void HostModel::replan_pfs(const std::set<PciAddress>& read) {
    if (config_.sriovs.empty())
        return;
    std::set<PciAddress> pfs;
    for (const auto& a : read) {
        const PciFunction* fn = snapshot_.topology.find(a);
        if (fn && fn->physfn) {
            add_vf(*fn->physfn, a);
            pfs.insert(*fn->physfn);
        } else {
            pfs.insert(a);
        }
    }
    for (const auto& pf : pfs) {
        auto v = vfs_.find(pf);
        if (v != vfs_.end()) {
            // Those that went or moved to another PF since: the index holds only what it names.
            std::erase_if(v->second, [&](const PciAddress& a) {
                const PciFunction* fn = snapshot_.topology.find(a);
                return !fn || fn->physfn != pf;
            });
        }
        static const std::vector<PciAddress> kNone;
        auto plan = plan_one_pf(snapshot_.topology, snapshot_.use, config_, pf,
                                v == vfs_.end() ? kNone : v->second);
        if (plan)
            pf_plans_.insert_or_assign(pf, std::move(*plan));
        else
            pf_plans_.erase(pf);
        if (v != vfs_.end() && v->second.empty())
            vfs_.erase(v);
    }
}

const PfPlan* HostModel::pf_plan(const PciAddress& pf) const {
    auto it = pf_plans_.find(pf);
    return it == pf_plans_.end() ? nullptr : &it->second;
}

std::set<PciAddress> HostModel::governed_pfs() const {
    std::set<PciAddress> out;
    for (const auto& [a, plan] : pf_plans_)
        out.insert(a);
    return out;
}

std::set<PciAddress> HostModel::pfs_concerned(const std::set<PciAddress>& touched) const {
    std::set<PciAddress> out;
    for (const auto& a : touched) {
        if (pf_plans_.count(a))
            out.insert(a);
        const PciFunction* fn = snapshot_.topology.find(a);
        if (fn && fn->physfn && pf_plans_.count(*fn->physfn))
            out.insert(*fn->physfn);
    }
    return out;
}

std::set<PciAddress> HostModel::vfs_of(const PciAddress& pf) const {
    std::set<PciAddress> out;
    if (auto v = vfs_.find(pf); v != vfs_.end())
        for (const auto& a : v->second)
            if (const PciFunction* fn = snapshot_.topology.find(a); fn && fn->physfn == pf)
                out.insert(a);
    return out;
}

void HostModel::log_host_warnings(const std::vector<std::string>& warnings, bool whole_host) {
    // The readers bound their own output (BoundedWarnings), so a whole-host read brings a few
    // dozen at most; a burst's partial read only adds to what is known.
    std::set<std::string> seen(warnings.begin(), warnings.end());
    for (const auto& w : warnings)
        if (!host_warned_.count(w))
            spdlog::warn("{}", w);
    if (whole_host)
        host_warned_ = std::move(seen);
    else if (host_warned_.size() < 1024)
        host_warned_.merge(seen);
}

// What changed with `touched`, and nothing else: those functions, their groups' members, the
// host-use facts about them, their groups' plans. Returns the groups re-planned. Equal to a full
// reread() as long as the kernel names every function whose state changes (the property test in
// tests/unit/test_incremental.cpp holds it to that).
std::set<unsigned> HostModel::refresh(std::set<PciAddress> touched) {
    Topology& topo = snapshot_.topology;
    const bool iommu_before = topo.iommu_enabled;
    // A VF that goes takes its physfn with it: its PF is planned again all the same.
    std::set<PciAddress> pfs_before;
    for (const auto& a : touched)
        if (const PciFunction* fn = topo.find(a); fn && fn->physfn)
            pfs_before.insert(*fn->physfn);
    std::vector<std::string> warnings;
    std::set<unsigned> groups =
        refresh_topology(*view_, &topo, touched, &warnings, &view_->fenced());
    if (topo.iommu_enabled != iommu_before) {
        // Every decision hangs on it: read it all again.
        for (const auto& [g, gp] : plans_)
            groups.insert(g);
        reread();
        for (const auto& [g, gp] : plans_)
            groups.insert(g);
        return groups;
    }
    std::set<PciAddress> only = members(groups);
    only.merge(touched);
    update_strays(groups, only);
    // What the host uses a function being written for is kept from its last reading, as its
    // attributes are (read_snapshot).
    std::set<PciAddress> unfenced;
    std::set_difference(only.begin(), only.end(), view_->fenced().begin(), view_->fenced().end(),
                        std::inserter(unfenced, unfenced.end()));
    merge_host_use(&snapshot_.use, read_host_use(*view_, topo, &warnings, unfenced, &tables_),
                   unfenced);
    log_host_warnings(warnings, false);
    static const std::set<PciAddress> kNone;
    for (unsigned g : groups) {
        // The group's listed members and its strays are every function whose link names it.
        auto c = strays_.find(g);
        auto gp = plan_one_group(topo, snapshot_.use, config_, g,
                                 c == strays_.end() ? kNone : c->second);
        if (gp)
            plans_.insert_or_assign(g, std::move(*gp));
        else
            plans_.erase(g);
        replanned(g);
    }
    pfs_before.insert(only.begin(), only.end());
    replan_pfs(pfs_before);
    return groups;
}

bool HostModel::listed_in(const PciAddress& a, unsigned group) const {
    auto it = snapshot_.topology.groups.find(group);
    return it != snapshot_.topology.groups.end() &&
           std::binary_search(it->second.begin(), it->second.end(), a);
}

void HostModel::add_vf(const PciAddress& pf, const PciAddress& vf) {
    auto& v = vfs_[pf];
    auto at = std::lower_bound(v.begin(), v.end(), vf);
    if (at == v.end() || *at != vf)
        v.insert(at, vf);
}

// A re-planned group's strays are those it had that still name it unlisted, and the functions
// read now that do. Each function is looked at once, whatever the number of groups: a coldplug
// burst names thousands of VFs, each in a group of its own.
void HostModel::update_strays(const std::set<unsigned>& groups, const std::set<PciAddress>& read) {
    const Topology& topo = snapshot_.topology;
    for (unsigned g : groups) {
        auto c = strays_.find(g);
        if (c == strays_.end())
            continue;
        std::erase_if(c->second, [&](const PciAddress& a) {
            const PciFunction* fn = topo.find(a);
            return !fn || fn->iommu_group != g || listed_in(a, g);
        });
        if (c->second.empty())
            strays_.erase(c);
    }
    for (const auto& a : read)
        if (const PciFunction* fn = topo.find(a); fn && fn->iommu_group &&
                                                  groups.count(*fn->iommu_group) &&
                                                  !listed_in(a, *fn->iommu_group))
            strays_[*fn->iommu_group].insert(a);
}

std::set<PciAddress> HostModel::members(const std::set<unsigned>& groups) const {
    std::set<PciAddress> out;
    for (unsigned g : groups)
        if (auto it = snapshot_.topology.groups.find(g); it != snapshot_.topology.groups.end())
            out.insert(it->second.begin(), it->second.end());
    return out;
}

const GroupPlan* HostModel::group_plan(unsigned group) const {
    auto it = plans_.find(group);
    return it == plans_.end() ? nullptr : &it->second;
}

std::optional<unsigned> HostModel::group_of(const PciAddress& a) const {
    const PciFunction* fn = snapshot_.topology.find(a);
    return fn ? fn->iommu_group : std::nullopt;
}

Plan HostModel::whole_plan() const { return make_plan(snapshot_.topology, snapshot_.use, config_); }

std::set<unsigned> HostModel::groups_whose_entries_changed(const Config& before) const {
    std::set<unsigned> changed;
    for (const auto& [g, members] : snapshot_.topology.groups)
        for (const auto& a : members)
            if (const PciFunction* fn = snapshot_.topology.find(a))
                if (entry_signature(before, *fn) != entry_signature(config_, *fn))
                    changed.insert(g);
    return changed;
}

void HostModel::fence_group(unsigned group, const std::set<PciAddress>& functions) {
    writing_[group].insert(functions.begin(), functions.end());
}

void HostModel::unfence_group(unsigned group) { writing_.erase(group); }

void HostModel::fence_mdevs(const std::set<std::string>& names) { view_->fence_mdev_names(names); }

const HostFs& HostModel::view() const { return *view_; }

bool HostModel::fenced(const PciAddress& a) const { return view_->fenced().count(a) != 0; }

void HostModel::refresh_fences(const std::vector<PciAddress>& stuck) {
    std::set<PciAddress> keep;
    for (const auto& [g, fns] : writing_)
        keep.insert(fns.begin(), fns.end());
    keep.insert(stuck.begin(), stuck.end());
    std::set<PciAddress> fenced = view_->fenced();
    for (const auto& a : fenced)
        if (!keep.count(a))
            view_->unfence(a);
    for (const auto& a : keep)
        view_->fence(a);
}

}  // namespace vfiod
