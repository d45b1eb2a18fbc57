#include "io/host_use.hpp"

#include <deque>
#include <map>
#include <set>

#include "core/pci_paths.hpp"
#include "core/strings.hpp"
#include "io/device_use.hpp"
#include "io/host_tables.hpp"
#include "io/netns_use.hpp"
#include "io/proc_fds.hpp"
#include "io/proc_parsers.hpp"
#include "io/vfio_use.hpp"

namespace vfiod {

// Only the deepest, because the root port above an NVMe drive is not itself in use.
std::optional<PciAddress> nearest_function(std::string_view devpath) {
    auto parts = path_components(devpath);
    for (auto it = parts.rbegin(); it != parts.rend(); ++it)
        if (auto a = PciAddress::parse(*it))
            return a;
    return std::nullopt;
}

namespace {

// Names and paths from the host are bytes: a mount point (octal escapes already decoded), a
// netdev or block device name may hold a newline or an escape sequence. Findings are messages
// that end up in the journal, the text plan and D-Bus errors, so they quote the host this way.
std::string shown(std::string_view s) { return printable(s, 256); }

// An NVMe namespace under native multipath lives in the virtual subsystem directory, away from
// any PCI device; the controllers that serve it are the nvme<N> links beside it.
std::set<PciAddress> multipath_controllers(const HostFs& fs, std::string_view devpath) {
    std::set<PciAddress> out;
    constexpr std::string_view kPrefix = "sys/devices/virtual/nvme-subsystem/";
    if (devpath.substr(0, kPrefix.size()) != kPrefix)
        return out;
    auto rest = devpath.substr(kPrefix.size());
    std::string subsys_dir = std::string(kPrefix) + std::string(rest.substr(0, rest.find('/')));
    for (const auto& name : fs.list(subsys_dir)) {
        if (name.size() < 5 || name.compare(0, 4, "nvme") != 0 ||
            name.find_first_not_of("0123456789", 4) != std::string::npos)
            continue;
        const std::string link = subsys_dir + "/" + name;
        if (!fs.readlink(link))
            continue;
        if (auto target = fs.resolve(link))
            if (auto a = nearest_function(*target))
                out.insert(*a);
    }
    return out;
}

}  // namespace

std::set<PciAddress> block_owners(const HostFs& fs, std::string_view devpath) {
    if (auto a = nearest_function(devpath))
        return {*a};
    return multipath_controllers(fs, devpath);
}

namespace {

std::vector<std::string> block_findings(const HostFs& fs, const std::string& name,
                                        const std::string& dir, const MountTables& mounts,
                                        BoundedWarnings& warnings) {
    std::vector<std::string> out;
    const std::string dev_node = "/dev/" + name;
    const std::string shown_name = shown(name);
    bool mounted = false;
    std::string refused;
    auto dev = fs.read(dir + "/dev", 4096, &refused);
    if (!refused.empty())
        warnings.add("block device " + shown_name + ": dev is " + refused);
    if (dev) {
        auto devnum = parse_devnum(*dev);
        if (!devnum)
            warnings.add("block device " + shown_name + ": dev does not hold MAJOR:MINOR");
        if (devnum) {
            auto it = mounts.by_devnum.find(*devnum);
            if (it != mounts.by_devnum.end()) {
                out.push_back(shown_name + " (" + *dev + ") is mounted on " + shown(it->second));
                mounted = true;
            }
            if (devnum == mounts.resume)
                out.push_back(shown_name + " (" + *dev + ") is the resume device");
        }
    }
    if (!mounted) {
        auto it = mounts.by_source.find(dev_node);
        if (it != mounts.by_source.end())
            out.push_back(shown_name + " is mounted on " + shown(it->second));
    }
    if (mounts.swaps.count(dev_node))
        out.push_back(shown_name + " is swap");
    auto holders = fs.list(dir + "/holders");
    for (auto& h : holders)
        h = shown(h);
    if (!holders.empty())
        out.push_back(shown_name + " is held by " + join(holders));
    return out;
}

// Which owners a reading is for: every function, or those an event touched.
using Wanted = const std::set<PciAddress>*;
bool wanted(Wanted only, const PciAddress& a) { return !only || only->count(a); }

void find_storage(const HostFs& fs, HostUse* use, std::vector<std::string>* warnings,
                  Wanted only, HostTables& tables) {
    const MountTables& mounts = tables.mounts(fs, warnings);
    BoundedWarnings odd(warnings, "block device warnings");
    for (const auto& name : fs.list("sys/class/block")) {
        auto dir = fs.resolve("sys/class/block/" + name);
        if (!dir)
            continue;
        auto owned_by = block_owners(fs, *dir);
        std::erase_if(owned_by, [&](const PciAddress& a) { return !wanted(only, a); });
        if (owned_by.empty())
            continue;
        auto lines = block_findings(fs, name, *dir, mounts, odd);
        for (const auto& owner : owned_by)
            for (const auto& line : lines)
                use->storage[owner].push_back(line);
    }
}

// name itself first, then every device stacked above it (bridge, bond, VLAN, macvlan, …).
std::vector<std::string> stack_above(const HostFs& fs, const std::string& name) {
    std::vector<std::string> order;
    std::set<std::string> seen;
    std::deque<std::string> todo{name};
    while (!todo.empty()) {
        std::string dev = std::move(todo.front());
        todo.pop_front();
        if (!seen.insert(dev).second)
            continue;
        order.push_back(dev);
        const std::string dir = "sys/class/net/" + dev;
        if (auto master = fs.link_name(dir + "/master"))
            todo.push_back(*master);
        for (const auto& entry : fs.list(dir))
            if (entry.size() > 6 && entry.compare(0, 6, "upper_") == 0)
                todo.push_back(entry.substr(6));
    }
    return order;
}

void find_network(const HostFs& fs, const Topology& topo, HostUse* use,
                  std::vector<std::string>* warnings, Wanted only, HostTables& tables) {
    std::vector<std::pair<PciAddress, std::string>> nics;
    if (only)
        for (const auto& [addr, fn] : topo.functions)
            if ((fn.class_code >> 16) == 0x02 && !fn.devpath.empty())
                nics.emplace_back(addr, fn.devpath);
    const NetTables& net = tables.network(fs, warnings, nics);
    for (const auto& [name, owner] : net.netdevs) {
        if (!wanted(only, owner))
            continue;
        std::vector<std::string> lines;
        const std::string shown_name = shown(name);
        if (auto master = fs.link_name("sys/class/net/" + name + "/master"))
            lines.push_back(shown_name + " is enslaved to " + shown(*master));
        for (const auto& dev : stack_above(fs, name)) {
            std::string via = dev == name ? "" : " (via " + shown(dev) + ")";
            if (net.routed.count(dev))
                lines.push_back(shown_name + " carries a route" + via);
            if (net.addressed.count(dev))
                lines.push_back(shown_name + " has an address" + via);
        }
        for (auto& line : lines)
            use->network[owner].push_back(std::move(line));
    }
}

}  // namespace

// Findings are keyed by address whatever the topology holds: a function the reader had to skip
// is still one the host may depend on.
namespace {

// Whether the proc/*/fd walk can find anything for these functions: one of them owns a device
// node, or is on a vfio driver, or its group has a vfio node (a VM holding it). Otherwise the walk,
// whose cost grows with the host's processes and open files, is left out.
bool fds_matter(const HostFs& fs, const Topology& topo, const std::vector<DeviceNode>& nodes) {
    if (!nodes.empty())
        return true;
    for (const auto& [addr, fn] : topo.functions)
        if (fn.driver.find("vfio") != std::string::npos)
            return true;
    for (const auto& [g, members] : topo.groups)
        if (vfio_node_exists(fs, g))
            return true;
    return false;
}

HostUse read_use(const HostFs& fs, const Topology& topo, std::vector<std::string>* warnings,
                 Wanted only, HostTables& tables) {
    HostUse use;
    find_storage(fs, &use, warnings, only, tables);
    find_network(fs, topo, &use, warnings, only, tables);
    find_netns_use(fs, topo, &use);
    auto nodes = read_device_nodes(fs);
    std::erase_if(nodes, [&](const DeviceNode& n) { return !wanted(only, n.owner); });
    if (only && !fds_matter(fs, topo, nodes))
        return use;
    // One walk of proc/*/fd serves both readers.
    auto open = scan_open_nodes(fs);
    find_device_use(fs, nodes, open, &use);
    read_vfio_use(fs, topo, open, &use);
    return use;
}

}  // namespace

HostUse read_host_use(const HostFs& fs, const Topology& topo,
                      std::vector<std::string>* warnings) {
    HostTables fresh;
    return read_use(fs, topo, warnings, nullptr, fresh);
}

HostUse read_host_use(const HostFs& fs, const Topology& topo, std::vector<std::string>* warnings,
                      const std::set<PciAddress>& only, HostTables* tables) {
    // The per-function readers walk the topology they are given: give them only these functions
    // and the groups they fill (a vfio group node open marks each member).
    Topology sub;
    sub.iommu_enabled = topo.iommu_enabled;
    for (const auto& a : only)
        if (const PciFunction* fn = topo.find(a)) {
            sub.functions.emplace(a, *fn);
            if (fn->iommu_group)
                if (auto g = topo.groups.find(*fn->iommu_group); g != topo.groups.end())
                    sub.groups.insert(*g);
        }
    for (auto& [g, members] : sub.groups)
        std::erase_if(members, [&](const PciAddress& a) { return !only.count(a); });
    HostTables fresh;
    return read_use(fs, sub, warnings, &only, tables ? *tables : fresh);
}

void merge_host_use(HostUse* into, HostUse fresh, const std::set<PciAddress>& only) {
    auto merge = [&](std::map<PciAddress, std::vector<std::string>>& to,
                     std::map<PciAddress, std::vector<std::string>>& from) {
        for (const auto& a : only)
            to.erase(a);
        to.merge(from);
    };
    merge(into->storage, fresh.storage);
    merge(into->network, fresh.network);
    merge(into->device, fresh.device);
    merge(into->vfio, fresh.vfio);
}

}  // namespace vfiod
