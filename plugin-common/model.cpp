#include "model.hpp"

#include <algorithm>
#include <unordered_set>

#include "core/mdev.hpp"
#include "core/pci_paths.hpp"
#include "core/state.hpp"
#include "core/strings.hpp"

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

const PluginMdev* Snapshot::find_mdev(const std::string& resource, const std::string& uuid) const {
    ++examined;
    auto it = mdev_ids.find(uuid);
    if (it == mdev_ids.end() || it->second.first != resource)
        return nullptr;
    auto r = mdev_resources.find(resource);
    return r == mdev_resources.end() || it->second.second >= r->second.size()
               ? nullptr
               : &r->second[it->second.second];
}

namespace {

// Names that would share a socket, or an environment variable within one kind (the kinds'
// prefixes differ), or one name for both kinds (DESIGN §12: a VM asking for one kind could get
// the other): the kubelet would list one's devices under the other's name and Allocate would
// hand them out, so neither is served. The rules check-config applies (config_checks.cpp).
void refuse_collisions(Snapshot* s) {
    std::map<std::string, const std::string*> sockets, envs[2];
    auto check = [&](const std::string& name, bool mdev) {
        const std::string_view prefix = mdev ? kMdevEnvPrefix : kPciEnvPrefix;
        for (auto* seen : {&sockets, &envs[mdev]}) {
            auto key = seen == &sockets ? plugin_socket_name(name) : plugin_env_name(name, prefix);
            auto [it, fresh] = seen->try_emplace(std::move(key), &name);
            if (fresh || *it->second == name)
                continue;
            std::string why = resource_name_collision(*it->second, name, prefix);
            s->refused.try_emplace(*it->second, "collides with " + name + ": " + why);
            s->refused.try_emplace(name, "collides with " + *it->second + ": " + why);
        }
    };
    for (const auto& [name, devices] : s->resources)
        check(name, false);
    for (const auto& [name, mdevs] : s->mdev_resources) {
        if (s->resources.count(name))
            s->refused.try_emplace(name, "published for both PCI functions and mediated "
                                         "devices: a resource holds one kind, not both");
        check(name, true);
    }
    for (const auto& [name, why] : s->refused) {
        s->resources.erase(name);
        s->mdev_resources.erase(name);
    }
}

// Why a published mdev of a served name is not served, for Allocate's refusal.
std::string withdrawn_because(const client::DaemonMdev& m) {
    if (m.state_value != MdevState::Ready) {
        const char* reason = to_string(m.plan.reason);
        return "its State is " + printable(m.state) +
               (*reason ? std::string(" (") + reason + ")" : "");
    }
    if (!m.plan.group)
        return "it has no IOMMU group";
    return pci_paths::host_path(pci_paths::vfio_group(*m.plan.group)) + " is missing";
}

// The mdevs of each resource name: served ones listed, once per UUID; the others withdrawn.
void add_mdevs(const client::DaemonView& view, const std::function<bool(unsigned)>& vfio_exists,
               Snapshot* s) {
    if (!view.mdevs)
        return;
    std::unordered_set<std::string> seen;
    for (const auto& m : *view.mdevs) {
        const std::string& name = m.plan.resource_name;
        // A foreign mdev is no one's to serve, whatever it claims (vfiod publishes it with none).
        if (name.empty() || m.state_value == MdevState::Foreign)
            continue;
        auto& pool = s->mdev_resources[name];
        // An ID the kubelet could not send back, or one met already.
        if (!is_canonical_uuid(m.plan.uuid) || !seen.insert(m.plan.uuid).second)
            continue;
        if (mdev_served(m, vfio_exists))
            pool.push_back({m.plan.uuid, *m.plan.group, m.numa_node,
                            !client::health_failed(m.health.state)});
        else
            s->withdrawn.try_emplace(m.plan.uuid, name, withdrawn_because(m));
    }
    for (auto& [name, pool] : s->mdev_resources)
        std::sort(pool.begin(), pool.end(),
                  [](const PluginMdev& a, const PluginMdev& b) { return a.uuid < b.uuid; });
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
            auto h = g.device_health.find(d.address);
            bool failed = client::health_failed(g.health) ||
                          (h != g.device_health.end() && client::health_failed(h->second.state));
            s.resources[*d.resource_name].push_back(
                {d.address, id, d.numa_node, usable && !failed, failed});
        }
    }
    for (auto& [name, devices] : s.resources)
        std::sort(devices.begin(), devices.end(), [](const PluginDevice& a, const PluginDevice& b) {
            return a.address < b.address;
        });
    add_mdevs(view, vfio_exists, &s);
    refuse_collisions(&s);
    for (const auto& [name, devices] : s.resources)
        for (size_t i = 0; i < devices.size(); ++i)
            s.ids.try_emplace(devices[i].address, name, i);
    for (const auto& [name, mdevs] : s.mdev_resources)
        for (size_t i = 0; i < mdevs.size(); ++i)
            s.mdev_ids.try_emplace(mdevs[i].uuid, name, i);
    return s;
}

bool mdev_served(const client::DaemonMdev& m,
                 const std::function<bool(unsigned)>& vfio_exists) {
    return m.state_value == MdevState::Ready && m.plan.group && vfio_exists(*m.plan.group);
}

namespace {

// /dev/vfio/vfio and each group's node, then /dev/iommu and the iommufd character devices of
// the devices whose sysfs directories are `dirs`, those that exist on this host. Linux 6.1
// already lists vfio-dev/vfio<M> in sysfs but has no character device for it (iommufd cdevs
// came in 6.6): only a node that exists counts.
std::vector<DeviceNode> vfio_nodes(const std::vector<unsigned>& groups,
                                   const std::vector<std::string>& dirs, const HostFs& host) {
    std::vector<DeviceNode> nodes, cdevs;
    nodes.push_back({pci_paths::host_path(pci_paths::kVfioContainer)});
    for (unsigned g : groups)
        nodes.push_back({pci_paths::host_path(pci_paths::vfio_group(g))});
    for (const auto& dir : dirs)
        for (const auto& name : host.list(dir + "/vfio-dev"))
            if (name.rfind("vfio", 0) == 0 && host.exists(pci_paths::vfio_cdev(name)))
                cdevs.push_back({pci_paths::host_path(pci_paths::vfio_cdev(name))});
    if (!cdevs.empty() && host.exists("dev/iommu"))
        nodes.push_back({"/dev/iommu"});
    nodes.insert(nodes.end(), cdevs.begin(), cdevs.end());
    return nodes;
}

}  // namespace

std::vector<DeviceNode> group_device_nodes(const Snapshot& snap,
                                           const std::vector<unsigned>& groups,
                                           const HostFs& host) {
    std::vector<std::string> dirs;
    for (unsigned g : groups) {
        auto fns = snap.group_functions.find(g);
        if (fns == snap.group_functions.end())
            continue;
        examined += fns->second.size();
        for (const auto& fn : fns->second)
            dirs.push_back(pci_paths::device(fn));
    }
    return vfio_nodes(groups, dirs, host);
}

std::vector<DeviceNode> mdev_device_nodes(const std::vector<PluginMdev>& mdevs,
                                          const HostFs& host) {
    examined += mdevs.size();
    std::vector<unsigned> groups;
    std::vector<std::string> dirs;
    for (const auto& m : mdevs) {
        groups.push_back(m.group);
        dirs.push_back(std::string(mdev_paths::kDevices) + "/" + m.uuid);
    }
    return vfio_nodes(groups, dirs, host);
}

}  // namespace vfiod::plugin
