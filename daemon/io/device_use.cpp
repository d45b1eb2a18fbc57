#include "io/device_use.hpp"

#include <map>
#include <set>

#include "core/strings.hpp"
#include "io/host_use.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

void add_nvidia_nodes(const Sysfs& fs, std::vector<DeviceNode>* out) {
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
        out->push_back({"/dev/nvidia" + std::to_string(*m),
                        {*major, static_cast<unsigned>(*m)}, *owner});
    }
}

}  // namespace

std::vector<DeviceNode> read_device_nodes(const Sysfs& fs) {
    std::vector<DeviceNode> out;
    for (const auto& name : fs.list("sys/dev/char")) {
        auto devnum = parse_devnum(name);
        const std::string link = "sys/dev/char/" + name;
        // The link's own text names the PCI function; most char devices (ttys, mem, input of
        // platform devices) have none and cost only this readlink.
        auto target = devnum ? fs.readlink(link) : std::nullopt;
        auto owner = target ? nearest_function(*target) : std::nullopt;
        if (!owner)
            continue;
        auto dir = fs.resolve(link);
        auto uevent = dir ? fs.read(*dir + "/uevent") : std::nullopt;
        auto devname = uevent ? line_value(*uevent, "DEVNAME=") : std::nullopt;
        if (!devname || devname->empty() || devname->rfind("vfio/", 0) == 0)
            continue;
        out.push_back({"/dev/" + *devname, *devnum, *owner});
    }
    add_nvidia_nodes(fs, &out);
    return out;
}

void find_device_use(const Sysfs& fs, const std::vector<DeviceNode>& nodes,
                     const std::vector<OpenNode>& open, HostUse* use) {
    std::map<std::pair<unsigned, unsigned>, const DeviceNode*> by_devnum;
    std::map<std::string, const DeviceNode*> by_path;
    for (const auto& n : nodes) {
        by_devnum.emplace(n.devnum, &n);
        by_path.emplace(n.node, &n);
    }
    std::set<std::pair<PciAddress, std::string>> seen;
    for (const auto& o : open) {
        const DeviceNode* n = nullptr;
        if (o.devnum) {
            auto it = by_devnum.find(*o.devnum);
            n = it == by_devnum.end() ? nullptr : it->second;
        } else {
            auto it = by_path.find(o.target);
            n = it == by_path.end() ? nullptr : it->second;
        }
        if (!n)
            continue;
        std::string line = printable(n->node) + " is open by " + process_name(fs, o.pid);
        if (seen.emplace(n->owner, line).second)
            use->device[n->owner].push_back(std::move(line));
    }
}

}  // namespace vfiod
