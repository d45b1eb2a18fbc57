// vfioctl doctor's diagnosis, apart from its printing so it can be tested: the host checks,
// one finding per allowlisted function, what KubeVirt will count, and advice per reason.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.hpp"
#include "core/plan.hpp"
#include "io/host_fs.hpp"

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
};

// An SR-IOV PF of an [[sriov]] entry (DESIGN §11), and what stands in the way of its VF count.
struct PfFinding {
    const PfPlan* pf;
    const PciFunction* fn;  // null when the function could not be read
    bool driverless;        // planned, but sriov_numvfs answers ENOENT until a driver binds
    std::string fix;        // "" when nothing stands in the way
};

struct Diagnosis {
    std::vector<Check> checks;
    std::vector<Finding> findings;  // the allowlisted functions, in plan order
    // The plan's PFs, by address; nullopt as the plan's without [[sriov]] entries.
    std::optional<std::vector<PfFinding>> pfs;
    // Per resource name: functions KubeVirt counts now, and once vfiod has bound what it can.
    std::map<std::string, std::pair<int, int>> per_resource;
    bool healthy = true;
};

// KubeVirt's virt-handler counts a permitted device only when its driver link is exactly
// vfio-pci (variant drivers are skipped) and it has an iommu_group link.
bool kubevirt_counts(const PciFunction& fn);

// Everything doctor reports, from the host (fs: proc/cmdline), its topology and the plan.
Diagnosis diagnose(const HostFs& fs, const Topology& t, const Config& config, const Plan& plan);

// What the operator can do about a planning reason, "" when there is nothing to say (and for
// the reasons make_plan() never gives).
std::string advice(Reason r, const PciAddress& a);

// What the operator can do about a PF whose count vfiod will not or cannot change: the VFs in
// use (the plan's details say who holds them), the count to stay under, the [[protect]] entry,
// or the driver to load; "" for a PF that is ready or about to change.
std::string pf_advice(const PfPlan& pf, bool driverless);

}  // namespace vfiod::cli
