// Exclusive claims on block devices (in-use-storage, DESIGN §4): ZFS vdevs, btrfs members,
// bcache, a disk LVM or multipath holds open. None of them shows as a mount or a holder link, but
// the kernel refuses an O_EXCL open of a claimed disk with EBUSY.
//
// The probe is itself a claim for an instant (a concurrent mount, `zpool import` or LVM
// activation would fail with EBUSY during it), so it runs only just before a bind writes (the
// daemon's decisions and Bind, vfioctl apply), on the live host, never from plan, doctor or
// status.
#pragma once

#include "core/plan.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// For a group about to be bound (action Bind): every disk and partition under a function that
// would move is checked, sysfs evidence first (/sys/fs/btrfs/*/devices, bcache), then the probe
// through PID 1's /dev (PrivateDevices hides the nodes from the unit). A claimed one turns *gp
// into a refusal with in-use-storage ("nvme0n1 is claimed by the kernel (…)"), naming the
// filesystem type udev saw (ID_FS_TYPE) when there is one, and returns true. In a tree only the
// sysfs evidence counts: the probe needs the live kernel.
bool refuse_if_claimed(const HostFs& fs, GroupPlan* gp);

}  // namespace vfiod
