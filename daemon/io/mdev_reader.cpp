#include "io/mdev_reader.hpp"

#include <cstdlib>
#include <map>

#include "core/strings.hpp"

namespace vfiod {

namespace {

// A decimal number as sysfs shows one; nullopt for anything else (or one past 32 bits).
std::optional<unsigned> decimal(const std::string& s) {
    if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    const unsigned long v = std::strtoul(s.c_str(), nullptr, 10);
    if (v > 0xffffffffUL)
        return std::nullopt;
    return static_cast<unsigned>(v);
}

void warn(std::vector<std::string>* warnings, const std::string& line) {
    if (warnings)
        warnings->push_back(line);
}

// The available_instances of the type whose directory is `dir`.
std::optional<unsigned> available_in(const HostFs& fs, const std::string& dir,
                                     std::vector<std::string>* warnings) {
    std::string why;
    auto avail = fs.read(dir + "/available_instances", 32, &why);
    std::optional<unsigned> n = avail ? decimal(*avail) : std::nullopt;
    if (!n)
        warn(warnings, fs.path(dir) + "/available_instances: " +
                           (avail ? "not a number: \"" + printable(*avail) + "\""
                                  : why.empty() ? std::string("unreadable") : why) +
                           "; no mdev of this type is created");
    return n;
}

MdevType read_type(const HostFs& fs, const std::string& dir, std::vector<std::string>* warnings) {
    MdevType t;
    std::string why;
    // One byte past the limit tells a name that fits from one that was cut short.
    if (auto name = fs.read(dir + "/name", kMaxMdevTypeName + 1, &why)) {
        if (name->size() > kMaxMdevTypeName)
            warn(warnings, fs.path(dir) + "/name: longer than " +
                               std::to_string(kMaxMdevTypeName) +
                               " bytes; the type's directory name is used");
        else
            t.name = *name;
    } else if (!why.empty()) {
        warn(warnings, fs.path(dir) + "/name: " + why + "; the type's directory name is used");
    }
    t.available = available_in(fs, dir, warnings);
    return t;
}

std::string dir_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

std::optional<MdevParent> read_mdev_parent(const HostFs& fs, const std::string& name,
                                           std::vector<std::string>* warnings) {
    auto devpath = fs.resolve(std::string(mdev_paths::kParents) + "/" + name);
    if (!devpath)
        return std::nullopt;
    MdevParent p;
    p.devpath = *devpath;
    p.address = PciAddress::parse(name);
    const std::string types = *devpath + "/" + mdev_paths::kTypes;
    for (const auto& t : fs.list(types)) {
        if (t == "." || t == ".." || t.size() > 255)
            continue;
        p.types.emplace(t, read_type(fs, types + "/" + t, warnings));
    }
    return p;
}

std::optional<unsigned> read_mdev_available(const HostFs& fs, const std::string& parent,
                                            const std::string& type,
                                            std::vector<std::string>* warnings) {
    return available_in(fs, mdev_paths::type_dir(parent, type), warnings);
}

namespace {

// The mdev whose directory is `rel` (sys/bus/mdev/devices/<uuid>, or its parent's child).
Mdev read_mdev(const HostFs& fs, const std::string& rel, const std::string& parent) {
    Mdev m;
    m.parent = parent;
    m.type = fs.link_name(rel + "/mdev_type").value_or("");
    if (auto g = fs.link_name(rel + "/iommu_group"))
        m.iommu_group = decimal(*g);
    m.driver = fs.link_name(rel + "/driver").value_or("");
    return m;
}

}  // namespace

MdevHost read_mdev_host(const HostFs& fs, std::vector<std::string>* warnings) {
    MdevHost h;
    std::map<std::string, std::string> by_devpath;  // a parent's device dir -> its name
    for (const auto& name : fs.list(mdev_paths::kParents)) {
        auto p = read_mdev_parent(fs, name, warnings);
        if (!p)
            continue;
        by_devpath.emplace(p->devpath, name);
        h.parents.emplace(name, std::move(*p));
    }
    const std::string devices = mdev_paths::kDevices;
    for (const auto& uuid : fs.list(devices)) {
        const std::string rel = devices + "/" + uuid;
        if (!is_canonical_uuid(uuid)) {
            warn(warnings, fs.path(devices) + "/" + printable(uuid) +
                               ": not a canonical lower-case UUID; left alone");
            continue;
        }
        auto dir = fs.resolve(rel);
        auto parent = dir ? by_devpath.find(dir_of(*dir)) : by_devpath.end();
        if (parent == by_devpath.end()) {
            warn(warnings, fs.path(rel) + ": its parent is not under " +
                               fs.path(mdev_paths::kParents) + "; left alone");
            continue;
        }
        h.mdevs.emplace(uuid, read_mdev(fs, rel, parent->second));
    }
    return h;
}

MdevHost read_mdev_parents(const HostFs& fs, const std::set<std::string>& names,
                           std::vector<std::string>* warnings) {
    MdevHost h;
    for (const auto& name : names) {
        auto p = read_mdev_parent(fs, name, warnings);
        if (!p)
            continue;
        // An mdev's device is a child of its parent's: the parent's directory lists its mdevs
        // among its attributes, whatever other parents hold.
        const std::string bus = std::string(mdev_paths::kDevices) + "/";
        for (const auto& child : fs.list(p->devpath))
            if (is_canonical_uuid(child) && fs.exists(bus + child))
                h.mdevs.emplace(child, read_mdev(fs, p->devpath + "/" + child, name));
        h.parents.emplace(name, std::move(*p));
    }
    return h;
}

}  // namespace vfiod
