#include "model.hpp"

#include <algorithm>

#include "core/pci_paths.hpp"
#include "core/state.hpp"

namespace vfiod::plugin {

namespace {
thread_local size_t examined = 0;
}  // namespace

size_t examined_on_this_thread() { return examined; }

void count_examined(size_t n) { examined += n; }

size_t PciAddressHash::operator()(const PciAddress& a) const noexcept {
    return std::hash<std::uint64_t>{}(std::uint64_t{a.domain} << 24 | std::uint64_t{a.bus} << 16 |
                                      std::uint64_t{a.slot} << 8 | a.function);
}

const PluginDevice* Snapshot::find(const PciAddress& id) const {
    ++examined;
    auto it = ids.find(id);
    if (it == ids.end())
        return nullptr;
    auto r = resources.find(it->second.first);
    return r == resources.end() || it->second.second >= r->second.size()
               ? nullptr
               : &r->second[it->second.second];
}

const PluginDevice* Snapshot::find(const std::string& resource, const PciAddress& id) const {
    auto it = ids.find(id);
    if (it == ids.end() || it->second.first != resource) {
        ++examined;
        return nullptr;
    }
    return find(id);
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
        bool usable = g.state_value == GroupState::Bound && vfio_exists(id);
        auto& functions = s.group_functions[id];
        for (const auto& d : g.plan.devices) {
            if (d.role == Role::Bridge)
                continue;
            functions.push_back(d.address);
            if (!d.resource_name || d.resource_name->empty())
                continue;
            s.resources[*d.resource_name].push_back({d.address, id, d.numa_node, usable});
        }
    }
    for (auto& [name, devices] : s.resources)
        std::sort(devices.begin(), devices.end(), [](const PluginDevice& a, const PluginDevice& b) {
            return a.address < b.address;
        });
    refuse_collisions(&s);
    for (const auto& [name, devices] : s.resources)
        for (size_t i = 0; i < devices.size(); ++i)
            s.ids.try_emplace(devices[i].address, name, i);
    return s;
}

bool mdev_served(const client::DaemonMdev& m,
                 const std::function<bool(unsigned)>& vfio_exists) {
    return m.state_value == MdevState::Ready && m.plan.group && vfio_exists(*m.plan.group);
}

namespace {

// The iommufd character devices of the groups' functions that exist on this host. Linux 6.1
// already lists vfio-dev/vfio<M> in sysfs but has no character device for it (iommufd cdevs came
// in 6.6): only a node that exists counts.
std::vector<DeviceNode> iommufd_nodes(const Snapshot& snap, const std::vector<unsigned>& groups,
                                      const HostFs& host) {
    std::vector<DeviceNode> cdevs;
    for (unsigned g : groups) {
        auto fns = snap.group_functions.find(g);
        if (fns == snap.group_functions.end())
            continue;
        examined += fns->second.size();
        for (const auto& fn : fns->second)
            for (const auto& name : host.list(pci_paths::device(fn, "vfio-dev")))
                if (name.rfind("vfio", 0) == 0 && host.exists(pci_paths::vfio_cdev(name)))
                    cdevs.push_back({pci_paths::host_path(pci_paths::vfio_cdev(name))});
    }
    return cdevs;
}

}  // namespace

std::vector<DeviceNode> group_device_nodes(const Snapshot& snap,
                                           const std::vector<unsigned>& groups,
                                           const HostFs& host) {
    std::vector<DeviceNode> nodes;
    nodes.push_back({pci_paths::host_path(pci_paths::kVfioContainer)});
    for (unsigned g : groups)
        nodes.push_back({pci_paths::host_path(pci_paths::vfio_group(g))});
    std::vector<DeviceNode> cdevs = iommufd_nodes(snap, groups, host);
    if (!cdevs.empty() && host.exists("dev/iommu"))
        nodes.push_back({"/dev/iommu"});
    nodes.insert(nodes.end(), cdevs.begin(), cdevs.end());
    return nodes;
}

}  // namespace vfiod::plugin
