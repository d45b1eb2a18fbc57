#include "io/vfio_use.hpp"

#include <cstdlib>
#include <map>
#include <string>

#include "core/pci_paths.hpp"
#include "core/strings.hpp"

namespace vfiod {

namespace {

bool all_digits(const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// "/dev/vfio/devices/vfio3" -> "vfio3"; "/dev/vfio/12" -> "12"; "" for anything else.
std::string after(const std::string& target, const std::string& prefix) {
    return target.rfind(prefix, 0) == 0 ? target.substr(prefix.size()) : "";
}

template <typename Key>
void add(std::map<Key, std::vector<std::string>>& out, const Key& k, const std::string& line) {
    auto& lines = out[k];
    for (const auto& l : lines)
        if (l == line)
            return;
    lines.push_back(line);
}

// For each open node that is the /dev/vfio/<N> of a group in `groups` or an iommufd node named
// in `cdevs`, a line naming its holder under every key the group or node stands for.
template <typename Key>
void holders(const HostFs& fs, const std::vector<OpenNode>& open,
             const std::map<unsigned, std::vector<Key>>& groups,
             const std::map<std::string, Key>& cdevs,
             std::map<Key, std::vector<std::string>>& out) {
    for (const auto& o : open) {
        std::string group = after(o.target, pci_paths::host_path(pci_paths::kVfioDir) + "/");
        if (all_digits(group)) {
            auto g = groups.find(static_cast<unsigned>(std::strtoul(group.c_str(), nullptr, 10)));
            if (g == groups.end())
                continue;
            for (const auto& k : g->second)
                add(out, k, o.target + " is open by " + process_name(fs, o.pid));
            continue;
        }
        std::string cdev = after(o.target, pci_paths::host_path(pci_paths::kVfioCdevs) + "/");
        auto c = cdevs.find(cdev);
        if (!cdev.empty() && c != cdevs.end())
            add(out, c->second, printable(o.target) + " is open by " + process_name(fs, o.pid));
    }
}

}  // namespace

void read_vfio_use(const HostFs& fs, const Topology& topo, const std::vector<OpenNode>& open,
                   HostUse* use) {
    // The iommufd nodes each function exposes: "vfio<M>" under <devpath>/vfio-dev.
    std::map<std::string, PciAddress> cdevs;
    for (const auto& [addr, fn] : topo.functions)
        if (!fn.devpath.empty())
            for (const auto& name : fs.list(fn.devpath + "/vfio-dev"))
                cdevs.emplace(name, addr);

    holders(fs, open, topo.groups, cdevs, use->vfio);

    // A host driver enables its device too; only on a vfio driver does the count mean a user.
    for (const auto& [addr, fn] : topo.functions) {
        if (fn.driver.find("vfio") == std::string::npos || fn.devpath.empty())
            continue;
        auto enable = fs.read(fn.devpath + "/enable");
        if (enable && all_digits(*enable) && std::strtoul(enable->c_str(), nullptr, 10) > 0)
            add(use->vfio, addr, "the device is enabled by a user (enable=" + *enable + ")");
    }
}

void read_mdev_use(const HostFs& fs, const MdevHost& host, const std::vector<OpenNode>& open,
                   HostUse* use) {
    std::map<unsigned, std::vector<std::string>> groups;
    std::map<std::string, std::string> cdevs;
    for (const auto& [uuid, m] : host.mdevs) {
        if (m.iommu_group)
            groups[*m.iommu_group].push_back(uuid);
        for (const auto& name : fs.list(std::string(mdev_paths::kDevices) + "/" + uuid +
                                        "/vfio-dev"))
            cdevs.emplace(name, uuid);
    }
    holders(fs, open, groups, cdevs, use->mdevs);
}

void read_vfio_use(const HostFs& fs, const Topology& topo, HostUse* use) {
    read_vfio_use(fs, topo, scan_open_nodes(fs), use);
}

bool vfio_node_exists(const HostFs& fs, unsigned group) {
    const std::string node = pci_paths::vfio_group(group);
    return (fs.live() && fs.exists("proc/1/root/" + node)) || fs.exists(node);
}

}  // namespace vfiod
