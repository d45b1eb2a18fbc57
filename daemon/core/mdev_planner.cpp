// The planner's mediated-device part (DESIGN §12): which mdevs to create and remove. Pure, as
// the group and PF planners are.
#include <algorithm>
#include <set>
#include <tuple>

#include "plan.hpp"

namespace vfiod {

namespace {

// Where an mdev goes in the plan's order: foreign last, then parent, the type's config order
// (types no entry names after those, by name), index.
struct Placed {
    std::tuple<bool, std::string, size_t, std::string, unsigned> key;
    MdevPlan plan;
};

// The state one planning pass keeps: the host's mdevs by parent, the ones already placed, and
// the process's table of vfiod's own UUIDs (kept between passes: a pair's never change).
struct Pass {
    const MdevHost& host;
    const HostUse& use;
    std::map<std::string, std::vector<const std::string*>> by_parent;  // UUIDs, sorted
    std::set<std::string> placed;
    OwnMdevUuids& own;
    std::vector<Placed> out;
};

MdevPlan record(const std::string& uuid, const std::string& parent, const std::string& type,
                const MdevType* t, const std::string& resource_name) {
    MdevPlan p;
    p.uuid = uuid;
    p.parent = parent;
    p.type = type;
    p.type_name = t && !t->name.empty() ? t->name : type;
    p.resource_name = resource_name;
    return p;
}

void refuse(MdevPlan& p, Reason r, std::string why) {
    p.action = MdevAction::Refuse;
    p.reason = r;
    p.details.push_back(std::move(why));
}

// A removal of vfiod's own mdev, unless a user holds it open.
MdevPlan removal(Pass& s, const std::string& uuid, const Mdev& m, MdevPlan p, std::string why) {
    p.group = m.iommu_group;
    auto held = s.use.mdevs.find(uuid);
    if (held != s.use.mdevs.end() && !held->second.empty()) {
        p.blockers = held->second;
        refuse(p, Reason::InUseMdev, why + ", but it is in use: " + held->second.front());
        return p;
    }
    p.action = MdevAction::Remove;
    p.details.push_back(why);
    return p;
}

// The reason no mdev of the pair can be made, or None.
Reason pair_refusal(const MdevParent* parent, const MdevType* type, const Topology& topo,
                    const Config& config, const MdevEntry& e, const std::string& name,
                    std::string* why) {
    if (!parent) {
        *why = "the parent " + name + " is not under /sys/class/mdev_bus (its driver is not "
               "loaded, or it is no mdev parent)";
        return Reason::NoParent;
    }
    if (const PciFunction* fn = parent->address ? topo.find(*parent->address) : nullptr;
        fn && protected_by(config, *fn)) {
        *why = name + " matches a [[protect]] entry: it gets no mdevs";
        return Reason::Protected;
    }
    if (!type) {
        *why = name + " has no type " + e.type + " (the [[mdev]] entry at " + e.origin.str() +
               "); see its mdev_supported_types";
        return Reason::UnknownType;
    }
    return Reason::None;
}

// One (parent, type) pair: the wanted mdevs, all or nothing, and vfiod's own above count.
void plan_pair(Pass& s, const Topology& topo, const Config& config, const MdevEntry& e,
               size_t order, const std::string& name) {
    auto pit = s.host.parents.find(name);
    const MdevParent* parent = pit == s.host.parents.end() ? nullptr : &pit->second;
    const MdevType* type = nullptr;
    if (parent)
        if (auto t = parent->types.find(e.type); t != parent->types.end())
            type = &t->second;
    std::string why;
    const Reason refused = pair_refusal(parent, type, topo, config, e, name, &why);
    std::vector<MdevPlan> wanted;
    unsigned missing = 0;
    for (unsigned i = 0; i < e.count; ++i) {
        MdevPlan p = record(mdev_uuid(name, e.type, i), name, e.type, type, e.resource_name);
        auto m = s.host.mdevs.find(p.uuid);
        if (m != s.host.mdevs.end() && m->second.parent == name && refused == Reason::None) {
            p.action = MdevAction::Ready;
            p.group = m->second.iommu_group;
        } else if (refused != Reason::None) {
            refuse(p, refused, why);
        } else {
            p.action = MdevAction::Create;
            ++missing;
        }
        wanted.push_back(std::move(p));
    }
    const unsigned available = type && type->available ? *type->available : 0;
    for (unsigned i = 0; i < wanted.size(); ++i) {
        MdevPlan& p = wanted[i];
        if (p.action == MdevAction::Create && missing > available)
            refuse(p, Reason::MdevUnavailable,
                   name + " type " + e.type + ": " + std::to_string(missing) + " to create, " +
                       (type && type->available ? std::to_string(available) : "no readable") +
                       " available_instances; none of them is created");
        s.placed.insert(p.uuid);
        s.out.push_back({{false, name, order, "", i}, std::move(p)});
    }
    // vfiod's own of this type at or above count.
    for (const std::string* uuid : s.by_parent[name]) {
        const Mdev& m = s.host.mdevs.at(*uuid);
        auto index = m.type == e.type ? s.own.index_of(name, e.type, *uuid) : std::nullopt;
        if (!index || *index < e.count || !s.placed.insert(*uuid).second)
            continue;
        s.out.push_back({{false, name, order, "", *index},
                         removal(s, *uuid, m, record(*uuid, name, e.type, type, e.resource_name),
                                 "index " + std::to_string(*index) + " is at or above count " +
                                     std::to_string(e.count))});
    }
}

// The parents an entry names on this host: the one it names, or those its selector matches.
std::vector<std::string> parents_of(const MdevEntry& e, const MdevHost& host,
                                    const Topology& topo) {
    if (!e.selector)
        return {e.parent};
    std::vector<std::string> out;
    for (const auto& [name, p] : host.parents)
        if (const PciFunction* fn = p.address ? topo.find(*p.address) : nullptr;
            fn && e.selector->matches(fn->vendor, fn->device))
            out.push_back(name);
    return out;
}

// The type of vfiod's own mdev that no pair placed, and its index: its mdev_type, or, before the
// probe made that link, whichever type of its parent its UUID belongs to.
std::optional<std::pair<std::string, unsigned>> own_of(Pass& s, const std::string& uuid,
                                                       const Mdev& m) {
    auto p = s.host.parents.find(m.parent);
    std::vector<std::string> types;
    if (!m.type.empty())
        types.push_back(m.type);
    else if (p != s.host.parents.end())
        for (const auto& [t, _] : p->second.types)
            types.push_back(t);
    for (const auto& t : types)
        if (auto i = s.own.index_of(m.parent, t, uuid))
            return std::make_pair(t, *i);
    return std::nullopt;
}

// The mdevs no pair placed: vfiod's own on a governed parent go (their type is named no more);
// the rest are foreign.
void plan_rest(Pass& s, const std::set<std::string>& governed, size_t entries) {
    for (const auto& [uuid, m] : s.host.mdevs) {
        if (s.placed.count(uuid))
            continue;
        auto pit = s.host.parents.find(m.parent);
        const MdevType* t = nullptr;
        if (pit != s.host.parents.end())
            if (auto it = pit->second.types.find(m.type); it != pit->second.types.end())
                t = &it->second;
        auto own = governed.count(m.parent) ? own_of(s, uuid, m) : std::nullopt;
        if (own) {
            s.out.push_back({{false, m.parent, entries, own->first, own->second},
                             removal(s, uuid, m, record(uuid, m.parent, own->first, t, ""),
                                     "no [[mdev]] entry names type " + own->first + " on " +
                                         m.parent + " any more")});
            continue;
        }
        MdevPlan p = record(uuid, m.parent, m.type, t, "");
        p.action = MdevAction::Foreign;
        p.group = m.iommu_group;
        s.out.push_back({{true, m.parent, 0, uuid, 0}, std::move(p)});
    }
}

}  // namespace

std::vector<MdevWrite> MdevPlan::writes() const {
    switch (action) {
    case MdevAction::Create: return {{mdev_paths::create_file(parent, type), uuid}};
    case MdevAction::Remove: return {{mdev_paths::remove_file(uuid), "1"}};
    case MdevAction::Ready:
    case MdevAction::Refuse:
    case MdevAction::Foreign: break;
    }
    return {};
}

std::optional<std::vector<MdevPlan>> plan_mdevs(const MdevHost& host, const Topology& topo,
                                                const HostUse& use, const Config& config,
                                                std::vector<std::string>* warnings) {
    if (config.mdevs.empty())
        return std::nullopt;
    Pass s{host, use, {}, {}, OwnMdevUuids::shared(), {}};
    for (const auto& [uuid, m] : host.mdevs)
        s.by_parent[m.parent].push_back(&uuid);
    std::map<std::pair<std::string, std::string>, const MdevEntry*> pairs;
    std::set<std::string> governed;
    for (size_t k = 0; k < config.mdevs.size(); ++k) {
        const MdevEntry& e = config.mdevs[k];
        for (const std::string& name : parents_of(e, host, topo)) {
            auto [it, fresh] = pairs.try_emplace({name, e.type}, &e);
            if (!fresh) {
                if (warnings)
                    warnings->push_back(e.origin.str() + ": [[mdev]] names type " + e.type +
                                        " on " + name + ", as the entry at " +
                                        it->second->origin.str() + " does; the first wins");
                continue;
            }
            governed.insert(name);
            plan_pair(s, topo, config, e, k, name);
        }
    }
    plan_rest(s, governed, config.mdevs.size());
    std::stable_sort(s.out.begin(), s.out.end(),
                     [](const Placed& a, const Placed& b) { return a.key < b.key; });
    std::vector<MdevPlan> out;
    out.reserve(s.out.size());
    for (auto& p : s.out)
        out.push_back(std::move(p.plan));
    return out;
}

}  // namespace vfiod
