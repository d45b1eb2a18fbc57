// One consistent reading of the host: topology plus what the host uses. Every front end (vfioctl
// plan/apply/doctor, the daemon) plans from a Snapshot, so they all see the host the same way.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/mdev.hpp"
#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

struct Snapshot {
    Topology topology;
    HostUse use;                        // use.mdevs: who holds the mdevs below open
    MdevHost mdevs;                     // DESIGN §12
    std::vector<std::string> warnings;  // odd sysfs content, skipped devices
};

// With `fenced` (the daemon's functions being written, DESIGN §6), those functions keep what
// `last` has of them: their attributes (see Fenced in io/topology_reader.hpp) and what the host
// was found to use them for. Their files are not read.
Snapshot read_snapshot(const HostFs& fs, const std::set<PciAddress>* fenced = nullptr,
                       const Snapshot* last = nullptr);

// The findings of `use` about the functions in `only`.
HostUse findings_about(const HostUse& use, const std::set<PciAddress>& only);

}  // namespace vfiod
