#include "fake_tree.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace vfiod::test {

namespace {

std::vector<std::string> components(const std::string& rel) {
    std::vector<std::string> out;
    std::stringstream ss(rel);
    std::string part;
    while (std::getline(ss, part, '/'))
        if (!part.empty())
            out.push_back(part);
    return out;
}

// The kernel's sysfs links are relative ("../../../devices/…"); computing them the same way keeps
// the reader honest about resolving relative targets.
std::string relative_target(const std::string& link_rel, const std::string& target_rel) {
    auto from = components(link_rel);
    from.pop_back();  // the link's own name
    auto to = components(target_rel);
    size_t common = 0;
    while (common < from.size() && common < to.size() && from[common] == to[common])
        ++common;
    // A link to an ancestor names it from its parent ("device -> ../../../virtio0"), as sysfs does.
    if (common == to.size() && common > 0)
        --common;
    std::string out;
    for (size_t i = common; i < from.size(); ++i)
        out += "../";
    for (size_t i = common; i < to.size(); ++i) {
        out += to[i];
        if (i + 1 < to.size())
            out += '/';
    }
    return out;
}

std::string upper_hex(const std::string& s) {
    std::string out = s;
    for (auto& c : out)
        if (c >= 'a' && c <= 'f')
            c = static_cast<char>(c - 'a' + 'A');
    return out;
}

std::string parent_dir(const std::string& rel) {
    auto slash = rel.rfind('/');
    return slash == std::string::npos ? "" : rel.substr(0, slash);
}

// "0000:01:00.0" -> "0000"; "0000:01:00.0" -> "0000:01" for the host bridge name.
std::string domain_of(const std::string& bdf) { return bdf.substr(0, bdf.find(':')); }
std::string domain_bus_of(const std::string& bdf) { return bdf.substr(0, bdf.rfind(':')); }

}  // namespace

FakeTree::FakeTree() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/vfiod-fake-XXXXXX";
    if (!::mkdtemp(tmpl.data())) {
        ADD_FAILURE() << "mkdtemp " << tmpl << " failed";
        return;
    }
    std::error_code ec;
    // Canonical so devpath() can strip the root from canonical paths even if TMPDIR is a link.
    root_ = fs::canonical(tmpl, ec).string();
    if (ec)
        root_ = tmpl;
    for (const char* d : {"sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups",
                          "sys/class/iommu", "sys/class/net", "sys/class/block", "sys/module",
                          "sys/devices/virtual/net", "sys/devices/virtual/block", "proc/self",
                          "proc/net", "dev", "run"})
        fs::create_directories(root_ + "/" + d, ec);
    write_file("sys/bus/pci/drivers_probe", "");
    write_file("sys/bus/pci/rescan", "");
}

FakeTree::~FakeTree() {
    if (root_.empty() || root_ == "/")
        return;
    std::error_code ec;
    fs::remove_all(root_, ec);
}

FakeTree& FakeTree::write_file(const std::string& rel, const std::string& content) {
    std::error_code ec;
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path(), ec);
    std::ofstream out(root_ + "/" + rel, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out)
        ADD_FAILURE() << "FakeTree: cannot write " << rel;
    return *this;
}

FakeTree& FakeTree::symlink(const std::string& rel, const std::string& target) {
    std::error_code ec;
    fs::path p = root_ + "/" + rel;
    fs::create_directories(p.parent_path(), ec);
    fs::remove(p, ec);
    fs::create_symlink(target, p, ec);
    if (ec)
        ADD_FAILURE() << "FakeTree: cannot link " << rel << " -> " << target << ": " << ec.message();
    return *this;
}

FakeTree& FakeTree::link(const std::string& rel, const std::string& target) {
    return symlink(rel, relative_target(rel, target));
}

FakeTree& FakeTree::remove(const std::string& rel) {
    std::error_code ec;
    fs::remove_all(root_ + "/" + rel, ec);
    return *this;
}

FakeTree& FakeTree::enable_iommu() {
    const std::string dev = "sys/devices/virtual/iommu/dmar0";
    write_file(dev + "/uevent", "");
    symlink("sys/class/iommu/dmar0", relative_target("sys/class/iommu/dmar0", dev));
    return *this;
}

FakeTree& FakeTree::add_driver(const std::string& name) {
    const std::string dir = "sys/bus/pci/drivers/" + name;
    if (fs::exists(root_ + "/" + dir))
        return *this;
    for (const char* f : {"bind", "unbind", "new_id", "remove_id", "uevent"})
        write_file(dir + "/" + f, "");
    // A registered driver means its module is loaded (or built in): sys/module/<name with _>.
    std::string module = name;
    for (auto& c : module)
        if (c == '-')
            c = '_';
    std::error_code ec;
    fs::create_directories(root_ + "/sys/module/" + module, ec);
    return *this;
}

std::string FakeTree::devpath(const std::string& bdf) const {
    std::error_code ec;
    auto p = fs::canonical(root_ + "/sys/bus/pci/devices/" + bdf, ec);
    if (ec)
        return "";
    std::string s = p.string();
    return s.size() > root_.size() ? s.substr(root_.size() + 1) : "";
}

unsigned FakeTree::next_free_group() const {
    unsigned next = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_ + "/sys/kernel/iommu_groups", ec))
        next = std::max(next, static_cast<unsigned>(std::strtoul(e.path().filename().c_str(),
                                                                 nullptr, 10)) + 1);
    return next;
}

namespace {

std::string uevent_for(const FakeTree::Function& fn, const std::string& driver) {
    std::string cls = fn.class_code;
    while (cls.size() > 1 && cls.front() == '0')
        cls.erase(cls.begin());  // the kernel prints PCI_CLASS with %X
    std::string out;
    if (!driver.empty())
        out += "DRIVER=" + driver + "\n";
    out += "PCI_CLASS=" + upper_hex(cls) + "\n";
    out += "PCI_ID=" + upper_hex(fn.vendor) + ":" + upper_hex(fn.device) + "\n";
    out += "PCI_SUBSYS_ID=" + upper_hex(fn.vendor) + ":" + upper_hex(fn.device) + "\n";
    out += "PCI_SLOT_NAME=" + fn.address + "\n";
    return out;
}

std::string modalias_for(const FakeTree::Function& fn) {
    std::string v = upper_hex(fn.vendor), d = upper_hex(fn.device);
    std::string c = upper_hex(fn.class_code);
    c.resize(6, '0');
    return "pci:v0000" + v + "d0000" + d + "sv0000" + v + "sd0000" + d + "bc" + c.substr(0, 2) +
           "sc" + c.substr(2, 2) + "i" + c.substr(4, 2);
}

// Keeps uevent's DRIVER= line in step with the driver link, as the kernel does.
void set_uevent_driver(FakeTree& t, const std::string& dir, const std::string& driver) {
    std::ifstream in(t.root() + "/" + dir + "/uevent");
    std::string line, rest;
    while (std::getline(in, line))
        if (line.rfind("DRIVER=", 0) != 0)
            rest += line + "\n";
    t.write_file(dir + "/uevent", (driver.empty() ? "" : "DRIVER=" + driver + "\n") + rest);
}

}  // namespace

FakeTree& FakeTree::add_function(const Function& fn) {
    std::string dir;
    std::string parent = fn.parent;
    if (!parent.empty()) {
        std::string pdir = devpath(parent);
        if (pdir.empty()) {
            ADD_FAILURE() << "FakeTree: parent " << parent << " of " << fn.address << " is missing";
            return *this;
        }
        // A function in another PCI domain behind a device (Intel VMD) sits under its own host
        // bridge directory below that device: …/0000:00:0e.0/pci10000:e0/10000:e0:1d.0.
        if (domain_of(parent) != domain_of(fn.address))
            pdir += "/pci" + domain_bus_of(fn.address);
        dir = pdir + "/" + fn.address;
    } else if (!fn.physfn.empty() && !devpath(fn.physfn).empty()) {
        // VFs appear beside their PF, under the same upstream port.
        dir = parent_dir(devpath(fn.physfn)) + "/" + fn.address;
    } else {
        dir = "sys/devices/pci" + domain_bus_of(fn.address) + "/" + fn.address;
    }

    write_file(dir + "/vendor", "0x" + fn.vendor + "\n");
    write_file(dir + "/device", "0x" + fn.device + "\n");
    write_file(dir + "/subsystem_vendor", "0x" + fn.vendor + "\n");
    write_file(dir + "/subsystem_device", "0x" + fn.device + "\n");
    write_file(dir + "/class", "0x" + fn.class_code + "\n");
    write_file(dir + "/revision", "0x00\n");
    write_file(dir + "/driver_override",
               (fn.driver_override.empty() ? "(null)" : fn.driver_override) + "\n");
    write_file(dir + "/numa_node", std::to_string(fn.numa_node) + "\n");
    write_file(dir + "/uevent", uevent_for(fn, fn.driver));
    write_file(dir + "/modalias", modalias_for(fn) + "\n");
    write_file(dir + "/enable", "0\n");
    write_file(dir + "/reset_method", "flr bus\n");
    write_file(dir + "/remove", "");
    write_file(dir + "/config", std::string(64, '\0'));
    symlink(dir + "/subsystem", relative_target(dir + "/subsystem", "sys/bus/pci"));
    if (fn.boot_vga)
        write_file(dir + "/boot_vga", std::to_string(*fn.boot_vga) + "\n");
    if (fn.sriov_totalvfs > 0) {
        write_file(dir + "/sriov_totalvfs", std::to_string(fn.sriov_totalvfs) + "\n");
        write_file(dir + "/sriov_numvfs", std::to_string(fn.sriov_numvfs) + "\n");
        write_file(dir + "/sriov_drivers_autoprobe", "1\n");
        write_file(dir + "/sriov_offset", std::to_string(fn.sriov_offset) + "\n");
        write_file(dir + "/sriov_stride", std::to_string(fn.sriov_stride) + "\n");
        // Printed with %x: QEMU's NVMe shows "10".
        std::string vf_device = fn.sriov_vf_device.empty() ? fn.device : fn.sriov_vf_device;
        while (vf_device.size() > 1 && vf_device.front() == '0')
            vf_device.erase(vf_device.begin());
        write_file(dir + "/sriov_vf_device", vf_device + "\n");
    }

    const std::string bus_link = "sys/bus/pci/devices/" + fn.address;
    symlink(bus_link, relative_target(bus_link, dir));

    if (!fn.physfn.empty()) {
        std::string pf = devpath(fn.physfn);
        if (pf.empty()) {
            ADD_FAILURE() << "FakeTree: PF " << fn.physfn << " of " << fn.address << " is missing";
        } else {
            symlink(dir + "/physfn", relative_target(dir + "/physfn", pf));
            unsigned n = 0;
            while (fs::is_symlink(root_ + "/" + pf + "/virtfn" + std::to_string(n)))
                ++n;
            std::string vf_link = pf + "/virtfn" + std::to_string(n);
            symlink(vf_link, relative_target(vf_link, dir));
        }
    }

    if (fn.group) {
        const std::string gdir = "sys/kernel/iommu_groups/" + std::to_string(*fn.group);
        if (!fs::exists(root_ + "/" + gdir + "/type"))
            write_file(gdir + "/type", "DMA\n");
        symlink(dir + "/iommu_group", relative_target(dir + "/iommu_group", gdir));
        const std::string member = gdir + "/devices/" + fn.address;
        symlink(member, relative_target(member, dir));
    }

    if (!fn.driver.empty())
        bind(fn.address, fn.driver);
    return *this;
}

void FakeTree::bind(const std::string& bdf, const std::string& driver) {
    std::string dir = devpath(bdf);
    if (dir.empty()) {
        ADD_FAILURE() << "FakeTree: bind of missing " << bdf;
        return;
    }
    if (fs::is_symlink(root_ + "/" + dir + "/driver"))
        unbind(bdf);
    add_driver(driver);
    const std::string ddir = "sys/bus/pci/drivers/" + driver;
    symlink(dir + "/driver", relative_target(dir + "/driver", ddir));
    symlink(ddir + "/" + bdf, relative_target(ddir + "/" + bdf, dir));

    // vfio-pci leaves the device disabled until a user opens it; host drivers enable it.
    write_file(dir + "/enable", driver == "vfio-pci" ? "0\n" : "1\n");

    set_uevent_driver(*this, dir, driver);

    if (driver == "vfio-pci" && fs::is_symlink(root_ + "/" + dir + "/iommu_group")) {
        std::string group = fs::read_symlink(root_ + "/" + dir + "/iommu_group").filename();
        if (!fs::exists(root_ + "/dev/vfio/" + group))
            write_file("dev/vfio/" + group, "");
        if (!fs::exists(root_ + "/dev/vfio/vfio"))
            write_file("dev/vfio/vfio", "");
    }
}

void FakeTree::unbind(const std::string& bdf) {
    std::string dir = devpath(bdf);
    if (dir.empty())
        return;
    const std::string link = root_ + "/" + dir + "/driver";
    if (!fs::is_symlink(link))
        return;
    std::string driver = fs::read_symlink(link).filename();
    std::error_code ec;
    fs::remove(link, ec);
    fs::remove(root_ + "/sys/bus/pci/drivers/" + driver + "/" + bdf, ec);
    write_file(dir + "/enable", "0\n");

    set_uevent_driver(*this, dir, "");

    if (driver != "vfio-pci" || !fs::is_symlink(root_ + "/" + dir + "/iommu_group"))
        return;
    std::string group = fs::read_symlink(root_ + "/" + dir + "/iommu_group").filename();
    const std::string members = root_ + "/sys/kernel/iommu_groups/" + group + "/devices";
    for (const auto& e : fs::directory_iterator(members, ec)) {
        auto d = e.path() / "driver";
        if (fs::is_symlink(d) && fs::read_symlink(d).filename() == "vfio-pci")
            return;  // the group's node stays while any member is still on vfio-pci
    }
    fs::remove(root_ + "/dev/vfio/" + group, ec);
}

void FakeTree::remove_function(const std::string& bdf) {
    std::string dir = devpath(bdf);
    if (dir.empty())
        return;
    unbind(bdf);
    std::error_code ec;
    const std::string abs_dir = root_ + "/" + dir;
    // Class links of netdevs and disks below the function vanish with it.
    for (const char* cls : {"sys/class/net", "sys/class/block"}) {
        for (const auto& e : fs::directory_iterator(root_ + "/" + cls, ec)) {
            auto target = fs::weakly_canonical(e.path(), ec).string();
            if (target.rfind(abs_dir + "/", 0) == 0)
                fs::remove(e.path(), ec);
        }
    }
    if (fs::is_symlink(abs_dir + "/physfn")) {
        auto pf = fs::canonical(abs_dir + "/physfn", ec);
        for (const auto& e : fs::directory_iterator(pf, ec))
            if (e.path().filename().string().rfind("virtfn", 0) == 0 &&
                fs::weakly_canonical(e.path(), ec).string() == abs_dir)
                fs::remove(e.path(), ec);
    }
    if (fs::is_symlink(abs_dir + "/iommu_group")) {
        auto gdir = fs::canonical(abs_dir + "/iommu_group", ec);
        fs::remove(gdir / "devices" / bdf, ec);
        if (fs::is_empty(gdir / "devices", ec))
            fs::remove_all(gdir, ec);  // the kernel drops a group with its last device
    }
    fs::remove(root_ + "/sys/bus/pci/devices/" + bdf, ec);
    fs::remove_all(abs_dir, ec);
}

namespace {

// The canonical dir behind sys/class/<cls>/<name>, relative to root; "" when absent.
std::string class_dir(const std::string& root, const std::string& cls, const std::string& name) {
    std::error_code ec;
    auto p = fs::canonical(root + "/sys/class/" + cls + "/" + name, ec);
    if (ec)
        return "";
    return p.string().substr(root.size() + 1);
}


void write_netdev_attrs(FakeTree& t, const std::string& dir, const std::string& ifname,
                        unsigned ifindex) {
    t.write_file(dir + "/ifindex", std::to_string(ifindex) + "\n");
    t.write_file(dir + "/iflink", std::to_string(ifindex) + "\n");
    char mac[32];
    std::snprintf(mac, sizeof mac, "52:54:00:00:%02x:%02x\n", (ifindex >> 8) & 0xff, ifindex & 0xff);
    t.write_file(dir + "/address", mac);
    t.write_file(dir + "/operstate", "up\n");
    t.write_file(dir + "/type", "1\n");
    t.write_file(dir + "/mtu", "1500\n");
    t.write_file(dir + "/uevent",
                 "INTERFACE=" + ifname + "\nIFINDEX=" + std::to_string(ifindex) + "\n");
    t.symlink(dir + "/subsystem", relative_target(dir + "/subsystem", "sys/class/net"));
    t.symlink("sys/class/net/" + ifname, relative_target("sys/class/net/" + ifname, dir));
}

unsigned next_ifindex(const std::string& root) {
    unsigned n = 2;  // 1 is lo
    std::error_code ec;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(root + "/sys/class/net", ec))
        ++n;
    return n;
}

}  // namespace

FakeTree& FakeTree::add_netdev(const std::string& bdf, const std::string& ifname,
                               const std::string& subdir) {
    std::string fdir = devpath(bdf);
    if (fdir.empty()) {
        ADD_FAILURE() << "FakeTree: netdev " << ifname << " on missing " << bdf;
        return *this;
    }
    std::string owner = subdir.empty() ? fdir : fdir + "/" + subdir;
    if (!subdir.empty())
        write_file(owner + "/uevent", "");
    std::string dir = owner + "/net/" + ifname;
    write_netdev_attrs(*this, dir, ifname, next_ifindex(root_));
    symlink(dir + "/device", relative_target(dir + "/device", owner));
    return *this;
}

FakeTree& FakeTree::add_virtual_netdev(const std::string& ifname) {
    write_netdev_attrs(*this, "sys/devices/virtual/net/" + ifname, ifname, next_ifindex(root_));
    return *this;
}

FakeTree& FakeTree::stack_netdev(const std::string& lower, const std::string& upper,
                                 bool as_master) {
    std::string ldir = class_dir(root_, "net", lower), udir = class_dir(root_, "net", upper);
    if (ldir.empty() || udir.empty()) {
        ADD_FAILURE() << "FakeTree: stack " << lower << " under " << upper << ": missing netdev";
        return *this;
    }
    if (as_master)
        symlink(ldir + "/master", relative_target(ldir + "/master", udir));
    symlink(ldir + "/upper_" + upper, relative_target(ldir + "/upper_" + upper, udir));
    symlink(udir + "/lower_" + lower, relative_target(udir + "/lower_" + lower, ldir));
    return *this;
}

namespace {

void write_block_attrs(FakeTree& t, const std::string& dir, const std::string& name,
                       unsigned major, unsigned minor, bool partition) {
    t.write_file(dir + "/dev", std::to_string(major) + ":" + std::to_string(minor) + "\n");
    t.write_file(dir + "/size", "2097152\n");
    t.write_file(dir + "/ro", "0\n");
    t.write_file(dir + "/uevent", "MAJOR=" + std::to_string(major) + "\nMINOR=" +
                                      std::to_string(minor) + "\nDEVNAME=" + name +
                                      "\nDEVTYPE=" + (partition ? "partition" : "disk") + "\n");
    if (partition)
        t.write_file(dir + "/partition", name.substr(name.find_last_not_of("0123456789") + 1) + "\n");
    else
        t.write_file(dir + "/removable", "0\n");
    t.write_file(dir + "/holders/.keep", "");
    t.remove(dir + "/holders/.keep");
    if (!partition) {
        t.write_file(dir + "/slaves/.keep", "");
        t.remove(dir + "/slaves/.keep");
    }
    t.symlink(dir + "/subsystem", relative_target(dir + "/subsystem", "sys/class/block"));
    t.symlink("sys/class/block/" + name, relative_target("sys/class/block/" + name, dir));
}

}  // namespace

FakeTree& FakeTree::add_block(const std::string& bdf, const std::string& subdir,
                              const std::string& name, unsigned major, unsigned minor) {
    std::string owner;
    if (bdf.empty()) {
        owner = subdir;  // a virtual parent, e.g. sys/devices/virtual/nvme-subsystem/nvme-subsys0
    } else {
        std::string fdir = devpath(bdf);
        if (fdir.empty()) {
            ADD_FAILURE() << "FakeTree: block " << name << " on missing " << bdf;
            return *this;
        }
        owner = subdir.empty() ? fdir : fdir + "/" + subdir;
    }
    std::string dir = owner + "/block/" + name;
    // A multipath head sits directly in its subsystem directory, without a block/ level.
    if (bdf.empty())
        dir = owner + "/" + name;
    write_block_attrs(*this, dir, name, major, minor, false);
    symlink(dir + "/device", relative_target(dir + "/device", owner));
    return *this;
}

FakeTree& FakeTree::add_char_device(const std::string& bdf, const std::string& subdir,
                                    const std::string& devname, unsigned major, unsigned minor) {
    std::string fdir = devpath(bdf);
    if (fdir.empty()) {
        ADD_FAILURE() << "FakeTree: char device " << devname << " on missing " << bdf;
        return *this;
    }
    const std::string dir = fdir + "/" + subdir;
    const std::string num = std::to_string(major) + ":" + std::to_string(minor);
    write_file(dir + "/dev", num + "\n");
    write_file(dir + "/uevent", "MAJOR=" + std::to_string(major) + "\nMINOR=" +
                                    std::to_string(minor) + "\nDEVNAME=" + devname + "\n");
    symlink("sys/dev/char/" + num, relative_target("sys/dev/char/" + num, dir));
    return *this;
}

FakeTree& FakeTree::hold_open(unsigned pid, const std::string& comm, unsigned fd,
                              const std::string& target) {
    const std::string dir = "proc/" + std::to_string(pid);
    write_file(dir + "/comm", comm + "\n");
    return symlink(dir + "/fd/" + std::to_string(fd), target);
}

FakeTree& FakeTree::add_partition(const std::string& disk, const std::string& name,
                                  unsigned major, unsigned minor) {
    std::string ddir = class_dir(root_, "block", disk);
    if (ddir.empty()) {
        ADD_FAILURE() << "FakeTree: partition " << name << " of missing disk " << disk;
        return *this;
    }
    write_block_attrs(*this, ddir + "/" + name, name, major, minor, true);
    return *this;
}

FakeTree& FakeTree::add_holder(const std::string& name, const std::string& holder) {
    std::string dir = class_dir(root_, "block", name);
    if (dir.empty()) {
        ADD_FAILURE() << "FakeTree: holder " << holder << " of missing " << name;
        return *this;
    }
    std::string hdir = class_dir(root_, "block", holder);
    if (hdir.empty()) {
        hdir = "sys/devices/virtual/block/" + holder;
        write_file(hdir + "/uevent", "DEVNAME=" + holder + "\nDEVTYPE=disk\n");
        write_file(hdir + "/holders/.keep", "");
        remove(hdir + "/holders/.keep");
        symlink("sys/class/block/" + holder, relative_target("sys/class/block/" + holder, hdir));
    }
    symlink(dir + "/holders/" + holder, relative_target(dir + "/holders/" + holder, hdir));
    symlink(hdir + "/slaves/" + name, relative_target(hdir + "/slaves/" + name, dir));
    return *this;
}

}  // namespace vfiod::test
