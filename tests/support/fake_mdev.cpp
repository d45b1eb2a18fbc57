#include "fake_mdev.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/pci_address.hpp"
#include "kernel_parse.hpp"

namespace vfiod::test {

namespace {

const std::string kMdevBus = "sys/class/mdev_bus/";
const std::string kBusDevices = "sys/bus/mdev/devices/";
const std::string kBusDrivers = "sys/bus/mdev/drivers/";
const std::string kGroups = "sys/kernel/iommu_groups/";
const std::string kVfioClass = "sys/class/vfio/";
const std::string kVfioDevices = "sys/devices/virtual/vfio/";
const std::string kVfioDevClass = "sys/class/vfio-dev/";
const std::string kTypes = "/mdev_supported_types/";
// The vfio group's character device major: the guest's (dynamic) one.
const unsigned kVfioMajor = 243;

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

// A tree path ("sys/devices/virtual/mbochs/mbochs") as a uevent's DEVPATH.
std::string devpath_of(const std::string& rel) { return rel.substr(3); }

// guid_parse() of the first 36 characters: hyphens at 8, 13, 18 and 23, hex digits elsewhere;
// the UUID in lower case, as the device is named ("%pUl").
std::optional<std::string> parse_uuid(const std::string& text) {
    if (text.size() < 36)
        return std::nullopt;
    std::string out = text.substr(0, 36);
    for (size_t i = 0; i < out.size(); ++i) {
        bool hyphen = i == 8 || i == 13 || i == 18 || i == 23;
        if (hyphen ? out[i] != '-' : !std::isxdigit(static_cast<unsigned char>(out[i])))
            return std::nullopt;
        out[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[i])));
    }
    return out;
}

bool is_uuid(const std::string& name) {
    return name.size() == 36 && parse_uuid(name) == name;
}

unsigned to_unsigned(const std::string& s) {
    return static_cast<unsigned>(std::strtoul(s.c_str(), nullptr, 10));
}

}  // namespace

std::string Uevent::get(const std::string& key) const {
    for (const auto& [k, v] : env)
        if (k == key)
            return v;
    return "";
}

std::string Uevent::str() const {
    std::string out = action + " " + devpath + " " + subsystem;
    for (const auto& [k, v] : env)
        out += " " + k + "=" + v;
    return out;
}

MdevParentSpec mbochs_parent() {
    MdevParentSpec s;
    s.name = s.class_name = s.mdev_driver = "mbochs";
    s.budget = 256;  // MB
    s.types = {{"small", "mbochs-small", 4, "virtual display, 4 MB video memory"},
               {"medium", "mbochs-medium", 16, "virtual display, 16 MB video memory"},
               {"large", "mbochs-large", 64, "virtual display, 64 MB video memory"}};
    return s;
}

MdevParentSpec vgpu_parent(unsigned i) {
    MdevParentSpec s;
    s.name = "vgpu" + std::to_string(i);
    s.class_name = s.mdev_driver = "vgpu";
    s.budget = 64;
    s.types = {{"1q", "GRID-1Q", 1, "1 GB framebuffer"}, {"2q", "GRID-2Q", 2, "2 GB framebuffer"}};
    return s;
}

MdevParentSpec mtty_parent() {
    MdevParentSpec s;
    s.name = s.class_name = s.mdev_driver = "mtty";
    s.budget = 24;  // ports
    s.types = {{"1", "Single port serial", 1, ""}, {"2", "Dual port serial", 2, ""}};
    return s;
}

MdevParentSpec mdpy_parent() {
    MdevParentSpec s;
    s.name = s.class_name = s.mdev_driver = "mdpy";
    s.get_available = false;
    s.budget = 4;  // max_instances
    s.types = {{"vga", "mdpy-vga", 1, "virtual display, 640x480 framebuffer"},
               {"xga", "mdpy-xga", 1, "virtual display, 1024x768 framebuffer"},
               {"hd", "mdpy-hd", 1, "virtual display, 1920x1080 framebuffer"}};
    return s;
}

FakeMdev::FakeMdev(FakeTree& tree, FakeMdevCore& core)
    : tree_(tree), sysfs_(tree.root()), core_(core) {}

Uevent FakeMdev::parent_event(const Parent& p, const std::string& action,
                              const std::string& state) const {
    Uevent ev{action, devpath_of(p.dir), p.spec.class_name, {}};
    if (p.spec.class_name.empty()) {
        ev.subsystem = "pci";
        if (auto drv = sysfs_.link_name(p.dir + "/driver"))
            ev.env.emplace_back("DRIVER", *drv);
        ev.env.emplace_back("PCI_SLOT_NAME", p.spec.name);
    }
    if (!state.empty())
        ev.env.emplace_back("MDEV_STATE", state);
    return ev;
}

void FakeMdev::register_parent(const MdevParentSpec& spec, bool announce) {
    Parent p;
    p.spec = spec;
    if (spec.class_name.empty()) {
        p.dir = tree_.devpath(spec.name);
        if (p.dir.empty()) {
            ADD_FAILURE() << "FakeMdev: PCI parent " << spec.name << " is missing";
            return;
        }
        // dev_driver_string(): the bound driver's name, else the bus's.
        p.prefix = sysfs_.link_name(p.dir + "/driver").value_or("pci");
    } else {
        p.dir = "sys/devices/virtual/" + spec.class_name + "/" + spec.name;
        p.prefix = spec.class_name;
        // The class device (device_register() before mdev_register_parent()).
        if (!sysfs_.exists(p.dir)) {
            tree_.write_file(p.dir + "/uevent", "");
            tree_.link(p.dir + "/subsystem", "sys/class/" + spec.class_name);
            tree_.link("sys/class/" + spec.class_name + "/" + spec.name, p.dir);
            if (announce)
                core_.raise(parent_event(p, "add", ""));
        }
    }
    lay_out_parent(p);
    auto& stored = parents_[spec.name] = p;
    adopt(stored);
    update_available(stored);
    if (announce)
        core_.raise(parent_event(stored, "change", "registered"));
}

void FakeMdev::lay_out_parent(Parent& p) {
    const std::string drv = kBusDrivers + p.spec.mdev_driver;
    for (const char* f : {"bind", "unbind", "uevent"})
        if (!sysfs_.exists(drv + "/" + f))
            tree_.write_file(drv + "/" + f, "");
    for (const auto& t : p.spec.types) {
        const std::string dir = p.dir + kTypes + p.prefix + "-" + t.id;
        tree_.write_file(dir + "/create", "");
        tree_.write_file(dir + "/device_api", p.spec.device_api + "\n");
        tree_.write_file(dir + "/name",
                         (t.pretty_name.empty() ? p.prefix + "-" + t.id : t.pretty_name) + "\n");
        if (!t.description.empty())
            tree_.write_file(dir + "/description", t.description + "\n");
        tree_.write_file(dir + "/devices/.keep", "");
        tree_.remove(dir + "/devices/.keep");
    }
    tree_.link(kMdevBus + p.spec.name, p.dir);
}

// Mdevs already in the tree (a fake kernel started over it): each UUID child of the parent with
// an mdev_type link, holding its type's cost.
void FakeMdev::adopt(Parent& p) {
    for (const auto& name : sysfs_.list(p.dir)) {
        if (!is_uuid(name))
            continue;
        const std::string dir = p.dir + "/" + name;
        auto type = sysfs_.link_name(dir + "/mdev_type");
        const MdevParentSpec::Type* t = type ? type_of(p, *type) : nullptr;
        if (!t)
            continue;
        Mdev m;
        m.parent = p.spec.name;
        m.type = *type;
        m.group = to_unsigned(sysfs_.link_name(dir + "/iommu_group").value_or("0"));
        auto vfio = sysfs_.list(dir + "/vfio-dev");
        m.vfio_index = vfio.empty() ? 0 : to_unsigned(vfio[0].substr(4));
        m.cost = p.spec.get_available ? t->cost : 1;
        m.seq = ++seq_;
        p.used += m.cost;
        mdevs_[name] = m;
    }
}

const MdevParentSpec::Type* FakeMdev::type_of(const Parent& p,
                                              const std::string& type_dir) const {
    for (const auto& t : p.spec.types)
        if (p.prefix + "-" + t.id == type_dir)
            return &t;
    return nullptr;
}

unsigned FakeMdev::available(const Parent& p, const MdevParentSpec::Type& t) const {
    unsigned left = p.spec.budget > p.used ? p.spec.budget - p.used : 0;
    return p.spec.get_available ? left / std::max(1u, t.cost) : left;
}

void FakeMdev::update_available(const Parent& p) {
    for (const auto& t : p.spec.types)
        tree_.write_file(p.dir + kTypes + p.prefix + "-" + t.id + "/available_instances",
                         std::to_string(available(p, t)) + "\n");
}

std::string FakeMdev::mdev_dir(const std::string& uuid) const {
    auto m = mdevs_.find(uuid);
    return m == mdevs_.end() ? "" : parents_.at(m->second.parent).dir + "/" + uuid;
}

// vfio_device's index: the lowest one no vfio-dev device has (PCI functions on vfio-pci have one
// too on a real host; a fake tree does not lay theirs out).
unsigned FakeMdev::next_vfio_index() const {
    std::set<unsigned> taken;
    for (const auto& name : sysfs_.list(kVfioDevClass))
        taken.insert(to_unsigned(name.substr(4)));
    unsigned i = 0;
    while (taken.count(i))
        ++i;
    return i;
}

std::optional<int> FakeMdev::store(const std::string& canonical, const std::string& value,
                                   std::string* waits) {
    for (auto& [name, p] : parents_) {
        if (!starts_with(canonical, p.dir + kTypes))
            continue;
        std::string rest = canonical.substr(p.dir.size() + kTypes.size());
        auto slash = rest.find('/');
        if (slash == std::string::npos || !type_of(p, rest.substr(0, slash)))
            return std::nullopt;
        std::string attr = rest.substr(slash + 1);
        if (attr == "create")
            return create(p, rest.substr(0, slash), value);
        // The others have no store(): sysfs refuses to open them for writing, even for root.
        if (attr == "available_instances" || attr == "name" || attr == "device_api" ||
            attr == "description")
            return EACCES;
        return std::nullopt;
    }
    auto slash = canonical.rfind('/');
    if (slash == std::string::npos || canonical.substr(slash + 1) != "remove")
        return std::nullopt;
    std::string dir = canonical.substr(0, slash);
    std::string uuid = dir.substr(dir.rfind('/') + 1);
    if (mdev_dir(uuid) != dir)
        return std::nullopt;
    return remove(uuid, value, waits);
}

bool FakeMdev::write_only(const std::string& canonical) const {
    auto slash = canonical.rfind('/');
    if (slash == std::string::npos)
        return false;
    std::string attr = canonical.substr(slash + 1), dir = canonical.substr(0, slash);
    if (attr == "remove")
        return mdev_dir(dir.substr(dir.rfind('/') + 1)) == dir;
    if (attr != "create")
        return false;
    for (const auto& [name, p] : parents_)
        if (starts_with(dir, p.dir + kTypes) && type_of(p, dir.substr(dir.rfind('/') + 1)))
            return true;
    return false;
}

// create_store() and mdev_device_create(), then the parent driver's probe and the vfio
// registration it makes (vfio_register_emulated_iommu_dev).
int FakeMdev::create(Parent& p, const std::string& type_dir, const std::string& value) {
    if (value.size() < 36 || value.size() > 37)
        return EINVAL;
    auto uuid = parse_uuid(value);
    if (!uuid)
        return EINVAL;
    if (mdevs_.count(*uuid))
        return EEXIST;
    const MdevParentSpec::Type& t = *type_of(p, type_dir);
    const unsigned cost = p.spec.get_available ? t.cost : 1;
    // Without get_available the core counts instances and refuses before adding anything.
    if (!p.spec.get_available && p.used >= p.spec.budget)
        return EUSERS;

    // device_add(): the mdev appears driverless.
    const std::string dir = p.dir + "/" + *uuid;
    tree_.write_file(dir + "/uevent", "");
    tree_.write_file(dir + "/remove", "");
    tree_.link(dir + "/subsystem", "sys/bus/mdev");
    tree_.link(kBusDevices + *uuid, dir);
    core_.raise({"add", devpath_of(dir), "mdev", {}});

    // The driver's probe: a get_available driver takes its budget here (mbochs, mtty: ENOSPC).
    int err = p.probe_error;
    if (!err && p.spec.get_available && p.used + cost > p.spec.budget)
        err = ENOSPC;
    if (err) {
        tree_.remove(kBusDevices + *uuid);
        tree_.remove(dir);
        core_.raise({"remove", devpath_of(dir), "mdev", {}});
        return err;
    }
    p.used += cost;

    Mdev m;
    m.parent = p.spec.name;
    m.type = type_dir;
    m.cost = cost;
    m.seq = ++seq_;
    // An IOMMU group of its own, named as vfio names emulated ones, and the vfio group device
    // with its node /dev/vfio/<N>.
    m.group = tree_.next_free_group();
    const std::string n = std::to_string(m.group), gdir = kGroups + n;
    tree_.write_file(gdir + "/type", "unknown\n");
    tree_.write_file(gdir + "/name", "vfio-noiommu\n");
    tree_.link(gdir + "/devices/" + *uuid, dir);
    tree_.link(dir + "/iommu_group", gdir);
    unsigned minor = 0;
    std::set<unsigned> minors;
    for (const auto& g : sysfs_.list(kVfioDevices)) {
        std::string d = sysfs_.read(kVfioDevices + g + "/dev").value_or("");
        minors.insert(to_unsigned(d.substr(d.find(':') + 1)));
    }
    while (minors.count(minor))
        ++minor;
    const std::string vdir = kVfioDevices + n;
    tree_.write_file(vdir + "/dev", std::to_string(kVfioMajor) + ":" + std::to_string(minor) + "\n");
    tree_.write_file(vdir + "/uevent", "MAJOR=" + std::to_string(kVfioMajor) + "\nMINOR=" +
                                           std::to_string(minor) + "\nDEVNAME=vfio/" + n + "\n");
    tree_.link(vdir + "/subsystem", "sys/class/vfio");
    tree_.link(kVfioClass + n, vdir);
    tree_.write_file("dev/vfio/" + n, "");
    if (!sysfs_.exists("dev/vfio/vfio"))
        tree_.write_file("dev/vfio/vfio", "");
    core_.raise({"add", devpath_of(vdir), "vfio", {{"DEVNAME", "/dev/vfio/" + n}}});

    // The vfio device (vfio-dev/vfio<M>; no node before 6.6).
    m.vfio_index = next_vfio_index();
    const std::string vfio = "vfio" + std::to_string(m.vfio_index);
    const std::string ddir = dir + "/vfio-dev/" + vfio;
    tree_.write_file(ddir + "/uevent", "");
    tree_.link(ddir + "/subsystem", "sys/class/vfio-dev");
    tree_.link(kVfioDevClass + vfio, ddir);
    core_.raise({"add", devpath_of(ddir), "vfio-dev", {}});

    // Bound to the parent's mdev driver, then mdev_create_sysfs_files().
    const std::string drv = kBusDrivers + p.spec.mdev_driver;
    tree_.link(dir + "/driver", drv);
    tree_.link(drv + "/" + *uuid, dir);
    tree_.write_file(dir + "/uevent", "DRIVER=" + p.spec.mdev_driver + "\n");
    core_.raise({"bind", devpath_of(dir), "mdev", {{"DRIVER", p.spec.mdev_driver}}});
    const std::string tdir = p.dir + kTypes + type_dir;
    tree_.link(tdir + "/devices/" + *uuid, dir);
    tree_.link(dir + "/mdev_type", tdir);

    mdevs_[*uuid] = m;
    update_available(p);
    return 0;
}

// remove_store(): kstrtoul(buf, 0); 0 does nothing.
int FakeMdev::remove(const std::string& uuid, const std::string& value, std::string* waits) {
    auto v = kernel_strtoull(value, ULONG_MAX);
    if (!v)
        return EINVAL;
    if (*v == 0)
        return 0;
    begin_remove(uuid);
    if (is_open(uuid))
        *waits = uuid;
    else
        finish_remove(uuid);
    return 0;
}

// What goes before the driver's remove callback, which waits for the device's users: the remove
// file itself, the mdev_type links, the device's attributes and bus link, the driver link.
void FakeMdev::begin_remove(const std::string& uuid) {
    Mdev& m = mdevs_.at(uuid);
    const Parent& p = parents_.at(m.parent);
    const std::string dir = mdev_dir(uuid);
    tree_.remove(p.dir + kTypes + m.type + "/devices/" + uuid);
    for (const char* f : {"remove", "mdev_type", "uevent", "subsystem", "driver"})
        tree_.remove(dir + "/" + f);
    tree_.remove(kBusDevices + uuid);
    tree_.remove(kBusDrivers + p.spec.mdev_driver + "/" + uuid);
    m.removing = true;
}

// The rest, once no VM holds the device: the vfio device, the group and its node, the unbind,
// the mdev itself, and its budget back.
void FakeMdev::finish_remove(const std::string& uuid) {
    auto it = mdevs_.find(uuid);
    if (it == mdevs_.end() || !it->second.removing)
        return;
    Mdev m = it->second;
    Parent& p = parents_.at(m.parent);
    const std::string dir = mdev_dir(uuid);
    const std::string vfio = "vfio" + std::to_string(m.vfio_index);
    tree_.remove(kVfioDevClass + vfio);
    tree_.remove(dir + "/vfio-dev");
    core_.raise({"remove", devpath_of(dir + "/vfio-dev/" + vfio), "vfio-dev", {}});
    const std::string n = std::to_string(m.group);
    tree_.remove(kVfioClass + n);
    tree_.remove(kVfioDevices + n);
    tree_.remove("dev/vfio/" + n);
    tree_.remove(kGroups + n);
    core_.raise({"remove", devpath_of(kVfioDevices + n), "vfio", {{"DEVNAME", "/dev/vfio/" + n}}});
    core_.raise({"unbind", devpath_of(dir), "mdev", {}});
    tree_.remove(dir);
    core_.raise({"remove", devpath_of(dir), "mdev", {}});
    p.used -= std::min(p.used, m.cost);
    mdevs_.erase(it);
    open_.erase(uuid);
    update_available(p);
}

void FakeMdev::unregister_parent(const std::string& name) {
    auto it = parents_.find(name);
    if (it == parents_.end())
        return;
    Parent& p = it->second;
    // Its mdevs in the order they were made (device_for_each_child), each as remove writes it.
    std::vector<std::pair<unsigned, std::string>> mine;
    for (const auto& [uuid, m] : mdevs_)
        if (m.parent == name)
            mine.emplace_back(m.seq, uuid);
    std::sort(mine.begin(), mine.end());
    for (const auto& [seq, uuid] : mine) {
        if (!mdevs_.at(uuid).removing)
            begin_remove(uuid);
        finish_remove(uuid);
    }
    tree_.remove(p.dir + "/mdev_supported_types");
    tree_.remove(kMdevBus + name);
    core_.raise(parent_event(p, "change", "unregistered"));
    if (!p.spec.class_name.empty()) {
        tree_.remove("sys/class/" + p.spec.class_name + "/" + name);
        tree_.remove(p.dir);
        core_.raise(parent_event(p, "remove", ""));
    }
    std::string driver = p.spec.mdev_driver;
    parents_.erase(it);
    bool shared = false;
    for (const auto& [n, other] : parents_)
        shared = shared || other.spec.mdev_driver == driver;
    if (!shared)
        tree_.remove(kBusDrivers + driver);
}

void FakeMdev::open_device(const std::string& uuid) { open_.insert(uuid); }

void FakeMdev::close_device(const std::string& uuid) {
    if (auto it = open_.find(uuid); it != open_.end())
        open_.erase(it);
}

bool FakeMdev::is_open(const std::string& uuid) const { return open_.count(uuid) > 0; }

void FakeMdev::fail_probe(const std::string& parent, int err) {
    if (auto it = parents_.find(parent); it != parents_.end())
        it->second.probe_error = err;
}

}  // namespace vfiod::test
