// The planner: a pure function from (topology, host use, config) to one decision per IOMMU group
// that holds an allowlisted function (DESIGN §4). No I/O; the executor and every front end
// (vfioctl plan, the daemon, D-Bus Plan()) use this one planner.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config.hpp"
#include "mdev.hpp"
#include "pci_address.hpp"
#include "state.hpp"
#include "topology.hpp"

namespace vfiod {

enum class Role { Allowlisted, Companion, Bridge };

// One sysfs write, path relative to the root, value without trailing newline.
struct Write {
    enum class Kind { Override, Unbind, Probe, SriovAutoprobe, SriovNumVfs };
    Kind kind;
    PciAddress function;  // whose attribute is written, or (Probe) which function is probed
    std::string value;

    // The file written, relative to the root, as pci_paths spells it. Made when asked, not kept:
    // a plan holds thousands of writes for as long as the daemon runs (issue 25).
    std::string path() const;
};

// One function as the planner describes it and every consumer sees it: the plan JSON, the
// daemon's Device object (service/inventory.hpp DeviceInfo adds what only the daemon knows) and
// the client's decoded inventory all hold this record, not copies of its fields.
struct DeviceRecord : FunctionFacts {
    Role role = Role::Companion;
    std::optional<std::string> target;  // nullopt for bridges
    std::optional<std::string> resource_name;

    bool operator==(const DeviceRecord&) const = default;
};

struct PlannedDevice : DeviceRecord {
    std::vector<Write> writes;          // this function's steps, in order
};

struct GroupPlan {
    std::optional<unsigned> group;      // nullopt: the function has no IOMMU group
    Action action = Action::Refuse;
    Reason reason = Reason::None;
    std::vector<PciAddress> blockers;
    std::vector<std::string> details;   // why, for humans: "0000:02:00.0: nvme0n1p2 is mounted on /"
    std::vector<PlannedDevice> devices; // sorted by address

    std::vector<Write> writes() const;  // all devices' writes, in execution order
};

// The VF count of one SR-IOV PF an [[sriov]] entry names (DESIGN §11). The PF itself is never
// bound: a group holding it is refused with sriov-pf.
struct PfPlan {
    PciAddress address;
    unsigned total_vfs = 0;             // sriov_totalvfs
    unsigned num_vfs = 0;               // sriov_numvfs now
    unsigned wanted_vfs = 0;            // the governing entry's num_vfs
    PfAction action = PfAction::Refuse;
    Reason reason = Reason::None;       // Protected, VfsExceedTotal or InUseVf when refused
    std::vector<PciAddress> blockers;   // the VFs in use, or the PF itself
    std::vector<std::string> details;   // why, for humans, as in GroupPlan
    std::vector<Write> writes;          // in execution order (sriov_writes)
};

// One write of an mdev's plan (DESIGN §12): its UUID to the type's create, or 1 to its remove.
struct MdevWrite {
    std::string path;   // relative to the root
    std::string value;  // without trailing newline
};

// One mdev (DESIGN §12): one an [[mdev]] entry wants (present or not), one of vfiod's own that
// is to go, or a foreign one.
struct MdevPlan {
    std::string uuid;
    std::string parent;         // its name under sys/class/mdev_bus
    std::string type;           // the type's directory; "" for a foreign mdev not probed yet
    std::string type_name;      // the type's name file, else the type
    std::string resource_name;  // the governing entry's; "" for one no entry wants
    std::optional<unsigned> group;  // its IOMMU group, while it has one
    MdevAction action = MdevAction::Refuse;
    Reason reason = Reason::None;
    std::vector<std::string> blockers;  // in-use-mdev: who holds it open
    std::vector<std::string> details;   // why, for humans, as in GroupPlan

    // What carrying out `action` writes: create (its UUID), remove ("1"), else nothing.
    std::vector<MdevWrite> writes() const;
};

struct Plan {
    bool iommu = false;
    std::vector<GroupPlan> groups;      // by group number, entries without a group last
    // By address; nullopt when the config has no [[sriov]] entry, so that the plan JSON of such
    // a host has no "pfs" and reads as it did before SR-IOV.
    std::optional<std::vector<PfPlan>> pfs;
    // In DESIGN §12's order; nullopt when the config has no [[mdev]] entry (no "mdevs" key).
    std::optional<std::vector<MdevPlan>> mdevs;
    std::vector<std::string> warnings;  // e.g. two entries matching one function
};

// The allowlist rule (DESIGN §3), the one every caller uses (planner, service, udev helper): the
// [[device]] entry that governs a function is the first that matches it; a later match only earns
// a line in *warnings.
const DeviceEntry* governing_entry(const Config& config, const PciFunction& fn,
                                   std::vector<std::string>* warnings = nullptr);
// Whether a [[protect]] entry matches the function.
bool protected_by(const Config& config, const PciFunction& fn);

// The DESIGN §4 rules that keep this one function with the host whatever its group holds, in
// the table's order, each with why: protected, and for a non-bridge in-use-storage, -network,
// -device, sriov-pf, boot-vga. Empty when none applies. The very rules make_plan refuses groups
// by, for a caller that vets single functions (reconciling a journal entry).
struct FunctionRefusal {
    Reason reason;
    std::vector<std::string> details;
};
std::vector<FunctionRefusal> refusals_of(const PciFunction& fn, const HostUse& use,
                                         const Config& config);

// Why a VF is in use, so that no change of its PF's VF count (which destroys every VF) may meet
// it: the DESIGN §4 host-use rules (in-use-storage, -network, -device), then a VM holding it
// through vfio (in-use-vfio). Protection, boot VGA or sriov-pf say nothing about use. Empty
// when it is free. What refuses a planned count change (in-use-vf) and an unfinished one
// (journal_check).
std::vector<FunctionRefusal> vf_uses(const PciFunction& vf, const HostUse& use,
                                     const Config& config);

// The [[sriov]] entry that governs an SR-IOV PF: the first that matches it; a later match only
// earns a line in *warnings. Null for a function that is no PF (a VF, or one without
// sriov_totalvfs: a selector naming the PF's ID matches its VFs too) or that no entry names.
const SriovEntry* sriov_entry(const Config& config, const PciFunction& fn,
                              std::vector<std::string>* warnings = nullptr);

// Every PF an [[sriov]] entry governs, planned (DESIGN §11), by address; nullopt when the config
// has no [[sriov]] entry. Refused with protected (a [[protect]] entry matches the PF), then
// vfs-exceed-total, then — only when the count must change — in-use-vf: a VF of the PF trips
// a host-use rule of DESIGN §4 (in-use-storage, -network, -device) or is open through vfio.
std::optional<std::vector<PfPlan>> plan_pfs(const Topology& topo, const HostUse& use,
                                            const Config& config,
                                            std::vector<std::string>* warnings = nullptr);
// The plan of one PF, as plan_pfs() makes it, from `vfs` (sorted): its VFs and maybe others (those
// whose physfn is not `pf` are left out). nullopt when no [[sriov]] entry governs it, or it is
// gone. What an incremental reader uses, so that a PF costs its own VFs, not the host.
std::optional<PfPlan> plan_one_pf(const Topology& topo, const HostUse& use, const Config& config,
                                  const PciAddress& pf, const std::vector<PciAddress>& vfs);

// The mdevs of every (parent, type) pair the [[mdev]] entries name (DESIGN §12), and every other
// mdev of the host; nullopt when the config has no [[mdev]] entry. Each pair is planned alone and
// all or nothing, in config order: absent parent no-parent, unknown type unknown-type, a
// [[protect]]ed PCI parent protected, fewer available_instances than mdevs missing
// mdev-unavailable (none of them created); else each missing one is created. vfiod's own mdevs
// of an index at or above count, or of a type the parent's entries no longer name, are removed
// unless open (in-use-mdev, from use.mdevs); a parent no entry governs keeps its mdevs, shown
// foreign with every mdev vfiod does not own. Sorted by parent, then the type's config order,
// then index; foreign last. A second entry reaching a pair an earlier one has is ignored with a
// line in *warnings.
std::optional<std::vector<MdevPlan>> plan_mdevs(const MdevHost& host, const Topology& topo,
                                                const HostUse& use, const Config& config,
                                                std::vector<std::string>* warnings = nullptr);

// The writes that take a PF's sriov_numvfs from `from` to `to` (DESIGN §11): none when they are
// equal; else sriov_drivers_autoprobe <- 0 (so new VFs reach no host driver; left out when `to`
// is 0: no VF is created), sriov_numvfs <- 0 when `from` is not 0 (the kernel refuses a change
// between two non-zero counts with EBUSY), then sriov_numvfs <- `to` and
// sriov_drivers_autoprobe <- 1 when `to` is not 0 (the VFs exist, driverless; with autoprobe
// 0 the kernel would refuse to probe the ones no entry allowlists).
std::vector<Write> sriov_writes(const PciAddress& pf, unsigned from, unsigned to);

// The driver vfiod binds a non-bridge function to: its governing [[device]] entry's driver, or
// vfio-pci for a companion.
std::string bind_target(const Config& config, const PciFunction& fn);

Plan make_plan(const Topology& topo, const HostUse& use, const Config& config);

// make_plan's entry for IOMMU group n alone, for a caller that keeps a plan up to date one group
// at a time: nullopt when make_plan would have none. `claimants`: functions whose iommu_group
// link names n although its member list does not have them (none in a consistent tree); the
// listed members are looked at anyway, so passing every function that names n is the same.
std::optional<GroupPlan> plan_one_group(const Topology& topo, const HostUse& use,
                                        const Config& config, unsigned n,
                                        const std::set<PciAddress>& claimants);

// The writes that move one function to `target`, skipping steps already satisfied (DESIGN §4).
std::vector<Write> bind_writes(const PciFunction& fn, const std::string& target);

// Release of one group (DESIGN §4): every non-bridge function goes back to its original driver
// (from the journal; a function missing from `originals` goes back to whatever probes). Refused
// with in-use-vfio when HostUse.vfio names a function of the group; otherwise Action::Release, or
// Action::Released when every function is already back. Devices' `target` holds the driver
// expected back ("" for none).
GroupPlan plan_release(const Topology& topo, const HostUse& use, unsigned group,
                       const std::map<PciAddress, std::string>& originals);
std::vector<Write> release_writes(const PciFunction& fn);

// The functions of a Bind that would move (a write planned for them): the ones whose disks an
// exclusive-claim check looks at. Empty for any other action.
std::set<PciAddress> moving_functions(const GroupPlan& gp);
// A block device the kernel holds exclusively (io/claims finds them), under the PCI function
// that owns it; why: "nvme0n1 is claimed by the kernel (…)".
struct StorageClaim {
    PciAddress owner;
    std::string why;
};
// Turns a Bind into a refusal with in-use-storage when a claim's owner would move: every such
// owner a blocker, each claim a detail ("<BDF>: <why>"), and no writes left. False (gp
// untouched) when none applies.
bool refuse_claimed(GroupPlan* gp, const std::vector<StorageClaim>& claims);

const char* to_string(Role r);
// The inverse, for consumers of the published Role (the client): nullopt for a name this build
// does not know.
std::optional<Role> parse_role(std::string_view text);

}  // namespace vfiod
