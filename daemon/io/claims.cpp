#include "io/claims.hpp"

#include <cerrno>
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

std::vector<StorageClaim> read_claims(const HostFs& fs, const std::set<PciAddress>& functions) {
    std::vector<StorageClaim> out;
    if (functions.empty())
        return out;
    std::set<std::string> btrfs_members;
    for (const auto& uuid : fs.list("sys/fs/btrfs"))
        for (const auto& dev : fs.list("sys/fs/btrfs/" + uuid + "/devices"))
            btrfs_members.insert(dev);

    for (const auto& name : fs.list("sys/class/block")) {
        auto dir = fs.resolve("sys/class/block/" + name);
        if (!dir)
            continue;
        // The walk host_use attributes disks by: a native-multipath namespace belongs to every
        // controller that serves it.
        auto owned_by = block_owners(fs, *dir);
        std::erase_if(owned_by, [&](const PciAddress& a) { return !functions.count(a); });
        if (owned_by.empty())
            continue;
        if (auto why = claim_of(fs, name, *dir, btrfs_members); !why.empty())
            for (const auto& owner : owned_by)
                out.push_back({owner, why});
    }
    return out;
}

bool refuse_if_claimed(const HostFs& fs, GroupPlan* gp) {
    return refuse_claimed(gp, read_claims(fs, moving_functions(*gp)));
}

}  // namespace vfiod
