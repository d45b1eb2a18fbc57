#include "io/device_use.hpp"

#include <map>
#include <set>

#include "core/strings.hpp"
#include "io/host_use.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

void add_nvidia_nodes(const HostFs& fs, std::vector<DeviceNode>* out) {
    auto gpus = fs.list("proc/driver/nvidia/gpus");
    if (gpus.empty())
        return;
    auto devices = fs.read("proc/devices");
    if (!devices)
        return;
    auto major = char_major(*devices, "nvidia-frontend");
    if (!major)
        major = char_major(*devices, "nvidia");
    if (!major)
        return;
    for (const auto& bdf : gpus) {
        auto owner = PciAddress::parse(bdf);
        auto info = fs.read("proc/driver/nvidia/gpus/" + bdf + "/information");
        auto minor = info ? line_value(*info, "Device Minor:") : std::nullopt;
        auto m = minor ? parse_int_attr(*minor) : std::nullopt;
        if (!owner || !m || *m < 0 || *m > 0xfffff)
            continue;
        out->push_back({{*major, static_cast<unsigned>(*m)}, *owner, "",
                        "/dev/nvidia" + std::to_string(*m)});
    }
}

// "../../devices/pci0000:00/…" seen from sys/dev/char, as a path from the root.
std::string from_dev_char(std::string_view target) {
    std::vector<std::string_view> parts{"sys", "dev", "char"};
    for (auto c : path_components(target)) {
        if (c == "..") {
            if (!parts.empty())
                parts.pop_back();
        } else if (c != ".") {
            parts.push_back(c);
        }
    }
    std::string out;
    for (auto c : parts)
        out.append(out.empty() ? "" : "/").append(c);
    return out;
}

std::string_view basename(std::string_view p) {
    auto slash = p.rfind('/');
    return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

}  // namespace

std::vector<DeviceNode> read_device_nodes(const HostFs& fs) {
    std::vector<DeviceNode> out;
    for (const auto& l : fs.links("sys/dev/char")) {
        auto devnum = parse_devnum(l.name);
        // The link's own text names the PCI function; most char devices (ttys, mem, input of
        // platform devices) have none and cost only this readlink.
        auto owner = devnum ? nearest_function(l.target) : std::nullopt;
        if (!owner)
            continue;
        std::string dir = from_dev_char(l.target);
        if (dir.find("/vfio-dev/") != std::string::npos)
            continue;
        out.push_back({*devnum, *owner, std::move(dir), ""});
    }
    add_nvidia_nodes(fs, &out);
    return out;
}

std::string node_path(const HostFs& fs, const DeviceNode& n) {
    if (!n.node.empty())
        return n.node;
    auto uevent = fs.read(n.dir + "/uevent");
    auto devname = uevent ? line_value(*uevent, "DEVNAME=") : std::nullopt;
    if (!devname || devname->empty() || devname->rfind("vfio/", 0) == 0)
        return "";
    return "/dev/" + *devname;
}

void find_device_use(const HostFs& fs, const std::vector<DeviceNode>& nodes,
                     const std::vector<OpenNode>& open, HostUse* use) {
    // A tree's fds only have a path: candidates by the node's last name ("controlC0" is both
    // the sysfs directory and the /dev entry), confirmed by DEVNAME.
    std::map<std::pair<unsigned, unsigned>, const DeviceNode*> by_devnum;
    std::multimap<std::string_view, const DeviceNode*> by_name;
    for (const auto& n : nodes) {
        by_devnum.emplace(n.devnum, &n);
        by_name.emplace(basename(n.node.empty() ? n.dir : n.node), &n);
    }
    std::map<const DeviceNode*, std::string> paths;  // read once per held node
    auto path_of = [&](const DeviceNode* n) -> const std::string& {
        auto it = paths.find(n);
        if (it == paths.end())
            it = paths.emplace(n, node_path(fs, *n)).first;
        return it->second;
    };
    std::set<std::pair<PciAddress, std::string>> seen;
    for (const auto& o : open) {
        const DeviceNode* n = nullptr;
        if (o.devnum) {
            auto it = by_devnum.find(*o.devnum);
            n = it == by_devnum.end() ? nullptr : it->second;
        } else {
            auto [lo, hi] = by_name.equal_range(basename(o.target));
            for (auto it = lo; it != hi && !n; ++it)
                if (path_of(it->second) == o.target)
                    n = it->second;
        }
        if (!n || path_of(n).empty())
            continue;
        std::string line = printable(path_of(n)) + " is open by " + process_name(fs, o.pid);
        if (seen.emplace(n->owner, line).second)
            use->device[n->owner].push_back(std::move(line));
    }
}

}  // namespace vfiod
