#include "io/topology_reader.hpp"

namespace vfiod {

// Interim stub so dependants link; the reader lands in the next commit.
Topology read_topology(const Sysfs&, std::vector<std::string>*) { return {}; }

std::optional<PciFunction> read_function(const Sysfs&, const PciAddress&,
                                         std::vector<std::string>*) {
    return std::nullopt;
}

}  // namespace vfiod
