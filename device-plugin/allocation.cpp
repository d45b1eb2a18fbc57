#include "allocation.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <type_traits>
#include <utility>

#include "core/mdev.hpp"
#include "core/pci_paths.hpp"
#include "core/resource_names.hpp"
#include "core/strings.hpp"

namespace vfiod::plugin {

DeviceId DeviceId::parse(const std::string& text) {
    // Exactly the canonical forms, the only ones make_snapshot() lists.
    if (auto a = PciAddress::parse(text))
        return {a, {}, {}};
    if (is_canonical_uuid(text))
        return {std::nullopt, text, {}};
    return {std::nullopt, {}, text};
}

namespace {

// The group of each requested ID that is a known function (unknown ones are the caller's error),
// and every requested address.
std::set<unsigned> groups_of(const Snapshot& snap, const std::vector<DeviceIds>& requests,
                             std::set<PciAddress>* requested) {
    std::set<unsigned> groups;
    for (const auto& ids : requests)
        for (const auto& id : ids) {
            if (!id.address)
                continue;
            requested->insert(*id.address);
            if (const PluginDevice* d = snap.find(*id.address))
                groups.insert(d->group);
        }
    return groups;
}

// group_mates_outside() with each function's group.
std::vector<std::pair<PciAddress, unsigned>> mates_outside(
    const Snapshot& snap, const std::vector<DeviceIds>& requests) {
    std::set<PciAddress> requested;
    std::vector<std::pair<PciAddress, unsigned>> out;
    for (unsigned g : groups_of(snap, requests, &requested)) {
        auto it = snap.group_functions.find(g);
        if (it == snap.group_functions.end())
            continue;
        count_examined(it->second.size());
        for (const auto& a : it->second)
            if (!requested.count(a))
                out.emplace_back(a, g);
    }
    return out;
}

AllocateError error(AllocateError::Code c, std::string m) { return {c, std::move(m)}; }

}  // namespace

std::vector<PciAddress> group_mates_outside(const Snapshot& snap,
                                            const std::vector<DeviceIds>& requests) {
    std::vector<PciAddress> out;
    for (const auto& [a, g] : mates_outside(snap, requests))
        out.push_back(a);
    return out;
}

namespace {

// What allocate() keeps across the containers of one request: IDs seen, and which container
// takes each group (two containers must not share one).
struct RequestTally {
    std::set<PciAddress> seen;
    std::set<std::string> seen_mdevs;
    std::map<unsigned, size_t> group_owner;
};

AllocateError unknown_id(const std::string& shown, const std::string& resource) {
    return error(AllocateError::Code::InvalidArgument,
                 "unknown device ID '" + shown + "' for resource " + resource);
}

AllocateError requested_twice(const std::string& shown) {
    return error(AllocateError::Code::InvalidArgument,
                 "device ID " + shown + " is requested twice");
}

// The groups container `c` asks for, in request order, or false with *err naming the first ID
// that is unknown, repeated, unhealthy or splits a group with another container.
bool groups_of_container(const Snapshot& snap, const std::string& resource,
                         const DeviceIds& ids, size_t c, RequestTally* tally,
                         std::vector<unsigned>* groups, AllocateError* err) {
    using Code = AllocateError::Code;
    std::set<unsigned> listed;
    for (const auto& id : ids) {
        const std::string shown = printable(id.str());
        const PluginDevice* d = id.address ? snap.find(resource, *id.address) : nullptr;
        if (!d) {
            *err = unknown_id(shown, resource);
            return false;
        }
        if (!tally->seen.insert(*id.address).second) {
            *err = requested_twice(shown);
            return false;
        }
        const std::string g = std::to_string(d->group);
        if (!d->healthy) {
            *err = error(Code::FailedPrecondition,
                         "device " + shown + " is unhealthy: " +
                             (d->failed ? "vfiod reports it or a function of IOMMU group " + g +
                                              " failed (vfioctl doctor says what to do)"
                                        : "IOMMU group " + g + " is not bound to vfio (or " +
                                              pci_paths::host_path(
                                                  pci_paths::vfio_group(d->group)) +
                                              " is missing)"));
            return false;
        }
        auto [owner, fresh] = tally->group_owner.emplace(d->group, c);
        if (!fresh && owner->second != c) {
            *err = error(Code::FailedPrecondition, "device " + shown + " would split IOMMU group " +
                                                       g + " between two containers of one request");
            return false;
        }
        if (listed.insert(d->group).second)
            groups->push_back(d->group);
    }
    return true;
}

// The served mdevs container `c` asks for, in request order, or false with *err naming the
// first ID that is unknown, withdrawn (and why), unhealthy or repeated. An mdev is its own
// IOMMU group.
bool mdevs_of_container(const Snapshot& snap, const std::string& resource, const DeviceIds& ids,
                        RequestTally* tally, std::vector<PluginMdev>* mdevs,
                        AllocateError* err) {
    for (const auto& id : ids) {
        const std::string shown = printable(id.str());
        const PluginMdev* m = id.uuid.empty() ? nullptr : snap.find_mdev(resource, id.uuid);
        if (!m) {
            auto w = id.uuid.empty() ? snap.withdrawn.end() : snap.withdrawn.find(id.uuid);
            *err = w != snap.withdrawn.end() && w->second.first == resource
                       ? error(AllocateError::Code::FailedPrecondition,
                               "mdev " + shown + " of resource " + resource +
                                   " is no longer served: " + w->second.second)
                       : unknown_id(shown, resource);
            return false;
        }
        if (!tally->seen_mdevs.insert(id.uuid).second) {
            *err = requested_twice(shown);
            return false;
        }
        if (!m->healthy) {
            *err = error(AllocateError::Code::FailedPrecondition,
                         "mdev " + shown + " is unhealthy: vfiod reports its parent failed "
                         "(vfioctl status says why)");
            return false;
        }
        mdevs->push_back(*m);
    }
    return true;
}

// The variable that hands a container's IDs to the VM (`prefix`: the resource's kind), the
// kubelet's own texts in request order: every ID is known by now.
void add_ids_env(const std::string& resource, std::string_view prefix, const DeviceIds& ids,
                 ContainerAllocation* a) {
    std::vector<std::string> listed;
    listed.reserve(ids.size());
    for (const auto& id : ids)
        listed.push_back(id.str());
    a->envs[plugin_env_name(resource, prefix)] = join(listed, ",");
}

// A group-mate left out of the request but held by some container: handing this group out
// would open it in two containers, which VFIO cannot do.
bool splits_a_held_group(const Snapshot& snap, const std::vector<DeviceIds>& requests,
                         const Holders& holders, AllocateError* err) {
    for (const auto& [mate, g] : mates_outside(snap, requests)) {
        auto h = holders.find(mate.str());
        if (h == holders.end())
            continue;
        *err = error(AllocateError::Code::FailedPrecondition,
                     "IOMMU group " + std::to_string(g) + " would be split: its function " +
                         mate.str() + " is held by container " + h->second);
        return true;
    }
    return false;
}

}  // namespace

bool allocate(const Snapshot& snap, const std::string& resource,
              const std::vector<DeviceIds>& requests, const Holders& holders,
              const HostFs& host, std::vector<ContainerAllocation>* out, AllocateError* err) {
    if (!snap.serves(resource)) {
        *err = error(AllocateError::Code::FailedPrecondition,
                     "resource " + resource + " is no longer published by vfiod");
        return false;
    }
    const bool of_mdevs = snap.mdev_resources.count(resource);
    RequestTally tally;
    std::vector<ContainerAllocation> answers;
    for (size_t c = 0; c < requests.size(); ++c) {
        ContainerAllocation& a = answers.emplace_back();
        if (of_mdevs) {
            std::vector<PluginMdev> mdevs;  // in request order
            if (!mdevs_of_container(snap, resource, requests[c], &tally, &mdevs, err))
                return false;
            a.devices = mdev_device_nodes(mdevs, host);
        } else {
            std::vector<unsigned> groups;  // in request order
            if (!groups_of_container(snap, resource, requests[c], c, &tally, &groups, err))
                return false;
            a.devices = group_device_nodes(snap, groups, host);
        }
        add_ids_env(resource, of_mdevs ? kMdevEnvPrefix : kPciEnvPrefix, requests[c], &a);
    }
    if (splits_a_held_group(snap, requests, holders, err))
        return false;
    *out = std::move(answers);
    return true;
}

namespace {

// How the Chooser meets each kind of device: the one a kubelet ID names in a resource, and the
// ID it answers with.
template <typename Device>
struct Kind;
template <>
struct Kind<PluginDevice> {
    static const PluginDevice* find(const Snapshot& s, const std::string& r, const DeviceId& id) {
        return id.address ? s.find(r, *id.address) : nullptr;
    }
    static const PciAddress& id(const PluginDevice& d) { return d.address; }
};
template <>
struct Kind<PluginMdev> {
    static const PluginMdev* find(const Snapshot& s, const std::string& r, const DeviceId& id) {
        return id.uuid.empty() ? nullptr : s.find_mdev(r, id.uuid);
    }
    static const std::string& id(const PluginMdev& m) { return m.uuid; }
};

// GetPreferredAllocation's choice, step by step (preferred_allocation()), for functions and for
// mdevs (each its own group of one). Every step is linear in the IDs offered or amortised so:
// whole groups are kept in (size desc, group asc) order, overall and per NUMA node, behind
// cursors that only move forward, since a group that is touched or too big for what is left
// stays so.
template <typename Device>
class Chooser {
public:
    using Id = std::decay_t<decltype(Kind<Device>::id(std::declval<const Device&>()))>;

    Chooser(const Snapshot& snap, const std::string& resource, int size)
        : snap_(snap), resource_(resource), size_(size) {}

    // The offered IDs this resource knows, by group; unknown IDs are never chosen.
    void offer(const DeviceIds& ids) {
        for (const auto& id : ids)
            if (const Device* d = known(id); d && offered_.insert(d).second)
                by_group_[d->group].push_back(d);
    }
    // must_include, each with the rest of its group.
    void take_required(const DeviceIds& ids) {
        for (const auto& id : ids)
            if (const Device* d = known(id); d && offered_.count(d)) {
                take(d);
                take_group(d->group);
            }
    }
    // Whole groups that fit: on the NUMA node used most (when nothing chosen has one, the node
    // offering most), then the biggest, then by number.
    void take_whole_groups() {
        sort_groups();
        while (left() > 0) {
            std::optional<unsigned> pick;
            int node = numa_.best >= 0 ? numa_.best : order_.roomiest;
            if (auto on = order_.by_node.find(node); node >= 0 && on != order_.by_node.end())
                pick = first_fitting(on->second);
            if (!pick)
                pick = first_fitting(order_.all);
            if (!pick)
                break;
            take_group(*pick);
        }
    }
    // Nothing whole fits: what is offered, in group order.
    void fill() {
        for (const auto& [g, devices] : by_group_)
            for (const Device* d : devices)
                take(d);
    }
    std::vector<Id> chosen() && { return std::move(chosen_); }

private:
    // Groups in the order take_whole_groups() prefers them, behind a cursor.
    struct Ordered {
        std::vector<unsigned> groups;
        size_t next = 0;
        size_t devices = 0;  // offered, in all of them
    };
    // Devices chosen per NUMA node, and the node with the most (the lowest of equals).
    struct NumaTally {
        std::map<int, int> weight;
        int best = -1, best_weight = 0;
        void count(int node) {
            if (node < 0)
                return;
            int w = ++weight[node];
            if (w > best_weight || (w == best_weight && node < best))
                best = node, best_weight = w;
        }
    };

    const Device* known(const DeviceId& id) const {
        return Kind<Device>::find(snap_, resource_, id);
    }
    int left() const { return size_ - static_cast<int>(chosen_.size()); }
    void take(const Device* d) {
        if (left() <= 0 || !taken_.insert(d).second)
            return;
        chosen_.push_back(Kind<Device>::id(*d));
        touched_.insert(d->group);
        numa_.count(d->numa_node);
    }
    void take_group(unsigned g) {
        for (const Device* d : by_group_[g])
            take(d);
    }
    void sort_groups() {
        for (auto& [g, devices] : by_group_) {
            std::sort(devices.begin(), devices.end(), [](const Device* a, const Device* b) {
                return Kind<Device>::id(*a) < Kind<Device>::id(*b);
            });
            order_.all.groups.push_back(g);
        }
        auto before = [this](unsigned a, unsigned b) {
            size_t na = by_group_[a].size(), nb = by_group_[b].size();
            return na != nb ? na > nb : a < b;
        };
        std::sort(order_.all.groups.begin(), order_.all.groups.end(), before);
        for (unsigned g : order_.all.groups) {
            Ordered& on = order_.by_node[by_group_[g].front()->numa_node];
            on.groups.push_back(g);
            on.devices += by_group_[g].size();
        }
        size_t most = 0;
        for (const auto& [node, on] : order_.by_node)  // ascending: the lowest of equals
            if (node >= 0 && on.devices > most)
                most = on.devices, order_.roomiest = node;
    }
    std::optional<unsigned> first_fitting(Ordered& o) {
        for (; o.next < o.groups.size(); ++o.next) {
            unsigned g = o.groups[o.next];
            if (!touched_.count(g) && static_cast<int>(by_group_[g].size()) <= left())
                return g;
        }
        return std::nullopt;
    }

    const Snapshot& snap_;
    const std::string& resource_;
    const int size_;
    std::map<unsigned, std::vector<const Device*>> by_group_;
    std::set<const Device*> offered_, taken_;
    std::set<unsigned> touched_;
    std::vector<Id> chosen_;
    NumaTally numa_;
    // Every whole group, and those of each NUMA node, in the order preferred; the node that
    // offers the most devices.
    struct {
        Ordered all;
        std::map<int, Ordered> by_node;
        int roomiest = -1;
    } order_;
};

template <typename Device>
std::vector<typename Chooser<Device>::Id> choose(const Snapshot& snap,
                                                 const std::string& resource,
                                                 const DeviceIds& available,
                                                 const DeviceIds& must_include, int size) {
    Chooser<Device> c(snap, resource, size);
    c.offer(available);
    c.offer(must_include);
    c.take_required(must_include);
    c.take_whole_groups();
    c.fill();
    return std::move(c).chosen();
}

}  // namespace

std::vector<PciAddress> preferred_allocation(const Snapshot& snap, const std::string& resource,
                                             const DeviceIds& available,
                                             const DeviceIds& must_include, int size) {
    return choose<PluginDevice>(snap, resource, available, must_include, size);
}

std::vector<std::string> preferred_mdevs(const Snapshot& snap, const std::string& resource,
                                         const DeviceIds& available,
                                         const DeviceIds& must_include, int size) {
    return choose<PluginMdev>(snap, resource, available, must_include, size);
}

}  // namespace vfiod::plugin
