#include "io/host_use.hpp"

namespace vfiod {

// Interim stub so dependants link; the detector lands in a following commit.
HostUse read_host_use(const Sysfs&, const Topology&, std::vector<std::string>*) { return {}; }

}  // namespace vfiod
