#include "plan.hpp"

#include <algorithm>

#include "pci_paths.hpp"

namespace vfiod {

namespace {

const char* const kVfioPci = "vfio-pci";

PlannedDevice describe(const PciFunction& fn) {
    PlannedDevice d;
    static_cast<FunctionFacts&>(d) = fn;  // every fact a consumer sees, whatever they become
    return d;
}

const std::vector<std::string>* use_of(const std::map<PciAddress, std::vector<std::string>>& m,
                                       const PciAddress& a) {
    auto it = m.find(a);
    return it == m.end() || it->second.empty() ? nullptr : &it->second;
}

// Sets the group's reason from the first rule (in DESIGN §4 order) that any member trips.
// `check` returns the detail lines for a member, empty when it does not trip the rule.
template <typename Check>
bool refuse_if(GroupPlan& g, Reason reason, const std::vector<const PciFunction*>& members,
               Check check) {
    for (const PciFunction* fn : members) {
        std::vector<std::string> why = check(*fn);
        if (why.empty())
            continue;
        g.blockers.push_back(fn->address);
        for (auto& w : why)
            g.details.push_back(fn->address.str() + ": " + w);
    }
    if (g.blockers.empty())
        return false;
    g.action = Action::Refuse;
    g.reason = reason;
    return true;
}

GroupPlan no_iommu_entry(const PciFunction& fn, const DeviceEntry& entry, bool iommu_on) {
    GroupPlan g;
    g.action = Action::Refuse;
    g.reason = Reason::NoIommu;
    g.blockers.push_back(fn.address);
    g.details.push_back(fn.address.str() + (iommu_on ? ": has no IOMMU group"
                                                     : ": the IOMMU is disabled on this host"));
    PlannedDevice d = describe(fn);
    d.role = Role::Allowlisted;
    d.target = entry.driver;
    if (!entry.resource_name.empty())
        d.resource_name = entry.resource_name;
    g.devices.push_back(std::move(d));
    return g;
}

// The group's members as planned devices, each with its role and target (bridges stay with the
// host and get none). Returns the readable members, bridges included; the addresses the reader
// had to skip go to *unreadable.
std::vector<const PciFunction*> place_members(
    GroupPlan& g, const Topology& topo, unsigned n,
    const std::map<PciAddress, const DeviceEntry*>& allowlisted,
    std::vector<PciAddress>* unreadable) {
    std::vector<const PciFunction*> members;
    for (const PciAddress& a : topo.groups.at(n)) {
        if (const PciFunction* fn = topo.find(a))
            members.push_back(fn);
        else
            unreadable->push_back(a);
    }
    for (const PciFunction* fn : members) {
        PlannedDevice d = describe(*fn);
        if (fn->is_bridge()) {
            d.role = Role::Bridge;
        } else if (auto it = allowlisted.find(fn->address); it != allowlisted.end()) {
            d.role = Role::Allowlisted;
            d.target = it->second->driver;
            if (!it->second->resource_name.empty())
                d.resource_name = it->second->resource_name;
        } else {
            d.role = Role::Companion;
            d.target = kVfioPci;
        }
        g.devices.push_back(std::move(d));
    }
    return members;
}

// The DESIGN §4 rules one function can trip by itself, in precedence order. Each says why it
// applies to a function ("" lines: it does not). The planner refuses a group by them and
// reconciliation (exec/journal_check) vets the functions of a journal entry by them: one table.
struct FunctionRule {
    Reason reason;
    bool bridges_too;  // protection applies to every member; the rest only to what would move
    std::vector<std::string> (*check)(const PciFunction&, const HostUse&, const Config&);
};

std::vector<std::string> lines_of(const std::map<PciAddress, std::vector<std::string>>& m,
                                  const PciAddress& a) {
    const auto* v = use_of(m, a);
    return v ? *v : std::vector<std::string>{};
}

// A PF with VFs enabled, or one an [[sriov]] entry names (DESIGN §11): its count passes through
// 0 and its VFs often carry its own ID, so an allowlist entry for the VFs would name it too.
std::vector<std::string> sriov_pf_lines(const PciFunction& fn, const HostUse&,
                                        const Config& config) {
    std::vector<std::string> why;
    if (fn.sriov_numvfs > 0)
        why.push_back("SR-IOV PF with " + std::to_string(fn.sriov_numvfs) +
                      " VFs enabled; unbinding it would destroy them");
    if (const SriovEntry* e = sriov_entry(config, fn))
        why.push_back("SR-IOV PF named by the [[sriov]] entry at " + e->origin.str() +
                      "; vfiod makes its VFs and never binds it");
    return why;
}

// A PCI parent an [[mdev]] entry names (DESIGN §12): its mdevs are what VMs get, never the
// function itself.
std::vector<std::string> mdev_parent_lines(const PciFunction& fn, const HostUse&,
                                           const Config& config) {
    for (const MdevEntry& e : config.mdevs)
        if (e.matches(fn.address, fn.vendor, fn.device))
            return {"mediated-device parent named by the [[mdev]] entry at " + e.origin.str() +
                    "; vfiod makes its mdevs and never binds it"};
    return {};
}

constexpr FunctionRule kFunctionRules[] = {
    {Reason::Protected, true,
     [](const PciFunction& fn, const HostUse&, const Config& config) {
         return protected_by(config, fn) ? std::vector<std::string>{"matches a [[protect]] entry"}
                                         : std::vector<std::string>{};
     }},
    {Reason::InUseStorage, false,
     [](const PciFunction& fn, const HostUse& use, const Config&) {
         return lines_of(use.storage, fn.address);
     }},
    {Reason::InUseNetwork, false,
     [](const PciFunction& fn, const HostUse& use, const Config&) {
         return lines_of(use.network, fn.address);
     }},
    {Reason::InUseDevice, false,
     [](const PciFunction& fn, const HostUse& use, const Config&) {
         return lines_of(use.device, fn.address);
     }},
    {Reason::SriovPf, false, sriov_pf_lines},
    {Reason::MdevParent, false, mdev_parent_lines},
    {Reason::BootVga, false,
     [](const PciFunction& fn, const HostUse&, const Config& config) {
         return fn.boot_vga && !config.allow_boot_vga
                    ? std::vector<std::string>{"is the boot VGA device (allow_boot_vga = false)"}
                    : std::vector<std::string>{};
     }},
};

// The group-wide refusal: the first rule of the table that any member trips, then the companion
// rule (which depends on the whole allowlist, not on one function).
bool refuse_by_rules(GroupPlan& g, const std::vector<const PciFunction*>& members,
                     const HostUse& use, const Config& config,
                     const std::map<PciAddress, const DeviceEntry*>& allowlisted) {
    std::vector<const PciFunction*> endpoints;  // what would move: everything but bridges
    for (const PciFunction* fn : members)
        if (!fn->is_bridge())
            endpoints.push_back(fn);
    for (const FunctionRule& rule : kFunctionRules)
        if (refuse_if(g, rule.reason, rule.bridges_too ? members : endpoints,
                      [&](const PciFunction& fn) { return rule.check(fn, use, config); }))
            return true;
    return refuse_if(g, Reason::Companion, endpoints, [&](const PciFunction& fn) {
        return config.companions == CompanionPolicy::Refuse && !allowlisted.count(fn.address)
                   ? std::vector<std::string>{"is not allowlisted and shares the group "
                                              "(companions = \"refuse\")"}
                   : std::vector<std::string>{};
    });
}

GroupPlan plan_group(const Topology& topo, const HostUse& use, const Config& config, unsigned n,
                     const std::map<PciAddress, const DeviceEntry*>& allowlisted) {
    GroupPlan g;
    g.group = n;
    std::vector<PciAddress> unreadable;
    auto members = place_members(g, topo, n, allowlisted, &unreadable);
    if (refuse_by_rules(g, members, use, config, allowlisted))
        return g;
    if (!unreadable.empty()) {
        // A member vfiod cannot read might be anything; binding around it would leave the group
        // partial, so it blocks like a companion that may not move.
        g.action = Action::Refuse;
        g.reason = Reason::Companion;
        for (const PciAddress& a : unreadable) {
            g.blockers.push_back(a);
            g.details.push_back(a.str() + ": shares the group but could not be read");
        }
        return g;
    }
    g.action = Action::Bound;
    for (PlannedDevice& d : g.devices) {
        if (!d.target)
            continue;
        d.writes = bind_writes(*topo.find(d.address), *d.target);
        if (!d.writes.empty())
            g.action = Action::Bind;
    }
    return g;
}

}  // namespace

namespace {

// The first entry of `entries` that matches fn; each later match is a warning naming `what`
// ("entries", "[[sriov]] entries"), or, without warnings wanted, not looked for.
template <typename Entry>
const Entry* first_match(const std::vector<Entry>& entries, const PciFunction& fn,
                         const char* what, std::vector<std::string>* warnings) {
    const Entry* first = nullptr;
    for (const auto& e : entries) {
        if (!e.matches(fn.address, fn.vendor, fn.device))
            continue;
        if (!first)
            first = &e;
        else if (warnings)
            warnings->push_back(fn.address.str() + " matches the " + what + " at " +
                                first->origin.str() + " and " + e.origin.str() +
                                "; the first one applies");
        else
            break;
    }
    return first;
}

}  // namespace

const DeviceEntry* governing_entry(const Config& config, const PciFunction& fn,
                                   std::vector<std::string>* warnings) {
    return first_match(config.devices, fn, "entries", warnings);
}

const SriovEntry* sriov_entry(const Config& config, const PciFunction& fn,
                              std::vector<std::string>* warnings) {
    if (!fn.sriov_totalvfs || fn.physfn)
        return nullptr;  // no PF: a selector naming a PF's ID matches its VFs too
    return first_match(config.sriovs, fn, "[[sriov]] entries", warnings);
}

std::vector<FunctionRefusal> refusals_of(const PciFunction& fn, const HostUse& use,
                                         const Config& config) {
    std::vector<FunctionRefusal> out;
    for (const FunctionRule& rule : kFunctionRules) {
        if (fn.is_bridge() && !rule.bridges_too)
            continue;
        if (auto why = rule.check(fn, use, config); !why.empty())
            out.push_back({rule.reason, std::move(why)});
    }
    return out;
}

std::string bind_target(const Config& config, const PciFunction& fn) {
    const DeviceEntry* e = governing_entry(config, fn);
    return e ? e->driver : kVfioPci;
}

bool protected_by(const Config& config, const PciFunction& fn) {
    return std::any_of(config.protects.begin(), config.protects.end(), [&](const ProtectEntry& p) {
        return p.matches(fn.address, fn.vendor, fn.device);
    });
}

std::string Write::path() const {
    switch (kind) {
    case Kind::Override: return pci_paths::override_file(function);
    case Kind::Unbind: return pci_paths::unbind_file(function);
    case Kind::Probe: return pci_paths::kDriversProbe;
    case Kind::SriovAutoprobe: return pci_paths::sriov_autoprobe_file(function);
    case Kind::SriovNumVfs: return pci_paths::sriov_numvfs_file(function);
    }
    return "";
}

std::vector<Write> bind_writes(const PciFunction& fn, const std::string& target) {
    std::vector<Write> w;
    if (fn.driver == target)
        return w;
    // Exactly as many as are pushed below: a plan keeps them for as long as the daemon runs.
    w.reserve(size_t{fn.driver_override != target} + size_t{!fn.driver.empty()} + 1);
    if (fn.driver_override != target)
        w.push_back({Write::Kind::Override, fn.address, target});
    if (!fn.driver.empty())
        w.push_back({Write::Kind::Unbind, fn.address, fn.address.str()});
    w.push_back({Write::Kind::Probe, fn.address, fn.address.str()});
    return w;
}

std::vector<Write> release_writes(const PciFunction& fn) {
    std::vector<Write> w;
    if (!fn.driver_override.empty())
        w.push_back({Write::Kind::Override, fn.address, pci_paths::override_write("")});
    if (!fn.driver.empty())
        w.push_back({Write::Kind::Unbind, fn.address, fn.address.str()});
    w.push_back({Write::Kind::Probe, fn.address, fn.address.str()});
    return w;
}

std::vector<Write> GroupPlan::writes() const {
    std::vector<Write> all;
    for (const auto& d : devices)
        all.insert(all.end(), d.writes.begin(), d.writes.end());
    return all;
}

Plan make_plan(const Topology& topo, const HostUse& use, const Config& config) {
    Plan plan;
    plan.iommu = topo.iommu_enabled;

    std::map<PciAddress, const DeviceEntry*> allowlisted;
    std::vector<unsigned> groups;
    std::vector<GroupPlan> ungrouped;
    for (const auto& [addr, fn] : topo.functions) {
        if (fn.is_bridge())
            continue;
        const DeviceEntry* e = governing_entry(config, fn, &plan.warnings);
        if (!e)
            continue;
        allowlisted.emplace(addr, e);
        if (!topo.iommu_enabled || !fn.iommu_group || !topo.groups.count(*fn.iommu_group))
            ungrouped.push_back(no_iommu_entry(fn, *e, topo.iommu_enabled));
        else
            groups.push_back(*fn.iommu_group);
    }
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());

    for (unsigned n : groups)
        plan.groups.push_back(plan_group(topo, use, config, n, allowlisted));
    for (auto& g : ungrouped)
        plan.groups.push_back(std::move(g));
    plan.pfs = plan_pfs(topo, use, config, &plan.warnings);
    return plan;
}

std::optional<GroupPlan> plan_one_group(const Topology& topo, const HostUse& use,
                                        const Config& config, unsigned n,
                                        const std::set<PciAddress>& claimants) {
    if (!topo.iommu_enabled || !topo.groups.count(n))
        return std::nullopt;
    std::map<PciAddress, const DeviceEntry*> allowlisted;
    bool planned = false;
    auto consider = [&](const PciAddress& a) {
        const PciFunction* fn = topo.find(a);
        if (!fn || fn->is_bridge())
            return;
        if (const DeviceEntry* e = governing_entry(config, *fn)) {
            allowlisted.emplace(a, e);
            planned = planned || fn->iommu_group == n;
        }
    };
    for (const auto& a : claimants)
        consider(a);
    for (const auto& a : topo.groups.at(n))
        consider(a);
    if (!planned)
        return std::nullopt;
    return plan_group(topo, use, config, n, allowlisted);
}

GroupPlan plan_release(const Topology& topo, const HostUse& use, unsigned group,
                       const std::map<PciAddress, std::string>& originals) {
    GroupPlan g;
    g.group = group;
    auto it = topo.groups.find(group);
    if (it == topo.groups.end()) {
        g.details.push_back("IOMMU group " + std::to_string(group) + " does not exist");
        return g;  // Refuse, Reason::None: nothing to release
    }
    std::vector<const PciFunction*> endpoints;
    for (const PciAddress& a : it->second) {
        const PciFunction* fn = topo.find(a);
        if (!fn)
            continue;  // gone: nothing to give back
        PlannedDevice d = describe(*fn);
        if (fn->is_bridge()) {
            d.role = Role::Bridge;
        } else {
            auto o = originals.find(a);
            d.target = o == originals.end() ? std::string() : o->second;
            endpoints.push_back(fn);
        }
        g.devices.push_back(std::move(d));
    }
    if (refuse_if(g, Reason::InUseVfio, endpoints, [&](const PciFunction& fn) {
            const auto* v = use_of(use.vfio, fn.address);
            return v ? *v : std::vector<std::string>{};
        }))
        return g;

    g.action = Action::Released;
    for (PlannedDevice& d : g.devices) {
        if (!d.target)
            continue;
        const PciFunction& fn = *topo.find(d.address);
        bool home = fn.driver_override.empty() && (d.target->empty() ? fn.driver != kVfioPci
                                                                     : fn.driver == *d.target);
        if (home)
            continue;
        d.writes = release_writes(fn);
        g.action = Action::Release;
    }
    return g;
}

std::set<PciAddress> moving_functions(const GroupPlan& gp) {
    std::set<PciAddress> moving;
    if (gp.action != Action::Bind)
        return moving;
    for (const auto& d : gp.devices)
        if (!d.writes.empty())
            moving.insert(d.address);
    return moving;
}

bool refuse_claimed(GroupPlan* gp, const std::vector<StorageClaim>& claims) {
    const std::set<PciAddress> moving = moving_functions(*gp);
    std::map<PciAddress, std::vector<std::string>> found;
    for (const auto& c : claims)
        if (moving.count(c.owner))
            found[c.owner].push_back(c.why);
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

const char* to_string(Role r) {
    switch (r) {
    case Role::Allowlisted: return "allowlisted";
    case Role::Companion: return "companion";
    case Role::Bridge: return "bridge";
    }
    return "?";
}

std::optional<Role> parse_role(std::string_view text) {
    for (Role r : {Role::Allowlisted, Role::Companion, Role::Bridge})
        if (text == to_string(r))
            return r;
    return std::nullopt;
}

}  // namespace vfiod
