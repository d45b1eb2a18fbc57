// The SR-IOV part of the fake PCI core, as Linux 6.1's drivers/pci/iov.c behaves: what writes to
// a PF's sriov_* attributes do, and whether a VF may be probed. VFs come and go through the
// core's own device add and removal (FakePciCore), so they get the uevents, probes and unbinds
// any hot-plugged device gets.
//
// Owns only what sysfs does not show: which driver matches a PF's VFs, and which drivers have
// no sriov_configure. A PF's state (sriov_numvfs, sriov_drivers_autoprobe, its virtfn links) is
// the tree itself, so a restarted fake kernel over the same tree sees the same VFs. It never
// takes the kernel's lock (its caller holds it), never binds or unbinds a driver itself, and
// never touches a function that is not a PF it was asked about or one of that PF's VFs.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "fake_tree.hpp"
#include "io/host_fs.hpp"

namespace vfiod::test {

// What the fake PCI core lends the SR-IOV model; called with the core's lock held.
class FakePciCore {
public:
    // pci_device_add: lays fn out driverless (fn.driver ignored) with native_driver as what its
    // ID tables match, and raises its add uevent.
    virtual void add_device(const FakeTree::Function& fn, const std::string& native_driver) = 0;
    // pci_bus_add_device: the probe a new device gets (which may attach nothing).
    virtual void probe_new_device(const std::string& bdf) = 0;
    // pci_stop_and_remove_bus_device: unbinds the driver (unbind uevent), removes the device
    // with its links and IOMMU group (remove uevent).
    virtual void remove_device(const std::string& bdf) = 0;
    virtual void uevent(const std::string& action, const std::string& bdf) = 0;
    // What a probe without an override attaches to bdf ("" for nothing).
    virtual std::string native_driver(const std::string& bdf) const = 0;

protected:
    ~FakePciCore() = default;
};

class FakeSriov {
public:
    FakeSriov(FakeTree& tree, FakePciCore& core);

    // The store of attribute attr ("sriov_numvfs", …) of PF pf, given the bytes written; an
    // errno or 0; nullopt when attr is not one of the SR-IOV attributes.
    std::optional<int> store(const std::string& pf, const std::string& attr,
                             const std::string& value);
    // pci_device_can_probe: a VF is probed only while its PF's sriov_drivers_autoprobe is 1 or
    // it has a driver_override; any other function always may be.
    bool may_probe(const std::string& bdf, bool has_override) const;
    // The driver a new VF of pf matches: set_vf_driver()'s, else the PF's native driver when
    // the VFs carry the PF's own device ID (QEMU's NVMe: nvme for both), else none.
    std::string vf_driver(const std::string& pf) const;
    // The PF of a VF ("" for any other function).
    std::string physfn_of(const std::string& bdf) const;

    void set_vf_driver(const std::string& pf, const std::string& driver);
    // The driver has no sriov_configure (or refuses it as vfio-pci does without enable_sriov):
    // writing a PF's sriov_numvfs while it is bound fails with ENOENT.
    void lacks_sriov_configure(const std::string& driver);

private:
    int store_numvfs(const std::string& pf, const std::string& value);
    void enable(const std::string& pf, unsigned n);
    void disable(const std::string& pf);
    std::string vf_address(const std::string& pf, unsigned index) const;
    std::string attr(const std::string& bdf, const std::string& name) const;

    FakeTree& tree_;
    KernelHostFs sysfs_;  // reads of the tree that do not take the kernel's lock
    FakePciCore& core_;
    std::map<std::string, std::string> vf_drivers_;  // PF -> its VFs' driver
    std::set<std::string> no_configure_;             // drivers without sriov_configure
};

}  // namespace vfiod::test
