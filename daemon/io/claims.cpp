#include "io/claims.hpp"

#include <cerrno>
#include <map>
#include <set>

#include "core/strings.hpp"
#include "io/host_use.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

// "… (zfs_member)" from udev's database, when udev recognised the content.
std::string fs_type(const HostFs& fs, const std::string& devnum) {
    auto data = fs.read("run/udev/data/b" + devnum);
    auto type = data ? line_value(*data, "E:ID_FS_TYPE=") : std::nullopt;
    return type && !type->empty() ? " (udev sees " + printable(*type) + " on it)" : "";
}

// Why the kernel holds block device `name` (sysfs dir `dir`), or "".
std::string claim_of(const HostFs& fs, const std::string& name, const std::string& dir,
                     const std::set<std::string>& btrfs_members) {
    if (btrfs_members.count(name))
        return name + " is a member of a mounted btrfs filesystem";
    if (fs.exists(dir + "/bcache"))
        return name + " is claimed by bcache";
    auto devnum = fs.read(dir + "/dev");
    if (!devnum || !parse_devnum(*devnum))
        return "";
    auto uevent = fs.read(dir + "/uevent");
    auto devname = uevent ? line_value(*uevent, "DEVNAME=") : std::nullopt;
    if (!devname || devname->empty() || devname->find("..") != std::string::npos)
        return "";
    if (fs.probe_exclusive("proc/1/root/dev/" + *devname) != EBUSY)
        return "";
    std::string type = fs_type(fs, *devnum);
    return name + " is claimed by the kernel" +
           (type.empty() ? " (ZFS, btrfs, LVM, bcache, multipath…)" : type);
}

}  // namespace

bool refuse_if_claimed(const HostFs& fs, GroupPlan* gp) {
    if (gp->action != Action::Bind)
        return false;
    std::set<PciAddress> moving;
    for (const auto& d : gp->devices)
        if (!d.writes.empty())
            moving.insert(d.address);
    std::set<std::string> btrfs_members;
    for (const auto& uuid : fs.list("sys/fs/btrfs"))
        for (const auto& dev : fs.list("sys/fs/btrfs/" + uuid + "/devices"))
            btrfs_members.insert(dev);

    std::map<PciAddress, std::vector<std::string>> found;
    for (const auto& name : fs.list("sys/class/block")) {
        auto dir = fs.resolve("sys/class/block/" + name);
        auto owner = dir ? nearest_function(*dir) : std::nullopt;
        if (!owner || !moving.count(*owner))
            continue;
        if (auto why = claim_of(fs, name, *dir, btrfs_members); !why.empty())
            found[*owner].push_back(why);
    }
    if (found.empty())
        return false;
    gp->action = Action::Refuse;
    gp->reason = Reason::InUseStorage;
    gp->blockers.clear();
    gp->details.clear();
    for (auto& [addr, lines] : found) {
        gp->blockers.push_back(addr);
        for (auto& l : lines)
            gp->details.push_back(addr.str() + ": " + l);
    }
    for (auto& d : gp->devices)
        d.writes.clear();
    return true;
}

}  // namespace vfiod
