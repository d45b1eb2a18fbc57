// Whether the host still agrees with an unfinished journal entry, before reconciliation writes a
// byte for it (issue 20). run/vfiod is vfiod's own, but what it holds may not be: a stale entry
// whose addresses were reused after a hot-unplug, a damaged file, a test tree's entries written
// into the live /run. Such an entry must never drive writes to devices vfiod did not move.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/pci_address.hpp"
#include "core/topology.hpp"
#include "exec/journal.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// The host as it is now, as far as an entry is concerned: the functions it names, the members of
// its group, and what the host uses of them.
struct EntryFacts {
    Topology topology;
    HostUse use;
};
// Reads them now, through fs, for this entry alone (no whole-host scan: the caller runs right
// before its writes, on the operation's thread).
EntryFacts read_entry_facts(const HostFs& fs, const JournalEntry& entry);

// One reason not to act on an entry: the function it concerns (none for the entry as a whole)
// and the rule, for humans ("protected: matches a [[protect]] entry").
struct EntryProblem {
    std::optional<PciAddress> function;
    std::string text;

    std::string str() const { return function ? function->str() + ": " + text : text; }
};

// The problems in one line ("0000:03:02.0: ...; 0000:03:03.0: ..."), for an outcome's message;
// the functions they name, each once and sorted, go to *blockers.
std::string describe_problems(const std::vector<EntryProblem>& problems,
                              std::vector<PciAddress>* blockers);

// Why the entry may not be acted on, one per function and rule; empty when every function it
// names passes all of:
// - it is a member of the entry's group now (its iommu_group link names it), and not a bridge;
// - it is in a state vfiod's own writes for this operation (or their rollback) pass it
//   through, pinned to the driver vfiod binds it to (bind_target()): a bind's journaled target
//   is that driver, its driver_override is the target or the one it had before, and its driver
//   the one before, the target or none; a release's function is home already (the journaled
//   driver, or any other for an unknown original, override cleared), or was leaving that
//   driver and is on it still, on none, or home, its override cleared or as before;
// - no DESIGN §4 rule keeps it with the host (refusals_of(): protected, in use, sriov-pf,
//   boot-vga), and for a release no user holds it through vfio (in-use-vfio).
// So whatever passes is at worst unbound from the driver vfiod binds it to (and a bind's
// override given back what the entry says it was, only when its override is the target now).
// Crash points leave functions untouched, half moved or half rolled back: a stricter rule (a
// bind's override on the target only) would strand a group half bound. An entry naming a
// function twice, or more functions than its group has, fails as a whole.
std::vector<EntryProblem> entry_problems(const JournalEntry& entry, const EntryFacts& facts,
                                         const Config& config);

// The same for a PF's VF count change (DESIGN §11): the PF, the VFs its virtfn links name now,
// and what the host uses of them, read through fs for this PF alone.
EntryFacts read_pf_entry_facts(const HostFs& fs, const PfJournalEntry& entry);

// Why settling a PF entry may write nothing to the PF; empty when:
// - the PF is there and no [[protect]] entry matches it (a protected PF is never written, not
//   even its sriov_drivers_autoprobe);
// - and, when settling would change the count the kernel shows (`changes_count`: every VF is
//   destroyed), no VF of the PF is in use by the host or by a VM (vf_uses(): the rules that
//   refuse a planned count change with in-use-vf).
// A removed [[sriov]] entry, a protection added since, or a planted file must never destroy the
// VF that carries the host's route.
std::vector<EntryProblem> pf_entry_problems(const PfJournalEntry& entry, const EntryFacts& facts,
                                            const Config& config, bool changes_count);

}  // namespace vfiod
