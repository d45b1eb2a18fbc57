// vfioctl doctor's diagnosis, apart from its printing so it can be tested: the host checks,
// one finding per allowlisted function, per [[sriov]] PF and per [[mdev]] (parent, type) pair,
// what KubeVirt will count, and advice per reason.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/plan.hpp"
#include "health.hpp"
#include "io/host_fs.hpp"
#include "kubevirt_cr.hpp"

namespace vfiod::cli {

struct Check {
    std::string name;  // "iommu", "vfio-pci", "allowlist"
    bool ok;
    std::string detail;
};

struct Finding {
    const PciFunction* fn;  // null when the function could not be read
    const GroupPlan* g;
    const PlannedDevice* d;
    client::Health health = {};  // as vfiod publishes it (DESIGN §13); "" when not read
    // A function of its IOMMU group whose health is failed, when its own is not: the plugins
    // list the whole group Unhealthy.
    std::optional<PciAddress> failed_mate = std::nullopt;
    std::string health_fix = {};  // health_advice() for it (or its failed mate)
};

// Health as vfiod publishes it (DESIGN §13): each function's by address, and each mdev parent's
// (its mdevs carry it) by the parent's name.
struct DaemonHealth {
    std::map<PciAddress, client::Health> functions;
    std::map<std::string, client::Health> mdev_parents;
};

// An SR-IOV PF of an [[sriov]] entry (DESIGN §11), and what stands in the way of its VF count.
struct PfFinding {
    const PfPlan* pf;
    const PciFunction* fn;  // null when the function could not be read
    bool driverless;        // planned, but sriov_numvfs answers ENOENT until a driver binds
    std::string fix;        // "" when nothing stands in the way
};

// One (parent, type) pair of the mdev plan (DESIGN §12): how many mdevs its [[mdev]] entry wants,
// how many are ready and about to be made, and what stands in the way of the rest.
struct MdevFinding {
    std::string parent;         // its name under sys/class/mdev_bus
    std::string type;           // the type's directory
    std::string type_name;      // the type's name file, else the type
    std::string resource_name;  // "" for a pair no entry wants any more (its mdevs are to go)
    unsigned wanted = 0;        // the entry's count
    unsigned ready = 0;
    unsigned to_create = 0;
    // Why the pair yields fewer than wanted (no-parent, unknown-type, protected,
    // mdev-unavailable), else in-use-mdev when one of vfiod's own cannot be removed, else None.
    Reason reason = Reason::None;
    std::vector<std::string> details;  // the plan's why, the holders of an in-use-mdev
    std::string fix;                   // "" when nothing stands in the way
    client::Health health = {};        // the parent's, as vfiod publishes it; "" when not read
    std::string health_fix = {};       // health_advice() for the parent
};

// The one-line note doctor adds when the config has [[mdev]] entries.
inline constexpr const char* kKubevirtMdevNote =
    "KubeVirt's own mediated-device handling removes every mdev whose type its CR does not know: "
    "list each type in its mediatedDevices with externalResourceProvider: true (vfioctl doctor "
    "--kubevirt-cr FILE checks a CR)";

struct Diagnosis {
    std::vector<Check> checks;
    std::vector<Finding> findings;  // the allowlisted functions, in plan order
    // The plan's PFs, by address; nullopt as the plan's without [[sriov]] entries.
    std::optional<std::vector<PfFinding>> pfs;
    // The plan's wanted (parent, type) pairs, in its order; nullopt without [[mdev]] entries.
    std::optional<std::vector<MdevFinding>> mdevs;
    // Per resource name: functions KubeVirt counts now, and once vfiod has bound what it can.
    std::map<std::string, std::pair<int, int>> per_resource;
    bool healthy = true;
};

// KubeVirt's virt-handler counts a permitted device only when its driver link is exactly
// vfio-pci (variant drivers are skipped) and it has an iommu_group link.
bool kubevirt_counts(const PciFunction& fn);

// Everything doctor reports, from the host (fs: proc/cmdline), its topology, the plan, the
// mdev parents (for the types a parent has and their available_instances), and the health vfiod
// publishes (empty when not read): a failed function, or one whose group-mate failed, is not
// ready.
Diagnosis diagnose(const HostFs& fs, const Topology& t, const Config& config, const Plan& plan,
                   const MdevHost& mdevs = {}, const DaemonHealth& health = {});

// The plan's (parent, type) pairs (DESIGN §12) in its order, each with its counts, reason and fix,
// and a pair per selector entry that reaches no parent (no-parent, its type as its name);
// nullopt when the plan has no mdevs (no [[mdev]] entries). Also what vfioctl kubevirt lists.
std::optional<std::vector<MdevFinding>> mdev_findings(const MdevHost& host, const Topology& t,
                                                      const Config& config, const Plan& plan);

// The "kubevirt" check of a KubeVirt CR against the wanted pairs (nullopt: no [[mdev]]
// entries): failed when KubeVirt's mdev handling is on and a pair's type is kept neither by
// mediatedDevicesConfiguration nor by an external mediatedDevices entry (virt-handler would
// remove its mdevs); the detail says which, and notes what else the CR gets wrong for vfiod
// (the gate missing, a type virt-handler would create mdevs of itself).
Check kubevirt_cr_check(const KubevirtMdevConfig& cr,
                        const std::optional<std::vector<MdevFinding>>& mdevs);

// What the operator can do about a planning reason, "" when there is nothing to say (and for
// the reasons make_plan() never gives).
std::string advice(Reason r, const PciAddress& a);

// What the operator can do about a device's health (DESIGN §13): for failed, reseat, check the
// slot, replace, and how to clear the state (a Bind of `bindable`, or a Reload once it reads
// fine; an mdev parent is never bound, so nullopt: the Reload only); for degraded, watch the
// counts and the same clearing; for unknown, that vfiod has no reading; "" for ok or not
// published.
std::string health_advice(const client::Health& h, const std::optional<PciAddress>& bindable);

// What the operator can do about a PF whose count vfiod will not or cannot change: the VFs in
// use (the plan's details say who holds them), the count to stay under, the [[protect]] entry,
// or the driver to load; "" for a PF that is ready or about to change.
std::string pf_advice(const PfPlan& pf, bool driverless);

// What the operator can do about a pair's reason, from its finding and its parent as read (null
// when absent): the driver to load, the types the parent has, the count the budget holds, the
// [[protect]] entry, the VM to close; "" for a pair with nothing in the way.
std::string mdev_advice(const MdevFinding& f, const MdevParent* parent);

}  // namespace vfiod::cli
