#include "io/topology_reader.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "core/mdev.hpp"
#include "core/pci_paths.hpp"
#include "core/strings.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

// HostFs content is untrusted text: show it bounded and with control bytes escaped so a strange
// file cannot forge log lines.
std::string shown(std::string_view s) { return "'" + printable(s, 32) + "'"; }

void warn(std::vector<std::string>* warnings, std::string msg) {
    if (warnings)
        warnings->push_back(std::move(msg));
}

std::optional<unsigned> parse_group_number(std::string_view s) {
    auto v = parse_int_attr(s);
    if (!v || *v < 0 || *v > static_cast<long>(UINT_MAX))
        return std::nullopt;
    return static_cast<unsigned>(*v);
}

// Reads the attributes of one function. A file that has disappeared together with its device
// is a hot-unplug race and says nothing; anything else that is odd is worth a warning, and the
// function is left out rather than guessed at.
class FunctionReader {
public:
    FunctionReader(const HostFs& fs, const PciAddress& addr, std::vector<std::string>* warnings,
                   const PciFunction* kept)
        : fs_(fs), bdf_(addr.str()), warnings_(warnings), kept_(kept) {
        fn_.address = addr;
    }

    std::optional<PciFunction> read() {
        const std::string bus_link = pci_paths::device(fn_.address);
        // The function's directory, held open while it is read: each attribute and link is one
        // lookup in it, not a walk from the root through the bus link and sys/devices again.
        held_ = fs_.open_dir(bus_link);
        if (!held_.ok()) {
            if (fs_.exists(bus_link))
                bad(bus_link + " points nowhere");
            return std::nullopt;
        }
        dir_ = held_.rel();
        fn_.devpath = dir_;
        if (kept_) {
            keep_attributes();
        } else {
            if (!read_ids())
                return std::nullopt;
            read_attributes();
        }
        read_links();
        // Asked of the path, not the held fd: a directory removed meanwhile is gone, whatever
        // was read through the fd before.
        if (failed_ || !fs_.exists(dir_))
            return std::nullopt;
        return fn_;
    }

private:
    // vendor, device and class are required; the subsystem IDs may be absent (read as 0).
    bool read_ids() {
        auto vendor = hex("vendor", 4, true);
        auto device = hex("device", 4, true);
        auto cls = hex("class", 6, true);
        auto sub_vendor = hex("subsystem_vendor", 4, false);
        auto sub_device = hex("subsystem_device", 4, false);
        if (failed_)
            return false;
        fn_.vendor = static_cast<uint16_t>(*vendor);
        fn_.device = static_cast<uint16_t>(*device);
        fn_.class_code = *cls;
        fn_.subsystem_vendor = static_cast<uint16_t>(sub_vendor.value_or(0));
        fn_.subsystem_device = static_cast<uint16_t>(sub_device.value_or(0));
        return true;
    }

    void read_attributes() {
        if (auto o = attr(pci_paths::kOverride, false))
            fn_.driver_override = pci_paths::override_value(*o);
        if (auto n = integer("numa_node"))
            fn_.numa_node = static_cast<int>(std::clamp(*n, -1L, static_cast<long>(INT_MAX)));
        if (auto v = integer("boot_vga"))
            fn_.boot_vga = *v != 0;
        if (auto v = integer(pci_paths::kSriovNumVfs)) {
            if (*v < 0)
                bad("sriov_numvfs holds " + std::to_string(*v));
            else
                fn_.sriov_numvfs = static_cast<unsigned>(std::min(*v, static_cast<long>(UINT_MAX)));
        }
        if (auto v = integer(pci_paths::kSriovTotalVfs)) {
            if (*v < 0)
                bad("sriov_totalvfs holds " + std::to_string(*v));
            else
                fn_.sriov_totalvfs =
                    static_cast<unsigned>(std::min(*v, static_cast<long>(UINT_MAX)));
        }
    }

    // A fenced function's attribute files, as its last record has them (what read_ids and
    // read_attributes found then).
    void keep_attributes() {
        fn_.vendor = kept_->vendor;
        fn_.device = kept_->device;
        fn_.class_code = kept_->class_code;
        fn_.subsystem_vendor = kept_->subsystem_vendor;
        fn_.subsystem_device = kept_->subsystem_device;
        fn_.driver_override = kept_->driver_override;
        fn_.numa_node = kept_->numa_node;
        fn_.boot_vga = kept_->boot_vga;
        fn_.sriov_numvfs = kept_->sriov_numvfs;
        fn_.sriov_totalvfs = kept_->sriov_totalvfs;
    }

    void read_links() {
        if (auto name = link("driver"))
            fn_.driver = *name;
        if (auto group = link("iommu_group")) {
            if (auto n = parse_group_number(*group))
                fn_.iommu_group = *n;
            else
                bad("iommu_group links to " + shown(*group) + ", not a group number");
        }
        if (fs_.exists(dir_ + "/physfn", &held_)) {
            auto pf = fs_.resolve(dir_ + "/physfn");
            auto slash = pf ? pf->rfind('/') : std::string::npos;
            auto pf_addr = pf ? PciAddress::parse(pf->substr(slash + 1)) : std::nullopt;
            if (pf_addr)
                fn_.physfn = pf_addr;
            else
                bad("physfn does not lead to a PCI function");
        }
    }

    // A read that fails because the whole device went away is silent; the caller drops it.
    std::optional<std::string> attr(const char* name, bool required) {
        if (failed_)  // already skipped, and said why once
            return std::nullopt;
        std::string refused;
        auto v = fs_.read(dir_ + "/" + name, 4096, &refused, &held_);
        if (!refused.empty()) {
            // Not the kernel's attribute: nothing about this function can be trusted.
            bad(std::string(name) + " is " + refused);
            return std::nullopt;
        }
        if (!v && required && fs_.exists(dir_))
            bad(std::string("cannot read ") + name);
        if (!v && required)
            failed_ = true;
        return v;
    }

    std::optional<uint32_t> hex(const char* name, unsigned digits, bool required) {
        auto text = attr(name, required);
        if (!text)
            return std::nullopt;
        auto v = parse_hex_attr(*text, digits);
        if (!v)
            bad(std::string(name) + " holds " + shown(*text) + ", not a " +
                std::to_string(digits) + "-digit hex value");
        return v;
    }

    std::optional<long> integer(const char* name) {
        auto text = attr(name, false);
        if (!text)
            return std::nullopt;
        auto v = parse_int_attr(*text);
        if (!v)
            bad(std::string(name) + " holds " + shown(*text) + ", not an integer");
        return v;
    }

    // The last component of a link's target when the link is there and leads somewhere.
    std::optional<std::string> link(const char* name) {
        std::string rel = dir_ + "/" + name;
        auto target = fs_.link_name(rel, &held_);
        if (!target && !fs_.exists(rel, &held_))
            return std::nullopt;
        if (!target || !fs_.leads_somewhere(rel)) {
            if (fs_.exists(dir_))
                bad(std::string(name) + " link points nowhere");
            failed_ = true;
            return std::nullopt;
        }
        return target;
    }

    void bad(const std::string& what) {
        failed_ = true;
        warn(warnings_, "skipping PCI function " + bdf_ + ": " + what);
    }

    const HostFs& fs_;
    std::string bdf_;
    std::vector<std::string>* warnings_;
    const PciFunction* kept_;
    HostFs::Dir held_;
    std::string dir_;
    PciFunction fn_;
    bool failed_ = false;
};

}  // namespace

std::optional<PciFunction> read_function(const HostFs& fs, const PciAddress& addr,
                                         std::vector<std::string>* warnings,
                                         const PciFunction* kept) {
    return FunctionReader(fs, addr, warnings, kept).read();
}

namespace {

void read_drivers(const HostFs& fs, Topology* topo) {
    topo->drivers.clear();
    for (auto& name : fs.list(pci_paths::kDrivers))
        topo->drivers.insert(std::move(name));
}

// A group's members from the group itself (see read_topology), sorted.
std::vector<PciAddress> read_members(const HostFs& fs, const std::string& group,
                                     BoundedWarnings& skipped) {
    std::vector<PciAddress> members;
    for (const auto& member : fs.list(std::string(pci_paths::kIommuGroups) + "/" + group + "/devices")) {
        std::string err;
        if (auto addr = PciAddress::parse(member, &err))
            members.push_back(*addr);
        else if (!is_canonical_uuid(member))  // an mdev's own group (DESIGN §12): not odd
            skipped.add("skipping member of IOMMU group " + group + ": " + err);
    }
    std::sort(members.begin(), members.end());
    return members;
}

bool iommu_enabled(const HostFs& fs, const Topology& topo) {
    return !fs.list("sys/class/iommu").empty() || !topo.groups.empty();
}

}  // namespace

std::vector<PciAddress> read_group_members(const HostFs& fs, unsigned group,
                                           std::vector<std::string>* warnings) {
    BoundedWarnings skipped(warnings, "odd sysfs entries skipped");
    return read_members(fs, std::to_string(group), skipped);
}

Topology read_topology(const HostFs& fs, std::vector<std::string>* warnings, Fenced fenced) {
    Topology topo;
    read_drivers(fs, &topo);

    // A broken or hostile tree can hold any number of odd entries: say what the first few are and
    // how many more there were, not one line each.
    BoundedWarnings skipped(warnings, "odd sysfs entries skipped");
    for (const auto& name : fs.list(pci_paths::kDevices)) {
        std::string err;
        auto addr = PciAddress::parse(name, &err);
        if (!addr) {
            skipped.add("skipping " + std::string(pci_paths::kDevices) + " entry: " + err);
            continue;
        }
        std::vector<std::string> odd;
        if (auto fn = read_function(fs, *addr, &odd, fenced.record(*addr)))
            topo.functions.emplace(*addr, std::move(*fn));
        for (auto& w : odd)
            skipped.add(std::move(w));
    }

    // Group membership comes from the groups themselves, so a member this scan had to skip
    // still shows up in its group and keeps the planner from binding the group partially.
    for (const auto& group : fs.list(pci_paths::kIommuGroups)) {
        auto n = parse_group_number(group);
        if (!n) {
            skipped.add("skipping IOMMU group " + shown(group) + ": not a group number");
            continue;
        }
        topo.groups[*n] = read_members(fs, group, skipped);
    }
    skipped.finish();

    topo.iommu_enabled = iommu_enabled(fs, topo);
    return topo;
}

namespace {

// Re-reads group `g`'s members (forgetting a group gone from sysfs); its old and new members
// join `todo`, to be re-read in turn.
void reread_group(const HostFs& fs, Topology* topo, unsigned g, BoundedWarnings& skipped,
                  std::vector<PciAddress>* todo) {
    auto it = topo->groups.find(g);
    if (it != topo->groups.end())
        todo->insert(todo->end(), it->second.begin(), it->second.end());
    const std::string name = std::to_string(g);
    if (!fs.exists(std::string(pci_paths::kIommuGroups) + "/" + name)) {
        topo->groups.erase(g);
        return;
    }
    auto members = read_members(fs, name, skipped);
    todo->insert(todo->end(), members.begin(), members.end());
    topo->groups.insert_or_assign(g, std::move(members));
}

}  // namespace

std::set<unsigned> refresh_topology(const HostFs& fs, Topology* topo,
                                    const std::set<PciAddress>& touched,
                                    std::vector<std::string>* warnings,
                                    const std::set<PciAddress>* fenced) {
    read_drivers(fs, topo);
    const Fenced kept{fenced, topo};
    BoundedWarnings skipped(warnings, "odd sysfs entries skipped");
    std::set<PciAddress> done;
    std::set<unsigned> groups, groups_done;
    std::vector<PciAddress> todo(touched.begin(), touched.end());
    // Re-reads one function; what it was and is now tells which groups and PF to look at next.
    auto reread = [&](const PciAddress& a) {
        if (!done.insert(a).second)
            return;
        if (const PciFunction* old = topo->find(a)) {
            if (old->iommu_group)
                groups.insert(*old->iommu_group);
            if (old->physfn && touched.count(a))
                todo.push_back(*old->physfn);
        }
        std::vector<std::string> odd;
        auto fn = read_function(fs, a, &odd, kept.record(a));
        for (auto& w : odd)
            skipped.add(std::move(w));
        if (!fn) {
            topo->functions.erase(a);
            return;
        }
        if (fn->iommu_group)
            groups.insert(*fn->iommu_group);
        if (fn->physfn && touched.count(a))
            todo.push_back(*fn->physfn);
        topo->functions.insert_or_assign(a, std::move(*fn));
    };
    // Functions lead to groups, groups to their members (old and new), until nothing is new.
    for (;;) {
        while (!todo.empty()) {
            PciAddress a = todo.back();
            todo.pop_back();
            reread(a);
        }
        bool more = false;
        for (unsigned g : groups) {
            if (!groups_done.insert(g).second)
                continue;
            more = true;
            reread_group(fs, topo, g, skipped, &todo);
        }
        if (!more && todo.empty())
            break;
    }
    skipped.finish();
    topo->iommu_enabled = iommu_enabled(fs, *topo);
    return groups;
}

}  // namespace vfiod
