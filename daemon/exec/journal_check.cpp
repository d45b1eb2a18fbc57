#include "exec/journal_check.hpp"

#include <set>

#include "core/pci_paths.hpp"
#include "core/plan.hpp"
#include "core/strings.hpp"
#include "io/host_use.hpp"
#include "io/topology_reader.hpp"

namespace vfiod {

EntryFacts read_entry_facts(const HostFs& fs, const JournalEntry& entry) {
    EntryFacts facts;
    facts.topology.iommu_enabled = true;
    std::vector<std::string> warnings;  // an unreadable function is reported as not found
    if (auto members = read_group_members(fs, entry.group, &warnings); !members.empty())
        facts.topology.groups.emplace(entry.group, std::move(members));
    std::set<PciAddress> named;
    for (const auto& f : entry.functions)
        if (named.insert(f.address).second)
            if (auto fn = read_function(fs, f.address, &warnings))
                facts.topology.functions.emplace(f.address, std::move(*fn));
    facts.use = read_host_use(fs, facts.topology, &warnings, named);
    return facts;
}

std::string describe_problems(const std::vector<EntryProblem>& problems,
                              std::vector<PciAddress>* blockers) {
    std::set<PciAddress> named;
    std::vector<std::string> lines;
    for (const auto& p : problems) {
        if (p.function)
            named.insert(*p.function);
        lines.push_back(p.str());
    }
    blockers->assign(named.begin(), named.end());
    return join(lines, "; ");
}

EntryFacts read_pf_entry_facts(const HostFs& fs, const PfJournalEntry& entry) {
    EntryFacts facts;
    facts.topology.iommu_enabled = true;
    std::vector<std::string> warnings;  // an unreadable VF is a VF not found: see below
    std::set<PciAddress> named{entry.pf};
    // The kernel's virtfn<i> links, one per VF it made (at most 65,535: sriov_totalvfs is 16
    // bits); a VF's own physfn link is checked by its reader.
    for (const auto& name : fs.list(pci_paths::device(entry.pf)))
        if (name.rfind("virtfn", 0) == 0)
            if (auto target = fs.link_name(pci_paths::device(entry.pf, name)))
                if (auto vf = PciAddress::parse(*target))
                    named.insert(*vf);
    for (const auto& a : named)
        if (auto fn = read_function(fs, a, &warnings)) {
            // A VM holds a VF through its group's node: the use reader needs the group.
            if (fn->iommu_group && !facts.topology.groups.count(*fn->iommu_group))
                facts.topology.groups.emplace(
                    *fn->iommu_group, read_group_members(fs, *fn->iommu_group, &warnings));
            facts.topology.functions.emplace(a, std::move(*fn));
        }
    facts.use = read_host_use(fs, facts.topology, &warnings, named);
    return facts;
}

std::vector<EntryProblem> pf_entry_problems(const PfJournalEntry& e, const EntryFacts& facts,
                                            const Config& config, bool changes_count) {
    const PciFunction* pf = facts.topology.find(e.pf);
    if (!pf)
        return {{e.pf, "not found (removed, or unreadable)"}};
    std::vector<EntryProblem> out;
    if (protected_by(config, *pf))
        out.push_back({e.pf, std::string(to_string(Reason::Protected)) +
                                 ": matches a [[protect]] entry"});
    if (!changes_count)
        return out;
    for (const auto& [a, fn] : facts.topology.functions)
        if (fn.physfn == e.pf)
            for (const auto& r : vf_uses(fn, facts.use, config))
                for (const auto& d : r.details)
                    out.push_back({a, "a VF of " + e.pf.str() + ", " + to_string(r.reason) +
                                          ": " + d});
    return out;
}

namespace {

std::string quoted(const std::string& driver) {
    return driver.empty() ? "none" : "'" + printable(driver) + "'";
}

// The (driver, driver_override) states vfiod's own writes pass a function through, from the
// journaled (driver, override) towards the wanted override, or back: the override is either
// end's, the driver the one it left, none (between unbind and probe), or where it is going.
bool between(const PciFunction& fn, const JournalEntry::Function& f,
             const std::string& to_override, bool arrived) {
    bool override_ok = fn.driver_override == f.before_override || fn.driver_override == to_override;
    bool driver_ok = fn.driver.empty() || fn.driver == f.before || arrived;
    return override_ok && driver_ok;
}

// A bind or its rollback: pinned to the driver vfiod binds the function to, so the worst a
// passing function gets is an unbind from that driver and its old override back.
std::optional<std::string> bind_state_problem(const JournalEntry::Function& f,
                                              const PciFunction& fn, const Config& config) {
    const std::string want = bind_target(config, fn);
    if (f.target != want)
        return "bind entry: its target " + quoted(f.target) + " is not where vfiod binds it (" +
               quoted(want) + ")";
    if (between(fn, f, f.target, fn.driver == f.target))
        return std::nullopt;
    return "bind entry: driver is " + quoted(fn.driver) + ", driver_override " +
           quoted(fn.driver_override) + ": not a state a bind from " + quoted(f.before) +
           " (override " + quoted(f.before_override) + ") to " + quoted(f.target) + " leaves";
}

// A release or its rollback: it must have been leaving the driver vfiod binds it to, so the
// worst a passing function gets is an unbind from that driver and a probe.
std::optional<std::string> release_state_problem(const JournalEntry::Function& f,
                                                 const PciFunction& fn, const Config& config) {
    bool home = f.target.empty() ? fn.driver != f.before : fn.driver == f.target;
    if (home && !fn.driver.empty() && fn.driver_override.empty())
        return std::nullopt;  // back already (or never left): nothing will be written to it
    const std::string bound_to = bind_target(config, fn);
    if (f.before != bound_to || (!f.before_override.empty() && f.before_override != f.before))
        return "release entry: it was leaving " + quoted(f.before) + " (override " +
               quoted(f.before_override) + "), not vfiod's binding to " + quoted(bound_to);
    if (between(fn, f, "", home))
        return std::nullopt;
    return "release entry: driver is " + quoted(fn.driver) + ", driver_override " +
           quoted(fn.driver_override) + ": not a state a release from " + quoted(f.before) +
           " to " + (f.target.empty() ? std::string("its host driver") : quoted(f.target)) +
           " leaves";
}

std::vector<std::string> function_problems(const JournalEntry& e, const JournalEntry::Function& f,
                                           const EntryFacts& facts, const Config& config) {
    const PciFunction* fn = facts.topology.find(f.address);
    if (!fn)
        return {"not found (removed, or unreadable)"};
    std::vector<std::string> out;
    if (fn->iommu_group != e.group)
        out.push_back("not a member of IOMMU group " + std::to_string(e.group) +
                      (fn->iommu_group ? " (its group is " + std::to_string(*fn->iommu_group) + ")"
                                       : std::string(" (it has no IOMMU group)")));
    if (fn->is_bridge()) {
        out.push_back("a bridge (vfiod never writes to bridges)");
    } else {
        auto state = e.op == JournalEntry::Op::Bind ? bind_state_problem(f, *fn, config)
                                                    : release_state_problem(f, *fn, config);
        if (state)
            out.push_back(*state);
    }
    for (const auto& r : refusals_of(*fn, facts.use, config))
        for (const auto& d : r.details)
            out.push_back(std::string(to_string(r.reason)) + ": " + d);
    // Undoing a bind never meets a user (vfio opens only whole, viable groups, which a finished
    // bind is); a release's unbind would block behind one, as plan_release() refuses.
    if (auto it = facts.use.vfio.find(f.address);
        e.op == JournalEntry::Op::Release && it != facts.use.vfio.end())
        for (const auto& d : it->second)
            out.push_back(std::string(to_string(Reason::InUseVfio)) + ": " + d);
    return out;
}

}  // namespace

std::vector<EntryProblem> entry_problems(const JournalEntry& e, const EntryFacts& facts,
                                         const Config& config) {
    auto members = facts.topology.groups.find(e.group);
    if (members != facts.topology.groups.end() && e.functions.size() > members->second.size())
        return {{std::nullopt, "names " + std::to_string(e.functions.size()) +
                                   " functions; IOMMU group " + std::to_string(e.group) + " has " +
                                   std::to_string(members->second.size())}};
    std::vector<EntryProblem> out;
    std::set<PciAddress> seen;
    for (const auto& f : e.functions) {
        if (!seen.insert(f.address).second) {
            out.push_back({f.address, "named twice"});
            continue;
        }
        for (auto& p : function_problems(e, f, facts, config))
            out.push_back({f.address, std::move(p)});
    }
    return out;
}

}  // namespace vfiod
