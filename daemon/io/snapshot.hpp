// One consistent reading of the host: topology plus what the host uses. Every front end (vfioctl
// plan/apply/doctor, the daemon) plans from a Snapshot, so they all see the host the same way.
#pragma once

#include <string>
#include <vector>

#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

struct Snapshot {
    Topology topology;
    HostUse use;
    std::vector<std::string> warnings;  // odd sysfs content, skipped devices
};

Snapshot read_snapshot(const HostFs& fs);

}  // namespace vfiod
