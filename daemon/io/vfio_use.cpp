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

void add(HostUse* use, const PciAddress& a, const std::string& line) {
    auto& lines = use->vfio[a];
    for (const auto& l : lines)
        if (l == line)
            return;
    lines.push_back(line);
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

    for (const auto& o : open) {
        std::string group = after(o.target, pci_paths::host_path(pci_paths::kVfioDir) + "/");
        if (all_digits(group)) {
            auto g = topo.groups.find(static_cast<unsigned>(std::strtoul(group.c_str(), nullptr, 10)));
            if (g == topo.groups.end())
                continue;
            for (const auto& a : g->second)
                add(use, a, o.target + " is open by " + process_name(fs, o.pid));
            continue;
        }
        std::string cdev = after(o.target, pci_paths::host_path(pci_paths::kVfioCdevs) + "/");
        auto c = cdevs.find(cdev);
        if (!cdev.empty() && c != cdevs.end())
            add(use, c->second, printable(o.target) + " is open by " + process_name(fs, o.pid));
    }

    // A host driver enables its device too; only on a vfio driver does the count mean a user.
    for (const auto& [addr, fn] : topo.functions) {
        if (fn.driver.find("vfio") == std::string::npos || fn.devpath.empty())
            continue;
        auto enable = fs.read(fn.devpath + "/enable");
        if (enable && all_digits(*enable) && std::strtoul(enable->c_str(), nullptr, 10) > 0)
            add(use, addr, "the device is enabled by a user (enable=" + *enable + ")");
    }
}

void read_vfio_use(const HostFs& fs, const Topology& topo, HostUse* use) {
    read_vfio_use(fs, topo, scan_open_nodes(fs), use);
}

}  // namespace vfiod
