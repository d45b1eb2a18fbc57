// Reads the host's PCI functions and IOMMU groups from sysfs under a root into a Topology.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/topology.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// Functions whose attribute files are not to be read now (a write to them is in flight or stuck
// in the kernel, DESIGN §6: on 6.1 reading driver_override waits for the device lock a blocked
// unbind holds), and where their last records are. A fenced function keeps the attributes of
// its record; its directory and links, which take no device lock, are read as ever. A fenced
// function without a record (first seen while fenced) is read through the fenced view, which
// refuses, so it is skipped until it is unfenced.
struct Fenced {
    const std::set<PciAddress>* functions = nullptr;
    const Topology* last = nullptr;

    // The record whose attributes stand for a's, or nullptr: read them.
    const PciFunction* record(const PciAddress& a) const {
        return functions && last && functions->count(a) ? last->find(a) : nullptr;
    }
};

// Reads every PCI function and IOMMU group under fs.root(). Odd content (a vendor file that is
// not hex, a link that points nowhere) skips that function with a warning naming the device and
// file; a device that vanishes mid-scan is skipped silently. Never throws.
Topology read_topology(const HostFs& fs, std::vector<std::string>* warnings, Fenced fenced = {});

// Reads one function (read_topology's unit of work); nullopt if it is gone or unreadable. With
// `kept`, its attribute files are not read: their values are kept's (see Fenced).
std::optional<PciFunction> read_function(const HostFs& fs, const PciAddress& addr,
                                         std::vector<std::string>* warnings,
                                         const PciFunction* kept = nullptr);

// The members of one IOMMU group, as the group itself lists them, sorted; names that are not
// PCI addresses are skipped and said in *warnings.
std::vector<PciAddress> read_group_members(const HostFs& fs, unsigned group,
                                           std::vector<std::string>* warnings);

// Brings `topo` up to date after udev named `touched`, reading only what can have changed with
// them: each touched function, the PF of a touched VF (its sriov_numvfs), every member of the
// IOMMU groups those belong or belonged to (and of groups a member moved to), the driver list and
// whether the IOMMU is on. Afterwards `topo` equals what read_topology would return, given that
// the kernel reports every function whose state changed (it does: bind, unbind, add, remove and
// group changes are uevents of the function). The cost depends on the groups touched, not on the
// size of the host. Returns every group whose members were re-read or that vanished. The functions
// in `fenced` keep the attributes `topo` has for them (see Fenced).
std::set<unsigned> refresh_topology(const HostFs& fs, Topology* topo,
                                    const std::set<PciAddress>& touched,
                                    std::vector<std::string>* warnings,
                                    const std::set<PciAddress>* fenced = nullptr);

}  // namespace vfiod
