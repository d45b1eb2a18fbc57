#include "io/snapshot.hpp"

#include "io/host_use.hpp"
#include "io/topology_reader.hpp"

namespace vfiod {

Snapshot read_snapshot(const HostFs& fs) {
    Snapshot s;
    s.topology = read_topology(fs, &s.warnings);
    s.use = read_host_use(fs, s.topology, &s.warnings);
    return s;
}

}  // namespace vfiod
