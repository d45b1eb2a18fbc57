#include "io/snapshot.hpp"

#include "io/host_use.hpp"
#include "io/mdev_reader.hpp"
#include "io/topology_reader.hpp"
#include "io/vfio_use.hpp"

namespace vfiod {

Snapshot read_snapshot(const HostFs& fs, const std::set<PciAddress>* fenced, const Snapshot* last) {
    Snapshot s;
    s.topology = read_topology(fs, &s.warnings, {fenced, last ? &last->topology : nullptr});
    s.use = read_host_use(fs, s.topology, &s.warnings);
    s.mdevs = read_mdev_host(fs, &s.warnings);
    // A second walk of proc/*/fd, on hosts with mdevs only.
    if (!s.mdevs.mdevs.empty())
        read_mdev_use(fs, s.mdevs, scan_open_nodes(fs), &s.use);
    if (fenced && last)
        merge_host_use(&s.use, findings_about(last->use, *fenced), *fenced);
    return s;
}

HostUse findings_about(const HostUse& use, const std::set<PciAddress>& only) {
    auto about = [&](const std::map<PciAddress, std::vector<std::string>>& from) {
        std::map<PciAddress, std::vector<std::string>> out;
        for (const auto& a : only)
            if (auto it = from.find(a); it != from.end())
                out.insert(*it);
        return out;
    };
    return {about(use.storage), about(use.network), about(use.device), about(use.vfio), {}};
}

}  // namespace vfiod
