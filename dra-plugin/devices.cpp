#include "devices.hpp"

#include <algorithm>
#include <map>

#include "core/mdev.hpp"
#include "core/pci_paths.hpp"
#include "core/state.hpp"

namespace vfiod::dra {

namespace {

constexpr std::string_view kDevicePrefix = "pci-";
constexpr std::string_view kMdevPrefix = "mdev-";

}  // namespace

std::string device_name(const PciAddress& a) {
    std::string s = a.str();  // "0000:01:00.0": lower-case hex, a DNS label once ':' and '.' go
    std::replace(s.begin(), s.end(), ':', '-');
    std::replace(s.begin(), s.end(), '.', '-');
    return std::string(kDevicePrefix) + s;
}

std::string mdev_device_name(std::string_view uuid) {
    return std::string(kMdevPrefix) + std::string(uuid);
}

std::optional<PciAddress> parse_device_name(std::string_view name) {
    if (name.size() > 63 || !name.starts_with(kDevicePrefix))
        return std::nullopt;
    std::string text(name.substr(kDevicePrefix.size()));
    // DDDD-BB-SS-F back to DDDD:BB:SS.F: exactly three dashes, in that order.
    size_t dashes = std::count(text.begin(), text.end(), '-');
    if (dashes != 3)
        return std::nullopt;
    size_t last = text.rfind('-');
    text[last] = '.';
    std::replace(text.begin(), text.end(), '-', ':');
    auto a = PciAddress::parse(text);
    // parse() takes only the canonical form, so the name re-made from it is the one given.
    if (!a || device_name(*a) != name)
        return std::nullopt;
    return a;
}

const DraDevice* DraInventory::find(std::string_view name) const {
    auto it = std::lower_bound(devices.begin(), devices.end(), name,
                               [](const DraDevice& d, std::string_view n) { return d.name < n; });
    return it != devices.end() && it->name == name ? &*it : nullptr;
}

namespace {

// The PCIe root a function hangs under, from its sysfs path; empty when it cannot be told.
std::string pcie_root_of(const HostFs& host, const PciAddress& address) {
    auto where = host.resolve(pci_paths::device(address));
    // "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0" -> "pci0000:00"
    constexpr std::string_view devices_dir = "sys/devices/";
    if (!where || !where->starts_with(devices_dir))
        return "";
    std::string rest = where->substr(devices_dir.size());
    std::string first = rest.substr(0, rest.find('/'));
    return first.starts_with("pci") && first.size() > 3 ? first : "";
}

// The root `before` found for the device of that name and host identity, else the host's.
std::string pcie_root(const HostFs& host, const DraDevice& d, const PciAddress& function,
                      const DraInventory* before) {
    const DraDevice* known = before ? before->find(d.name) : nullptr;
    if (known && known->host_id() == d.host_id())
        return known->pcie_root;
    return pcie_root_of(host, function);
}

// The mdevs plugin::mdev_served serves, as DRA devices.
void add_mdevs(const client::DaemonView& view, const std::function<bool(unsigned)>& exists,
               const HostFs& host, const DraInventory* before, std::vector<DraDevice>* out) {
    if (!view.mdevs)
        return;
    for (const auto& m : *view.mdevs) {
        if (!plugin::mdev_served(m, exists) || !is_canonical_uuid(m.plan.uuid))
            continue;
        DraDevice d;
        d.name = mdev_device_name(m.plan.uuid);
        d.group = *m.plan.group;
        d.resource_name = m.plan.resource_name;
        d.numa_node = m.numa_node;
        d.mdev = {m.plan.uuid, m.plan.type, m.plan.type_name};
        d.health = m.health;
        // A PCI parent is named by its address; a virtual one ("mbochs") has no PCIe root.
        if (auto parent = PciAddress::parse(m.plan.parent))
            d.pcie_root = pcie_root(host, d, *parent, before);
        out->push_back(std::move(d));
    }
}

// A function's health as DRA says it: its own, unless it is not failed and another function of
// its group is: then failed, naming that function (the first failed one by address).
client::Health function_health(const client::DaemonGroup& g, const PciAddress& a) {
    auto own = g.device_health.find(a);
    client::Health h = own != g.device_health.end() ? own->second : client::Health{};
    if (client::health_failed(h.state) || !client::health_failed(g.health))
        return h;
    for (const auto& [mate, mh] : g.device_health)
        if (mate != a && client::health_failed(mh.state))
            return {"failed", "group-member-failed: " + mate.str() + " " + mh.reason};
    return {"failed", "group-member-failed: IOMMU group " + std::to_string(*g.plan.group) +
                          " is failed"};
}

}  // namespace

std::shared_ptr<const DraInventory> make_inventory(const client::DaemonView& view,
                                                   const std::function<bool(unsigned)>& vfio_exists,
                                                   const HostFs& host,
                                                   const DraInventory* before) {
    auto inv = std::make_shared<DraInventory>();
    // The device model's rule decides health (make_snapshot); each group's /dev/vfio node is
    // asked once, and the answer given to the snapshot is the one used here.
    std::map<unsigned, bool> present;
    auto exists = [&](unsigned g) {
        auto [it, fresh] = present.try_emplace(g, false);
        if (fresh)
            it->second = vfio_exists(g);
        return it->second;
    };
    inv->snapshot = plugin::make_snapshot(view, exists);
    for (const auto& g : view.groups) {
        // Health as the device model has it: State bound and /dev/vfio/<N> present.
        // Walked here rather than through snapshot.resources because DRA serves allowlisted
        // functions without a resource_name too, and names that would collide as device-plugin
        // sockets are no problem for DRA.
        if (!g.plan.group || g.state_value != GroupState::Bound || !exists(*g.plan.group))
            continue;
        for (const auto& d : g.plan.devices) {
            if (d.role != Role::Allowlisted)
                continue;
            DraDevice out;
            out.name = device_name(d.address);
            out.address = d.address;
            out.group = *g.plan.group;
            out.resource_name = d.resource_name.value_or("");
            out.ids = {d.vendor, d.device, d.class_code};
            out.driver = d.driver;
            out.numa_node = d.numa_node;
            out.pcie_root = pcie_root(host, out, d.address, before);
            out.health = function_health(g, d.address);
            inv->devices.push_back(std::move(out));
        }
    }
    add_mdevs(view, exists, host, before, &inv->devices);
    std::sort(inv->devices.begin(), inv->devices.end(),
              [](const DraDevice& a, const DraDevice& b) { return a.name < b.name; });
    // One device appears once in vfiod's inventory; a view that lists it twice is kept to its
    // first record rather than publishing a name twice (the API refuses duplicate names).
    inv->devices.erase(std::unique(inv->devices.begin(), inv->devices.end(),
                                   [](const DraDevice& a, const DraDevice& b) {
                                       return a.name == b.name;
                                   }),
                       inv->devices.end());
    return inv;
}

std::vector<plugin::DeviceNode> device_nodes(const DraDevice& d, const plugin::Snapshot& snapshot,
                                             const HostFs& host) {
    // An mdev's group is its own, with no PCI function in the snapshot: the device plugin's rule
    // for mdevs (its group node, its own sysfs directory's iommufd node).
    if (d.is_mdev())
        return plugin::mdev_device_nodes({{d.mdev.uuid, d.group, d.numa_node}}, host);
    return plugin::group_device_nodes(snapshot, {d.group}, host);
}

}  // namespace vfiod::dra
