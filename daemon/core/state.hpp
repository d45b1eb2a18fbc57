// vfiod's state model, written once (DESIGN §4, §6). A group goes
//
//   plan Action ──execute──▶ Outcome ──publish──▶ GroupState      (+ one Reason throughout)
//
// The planner decides an Action; the executor turns a plan into an Outcome; the service
// publishes a GroupState on D-Bus. What is published without executing (observe mode, a refused
// or already bound group) follows from the Action alone. Every mapping between the three is a
// switch below with no default, so a new value does not compile until each mapping places it.
// The journal's JournalEntry::Phase is not a group state: it records how far one operation got,
// for reconcile after a crash, and is never published.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/pci_address.hpp"

namespace vfiod {

// What the planner decides for a group. Bind/Bound/Refuse for the allowlist (make_plan);
// Release/Released/Refuse for giving a group back (plan_release).
enum class Action {
    Bind,      // writes pending: every non-bridge function moves to its target
    Bound,     // already on the targets; nothing to write
    Refuse,    // nothing in the group is written; the plan's Reason says why
    Release,   // writes pending: every function goes back to its original driver
    Released,  // already back; nothing to write
};

// Why a group is not bound. The DESIGN §4 planning reasons come first, in precedence order (the
// first that applies to a group is its reason); then the outcomes of execution.
enum class Reason {
    None,
    NoIommu,
    Protected,
    InUseStorage,
    InUseNetwork,
    InUseDevice,
    SriovPf,
    MdevParent,       // a PCI parent an [[mdev]] entry names (DESIGN §12)
    BootVga,
    Companion,
    InUseVf,          // a PF's VF count change: a VF is in use (DESIGN §11)
    VfsExceedTotal,   // a PF's num_vfs is above its sriov_totalvfs (DESIGN §11)
    MdevUnavailable,  // an mdev pair: fewer available_instances than mdevs missing (DESIGN §12)
    NoParent,         // an mdev pair: the parent is not under sys/class/mdev_bus
    UnknownType,      // an mdev pair: the parent has no such type
    InUseMdev,        // an mdev to remove is open through vfio
    InUseVfio,        // release only
    VfioUnavailable,  // execution: the target driver is not loaded; nothing was written
    WriteFailed,      // execution: a write or verification failed; the group was rolled back
    Stuck,            // execution: a write blocked past write_timeout
    Drift,            // a host driver came back a second time after one re-assertion
};

// What the planner decides for an SR-IOV PF an [[sriov]] entry names (DESIGN §11): its own
// closed set, apart from the group actions, since a PF is never bound.
enum class PfAction {
    Create,  // writes pending: sriov_numvfs differs from num_vfs
    Ready,   // sriov_numvfs is num_vfs; nothing to write
    Refuse,  // nothing is written; the plan's Reason says why
};

// What the planner decides for one mdev (DESIGN §12): one a [[mdev]] entry wants, one of vfiod's
// own to go, or a foreign one, shown and never touched.
enum class MdevAction {
    Create,   // write its UUID to the type's create
    Ready,    // it exists; nothing to write
    Remove,   // write 1 to its remove
    Refuse,   // nothing is written; the plan's Reason says why
    Foreign,  // not vfiod's: left alone
};

// The published State of an SR-IOV PF (D-Bus org.vfiod1.PhysicalFunction.State, `vfioctl
// status`, DESIGN §11).
enum class PfState {
    Ready,    // sriov_numvfs is the entry's num_vfs
    Pending,  // a count change is planned or running
    Refused,  // the plan refused (protected, vfs-exceed-total, in-use-vf); nothing was written
    Failed,   // a write failed (write-failed, with ENOENT for a driverless PF) or blocked (stuck)
};

// The published State of an mdev (D-Bus org.vfiod1.MediatedDevice.State, `vfioctl status`,
// DESIGN §12). Consumers serve only Ready.
enum class MdevState {
    Ready,    // it exists, bound to its vfio mdev driver, with its /dev/vfio/<N>
    Pending,  // wanted and not there yet, being created, or about to be removed
    Refused,  // the plan refused (mdev-unavailable, unknown-type, protected, in-use-mdev)
    Failed,   // its parent is gone (no-parent), or a create or remove failed
    Foreign,  // not vfiod's own: shown, never touched
};

// What executing a plan (or reconciling an interrupted one) came to.
enum class Outcome {
    Bound,       // every non-bridge function is on its target
    Released,    // every function is back on its original driver (sticky in the journal)
    Refused,     // the plan refused; nothing was written
    Failed,      // nothing changed, or a failure was rolled back (the Reason says which)
    Stuck,       // a write blocked past write_timeout; that function was left as it was
    RolledBack,  // reconcile undid an interrupted bind; the group is planned again
};

// The published State of a group (D-Bus org.vfiod1.Group.State, `vfioctl status`).
enum class GroupState { Bound, Pending, Refused, Failed, Released };

// A state and why: what the executor reports (Outcome, PfState) and what the service publishes
// (GroupState, PfState) have one shape. A verdict nobody filled in is a failure: every State
// here has a Failed.
template <typename State>
struct Verdict {
    State state = State::Failed;
    Reason reason = Reason::None;
    std::string message;               // step, path and strerror(errno), for humans and logs
    std::vector<PciAddress> blockers;  // the functions at fault
    bool operator==(const Verdict&) const = default;
};

// One group's published state and why; one PF's, published or as its count change left it.
using GroupStatus = Verdict<GroupState>;
using PfStatus = Verdict<PfState>;

// What is published for a plan before (or instead of) executing it: pending for writes to come.
GroupState planned_state(Action a);
// What is published after execution.
GroupState published_state(Outcome o);
// What is published for a PF's plan before (or instead of) executing it.
PfState planned_state(PfAction a);
// An mdev's state as planned (DESIGN §12): create and remove pending, a refusal refused (failed
// for no-parent: its parent is gone). Ready stays ready only once the mdev is bound with its
// /dev/vfio/<N>, which the plan does not know.
MdevState planned_state(MdevAction a, Reason r);

const char* to_string(Action a);      // "bind", "bound", "refuse", "release", "released"
const char* to_string(PfAction a);    // "create", "ready", "refuse"
const char* to_string(MdevAction a);  // "create", "ready", "remove", "refuse", "foreign"
const char* to_string(Reason r);      // "no-iommu", …, "drift"; "" for None
const char* to_string(Outcome o);     // "bound", …, "stuck", "rolled-back"
const char* to_string(GroupState s);  // "bound", "pending", "refused", "failed", "released"
const char* to_string(PfState s);     // "ready", "pending", "refused", "failed"
const char* to_string(MdevState s);   // "ready", "pending", "refused", "failed", "foreign"

// The inverse of to_string(Reason), for clients reading a published Reason; nullopt when the
// text names no reason this build knows ("" is Reason::None).
std::optional<Reason> parse_reason(std::string_view text);
// The inverse of to_string(GroupState), for clients reading a published State; nullopt when the
// text names no state this build knows (a newer daemon's).
std::optional<GroupState> parse_group_state(std::string_view text);
// The same for a published PhysicalFunction State.
std::optional<PfState> parse_pf_state(std::string_view text);
std::optional<MdevState> parse_mdev_state(std::string_view text);

}  // namespace vfiod
