#include "model.hpp"

#include <algorithm>
#include <set>

#include "core/pci_paths.hpp"
#include "core/state.hpp"
#include "core/strings.hpp"

namespace vfiod::plugin {

const PluginDevice* Snapshot::find(const std::string& resource, const std::string& id) const {
    auto r = resources.find(resource);
    if (r == resources.end())
        return nullptr;
    for (const auto& d : r->second)
        if (d.address.str() == id)
            return &d;
    return nullptr;
}

namespace {

// Names that would share a socket or an environment variable: the kubelet would list one's
// devices under the other's name and Allocate would hand them out, so neither is served.
void refuse_collisions(Snapshot* s) {
    std::map<std::string, const std::string*> sockets, envs;
    for (const auto& [name, devices] : s->resources)
        for (auto* seen : {&sockets, &envs}) {
            auto key = seen == &sockets ? plugin_socket_name(name) : plugin_env_name(name);
            auto [it, fresh] = seen->try_emplace(std::move(key), &name);
            if (fresh)
                continue;
            std::string why = resource_name_collision(*it->second, name);
            s->refused.try_emplace(*it->second, "collides with " + name + ": " + why);
            s->refused.try_emplace(name, "collides with " + *it->second + ": " + why);
        }
    for (const auto& [name, why] : s->refused)
        s->resources.erase(name);
}

}  // namespace

Snapshot make_snapshot(const client::DaemonView& view,
                       const std::function<bool(unsigned group)>& vfio_exists) {
    Snapshot s;
    for (const auto& g : view.groups) {
        if (!g.plan.group)
            continue;
        unsigned id = *g.plan.group;
        bool usable = g.state == to_string(GroupState::Bound) && vfio_exists(id);
        auto& functions = s.group_functions[id];
        for (const auto& d : g.plan.devices) {
            if (d.role == Role::Bridge)
                continue;
            functions.push_back(d.address);
            if (!d.resource_name || d.resource_name->empty())
                continue;
            auto numa = g.numa_nodes.find(d.address);
            s.resources[*d.resource_name].push_back(
                {d.address, id, numa == g.numa_nodes.end() ? -1 : numa->second, usable});
        }
    }
    for (auto& [name, devices] : s.resources)
        std::sort(devices.begin(), devices.end(),
                  [](const PluginDevice& a, const PluginDevice& b) { return a.address < b.address; });
    refuse_collisions(&s);
    return s;
}

namespace {

// The group of each requested ID that is a known function (unknown ones are the caller's error).
std::set<unsigned> groups_of(const Snapshot& snap,
                             const std::vector<std::vector<std::string>>& requests) {
    std::set<unsigned> groups;
    for (const auto& ids : requests)
        for (const auto& id : ids)
            for (const auto& [name, devices] : snap.resources)
                for (const auto& d : devices)
                    if (d.address.str() == id)
                        groups.insert(d.group);
    return groups;
}

AllocateError error(AllocateError::Code c, std::string m) { return {c, std::move(m)}; }

}  // namespace

std::vector<PciAddress> group_mates_outside(
    const Snapshot& snap, const std::vector<std::vector<std::string>>& requests) {
    std::set<std::string> requested;
    for (const auto& ids : requests)
        requested.insert(ids.begin(), ids.end());
    std::vector<PciAddress> out;
    for (unsigned g : groups_of(snap, requests)) {
        auto it = snap.group_functions.find(g);
        if (it == snap.group_functions.end())
            continue;
        for (const auto& a : it->second)
            if (!requested.count(a.str()))
                out.push_back(a);
    }
    return out;
}

bool allocate(const Snapshot& snap, const std::string& resource,
              const std::vector<std::vector<std::string>>& requests, const Holders& holders,
              const HostFs& host, std::vector<ContainerAllocation>* out, AllocateError* err) {
    using Code = AllocateError::Code;
    if (!snap.resources.count(resource)) {
        *err = error(Code::FailedPrecondition,
                     "resource " + resource + " is no longer published by vfiod");
        return false;
    }
    // Which container of this request takes each group: two containers must not share one.
    std::map<unsigned, size_t> group_owner;
    std::set<std::string> seen;
    std::vector<ContainerAllocation> answers;
    for (size_t c = 0; c < requests.size(); ++c) {
        ContainerAllocation a;
        std::vector<unsigned> groups;  // in request order
        for (const auto& id : requests[c]) {
            const std::string shown = printable(id);
            const PluginDevice* d = snap.find(resource, id);
            if (!d) {
                *err = error(Code::InvalidArgument,
                             "unknown device ID '" + shown + "' for resource " + resource);
                return false;
            }
            if (!seen.insert(id).second) {
                *err = error(Code::InvalidArgument,
                             "device ID " + shown + " is requested twice");
                return false;
            }
            if (!d->healthy) {
                *err = error(Code::FailedPrecondition,
                             "device " + shown + " is unhealthy: IOMMU group " +
                                 std::to_string(d->group) +
                                 " is not bound to vfio (or /dev/vfio/" +
                                 std::to_string(d->group) + " is missing)");
                return false;
            }
            auto [owner, fresh] = group_owner.emplace(d->group, c);
            if (!fresh && owner->second != c) {
                *err = error(Code::FailedPrecondition,
                             "device " + shown + " would split IOMMU group " +
                                 std::to_string(d->group) +
                                 " between two containers of one request");
                return false;
            }
            if (std::find(groups.begin(), groups.end(), d->group) == groups.end())
                groups.push_back(d->group);
        }
        a.devices.push_back({"/dev/vfio/vfio"});
        for (unsigned g : groups)
            a.devices.push_back({"/dev/vfio/" + std::to_string(g)});
        std::vector<DeviceNode> cdevs;
        for (unsigned g : groups) {
            auto fns = snap.group_functions.find(g);
            if (fns == snap.group_functions.end())
                continue;
            for (const auto& fn : fns->second) {
                // Linux 6.1 already lists vfio-dev/vfio<M> in sysfs but has no character
                // device for it (iommufd cdevs came in 6.6): only a node that exists counts.
                for (const auto& name :
                     host.list(pci_paths::device(fn, "vfio-dev")))
                    if (name.rfind("vfio", 0) == 0 && host.exists("dev/vfio/devices/" + name))
                        cdevs.push_back({"/dev/vfio/devices/" + name});
            }
        }
        if (!cdevs.empty() && host.exists("dev/iommu"))
            a.devices.push_back({"/dev/iommu"});
        a.devices.insert(a.devices.end(), cdevs.begin(), cdevs.end());
        a.envs[plugin_env_name(resource)] = join(requests[c], ",");
        answers.push_back(std::move(a));
    }
    // A group-mate left out of the request but held by some container: handing this group out
    // would open it in two containers, which VFIO cannot do.
    for (const auto& mate : group_mates_outside(snap, requests)) {
        auto h = holders.find(mate.str());
        if (h == holders.end())
            continue;
        unsigned g = 0;
        for (const auto& [id, fns] : snap.group_functions)
            if (std::find(fns.begin(), fns.end(), mate) != fns.end())
                g = id;
        *err = error(Code::FailedPrecondition,
                     "IOMMU group " + std::to_string(g) + " would be split: its function " +
                         mate.str() + " is held by container " + h->second);
        return false;
    }
    *out = std::move(answers);
    return true;
}

std::vector<std::string> preferred_allocation(const Snapshot& snap, const std::string& resource,
                                              const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include,
                                              int size) {
    std::vector<std::string> chosen;
    std::set<std::string> taken;
    auto take = [&](const std::string& id) {
        if (static_cast<int>(chosen.size()) < size && taken.insert(id).second)
            chosen.push_back(id);
    };
    // The available IDs of this resource, grouped; unknown IDs are kept for the last pass.
    std::map<unsigned, std::vector<const PluginDevice*>> by_group;
    std::set<std::string> avail(available.begin(), available.end());
    avail.insert(must_include.begin(), must_include.end());
    auto r = snap.resources.find(resource);
    if (r != snap.resources.end())
        for (const auto& d : r->second)
            if (avail.count(d.address.str()))
                by_group[d.group].push_back(&d);

    std::map<int, int> numa_weight;  // NUMA node → functions chosen on it
    auto take_group = [&](unsigned g) {
        for (const auto* d : by_group[g]) {
            take(d->address.str());
            if (d->numa_node >= 0)
                ++numa_weight[d->numa_node];
        }
    };
    // 1. must_include, each with the rest of its group.
    for (const auto& id : must_include) {
        take(id);
        for (const auto& [g, devices] : by_group)
            for (const auto* d : devices)
                if (d->address.str() == id)
                    take_group(g);
    }
    // 2. Whole groups that fit, on the NUMA node already used most, then the biggest groups
    //    (fewer groups opened), then by group number.
    for (;;) {
        int left = size - static_cast<int>(chosen.size());
        if (left <= 0)
            break;
        int best_node = -1, best_weight = 0;
        for (auto [node, w] : numa_weight)
            if (w > best_weight)
                best_node = node, best_weight = w;
        std::optional<unsigned> pick;
        auto score = [&](unsigned g) {
            const auto& ds = by_group[g];
            bool same = best_node >= 0 && ds.front()->numa_node == best_node;
            return std::make_tuple(same ? 1 : 0, static_cast<int>(ds.size()));
        };
        for (const auto& [g, devices] : by_group) {
            bool untouched = std::none_of(devices.begin(), devices.end(), [&](const auto* d) {
                return taken.count(d->address.str());
            });
            if (!untouched || static_cast<int>(devices.size()) > left)
                continue;
            if (!pick || score(g) > score(*pick))
                pick = g;
        }
        if (!pick)
            break;
        take_group(*pick);
    }
    // 3. Nothing whole fits: fill with what is available, in order.
    for (const auto& [g, devices] : by_group)
        for (const auto* d : devices)
            take(d->address.str());
    for (const auto& id : available)
        take(id);
    return chosen;
}

}  // namespace vfiod::plugin
