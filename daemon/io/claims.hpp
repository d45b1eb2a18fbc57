// Exclusive claims on block devices (in-use-storage, DESIGN §4): ZFS vdevs, btrfs members,
// bcache, a disk LVM or multipath holds open. None of them shows as a mount or a holder link, but
// the kernel refuses an O_EXCL open of a claimed disk with EBUSY.
//
// The probe is itself a claim for an instant (a concurrent mount, `zpool import` or LVM
// activation would fail with EBUSY during it), so it runs only just before a bind writes (the
// daemon's decisions and Bind, vfioctl apply), on the live host, never from plan, doctor or
// status.
#pragma once

#include <set>
#include <vector>

#include "core/plan.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// The exclusive claims on the disks and partitions of `functions` (their owners found as
// host_use finds them, native-multipath NVMe namespaces included): sysfs evidence first
// (/sys/fs/btrfs/*/devices, bcache), then the probe through PID 1's /dev (PrivateDevices hides
// the nodes from the unit), naming the filesystem type udev saw (ID_FS_TYPE) when there is one.
// In a tree only the sysfs evidence counts: the probe needs the live kernel. Facts only: what
// they mean for a plan is core's refuse_claimed().
std::vector<StorageClaim> read_claims(const HostFs& fs, const std::set<PciAddress>& functions);

// For a group about to be bound (action Bind): read_claims() for the functions that would move,
// then refuse_claimed(), which turns *gp into a refusal with in-use-storage ("nvme0n1 is claimed
// by the kernel (…)") and returns true when one is claimed.
bool refuse_if_claimed(const HostFs& fs, GroupPlan* gp);

}  // namespace vfiod
