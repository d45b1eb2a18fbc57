// The mediated-device part of the fake kernel, as Linux 6.1 behaves (drivers/vfio/mdev/ and
// vfio's emulated-IOMMU groups in vfio_main.c, with the parent drivers of samples/vfio-mdev), and
// as tests/vm/scenarios/mdev-kernel.sh shows it on the real kernel; tests/unit/test_fake_mdev.cpp
// holds this model to the same facts:
// - A parent registers (module load, or a PCI driver's probe): a virtual parent's class device
//   appears (add, subsystem = its class), its types under mdev_supported_types, the link
//   sys/class/mdev_bus/<name>, then change with MDEV_STATE=registered on the parent.
// - create <- UUID: EINVAL unless 36 characters (a 37th, whatever it is, is ignored) of UUID text;
//   EEXIST when any parent has that UUID, in any case, even one whose removal waits; EUSERS when
//   a parent without get_available has no instance left. Then add (no driver), the driver's probe:
//   a get_available parent's budget is taken there (ENOSPC when short: add, then remove, no
//   bind); an IOMMU group of its own (name vfio-noiommu, type unknown) with /dev/vfio/<N> (add,
//   subsystem vfio), the vfio-dev/vfio<M> device (add, subsystem vfio-dev), then bind; the
//   mdev_type link and the type's devices/<uuid> link last.
// - remove <- "0" does nothing, a non-number is EINVAL, else the mdev goes: remove (vfio-dev),
//   remove (vfio), unbind, remove (mdev). While a VM holds the device open (open_device) the
//   write waits: the bus link and the mdev's own files go at once (only iommu_group and vfio-dev/
//   are left in its directory), no event is sent, the group node, the budget and the UUID stay
//   until close_device(). Holding only the group's node does not make it wait.
// - A parent unregisters: each of its mdevs is removed as above, then change with
//   MDEV_STATE=unregistered, then (virtual) the class device's remove.
//
// Owns what sysfs does not show: each parent's driver knowledge (types, budget, costs) and which
// devices a VM holds open. The mdevs themselves are the tree; a fake kernel started over a tree
// that already has them adopts them (register_parent with announce false). Called with the
// kernel's lock held; it never touches a PCI function's binding.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fake_tree.hpp"
#include "io/host_fs.hpp"

namespace vfiod::test {

// One uevent as a udev monitor (libudev) hands it on: DEVPATH without /sys, the subsystem, and
// the properties beyond ACTION, DEVPATH and SUBSYSTEM (DRIVER on bind, DEVNAME with its /dev/
// prefix as libudev reports it, MDEV_STATE on a parent's change).
struct Uevent {
    std::string action;
    std::string devpath;
    std::string subsystem;
    std::vector<std::pair<std::string, std::string>> env;

    // The property's value, "" when absent.
    std::string get(const std::string& key) const;
    // "action devpath subsystem KEY=value ...": one line for a test's expectations.
    std::string str() const;
};

// A parent driver: what mdev_register_parent() is given.
struct MdevParentSpec {
    struct Type {
        std::string id;           // the driver's name for it: "small" is directory mbochs-small
        std::string pretty_name;  // the type's name file; "" shows the directory name
        unsigned cost = 1;        // budget units one instance takes (get_available drivers)
        std::string description;  // the description file; "" for a driver without one
    };
    // A virtual parent's device name ("mbochs"), or a PCI parent's address.
    std::string name;
    // A virtual parent's class ("mbochs"), which also prefixes its types; "" for a PCI parent,
    // whose types take its bound driver's name ("nvidia-222").
    std::string class_name;
    std::string mdev_driver;  // the driver its mdevs bind to ("mbochs")
    std::vector<Type> types;
    // get_available drivers (mbochs, mtty, vGPUs): the driver's own budget in units, taken in
    // probe (ENOSPC). Without get_available (mdpy): the core's max_instances, shared by all
    // types at one each, refused before anything is added (EUSERS).
    bool get_available = true;
    unsigned budget = 0;
    std::string device_api = "vfio-pci";
};

// The kernel's sample parents as the 6.1 real-kernel check saw them: mbochs (small, medium,
// large at 4, 16, 64 of 256 MB), mtty (mtty-1 and mtty-2 at 1 and 2 of 24 ports, named "Single
// port serial", "Dual port serial", no description) and mdpy (vga, xga, hd; max_instances 4).
MdevParentSpec mbochs_parent();
// A vGPU-like virtual parent "vgpu<i>" (class vgpu): types vgpu-1q and vgpu-2q ("GRID-1Q",
// "GRID-2Q") at 1 and 2 of 64 units, as a vGPU's framebuffer is shared; for benches at scale.
MdevParentSpec vgpu_parent(unsigned i);
MdevParentSpec mtty_parent();
MdevParentSpec mdpy_parent();

// What the fake kernel lends the mdev model; called with its lock held.
class FakeMdevCore {
public:
    // Queues ev for delivery once the current change is done.
    virtual void raise(Uevent ev) = 0;

protected:
    ~FakeMdevCore() = default;
};

class FakeMdev {
public:
    FakeMdev(FakeTree& tree, FakeMdevCore& core);

    // mdev_register_parent(). announce false: the parent was registered before this fake kernel
    // started (its dirs may be in the tree already); it is laid out if missing, its mdevs in the
    // tree adopted, and no uevent is raised.
    void register_parent(const MdevParentSpec& spec, bool announce);
    // mdev_unregister_parent() and, for a virtual parent, its device's removal (module unload).
    // The devices must not be open.
    void unregister_parent(const std::string& name);

    // The store behind a write to `canonical` (a path with every link resolved, that exists): an
    // errno or 0, with *waits set to the UUID when a remove must wait for close_device(); nullopt
    // when canonical is no mdev attribute.
    std::optional<int> store(const std::string& canonical, const std::string& value,
                             std::string* waits);
    // Ends a remove that waited (the device was closed, or the kernel is going away).
    void finish_remove(const std::string& uuid);
    // Whether reading `canonical` is refused (EACCES): create and remove have no show().
    bool write_only(const std::string& canonical) const;

    // A VM opens (VFIO_GROUP_GET_DEVICE_FD) or closes the mdev's device.
    void open_device(const std::string& uuid);
    void close_device(const std::string& uuid);
    bool is_open(const std::string& uuid) const;

    // The parent driver's probe of the next mdevs of parent fails with err (0 heals it): the
    // create fails with err after add and remove, as a failing vGPU probe does.
    void fail_probe(const std::string& parent, int err);

private:
    struct Parent {
        MdevParentSpec spec;
        std::string dir;     // canonical device dir, relative to the root
        std::string prefix;  // of its type directories: class or driver name
        unsigned used = 0;   // budget units (or instances) held
        int probe_error = 0;
    };
    struct Mdev {
        std::string parent;
        std::string type;  // directory name, e.g. mbochs-small
        unsigned group = 0;
        unsigned vfio_index = 0;
        unsigned cost = 0;      // what it holds of its parent's budget
        unsigned seq = 0;       // creation order
        bool removing = false;  // its remove waits for the device to be closed
    };

    int create(Parent& p, const std::string& type_dir, const std::string& value);
    int remove(const std::string& uuid, const std::string& value, std::string* waits);
    void begin_remove(const std::string& uuid);
    void lay_out_parent(Parent& p);
    void adopt(Parent& p);
    void update_available(const Parent& p);
    unsigned available(const Parent& p, const MdevParentSpec::Type& t) const;
    const MdevParentSpec::Type* type_of(const Parent& p, const std::string& type_dir) const;
    std::string mdev_dir(const std::string& uuid) const;
    unsigned next_vfio_index() const;
    // The PCI parent's subsystem and devpath for its change uevent, or the class's.
    Uevent parent_event(const Parent& p, const std::string& action,
                        const std::string& state) const;

    FakeTree& tree_;
    KernelHostFs sysfs_;  // reads of the tree that do not take the kernel's lock
    FakeMdevCore& core_;
    std::map<std::string, Parent> parents_;  // by name
    std::map<std::string, Mdev> mdevs_;      // by lower-case UUID
    std::multiset<std::string> open_;        // devices a VM holds
    unsigned seq_ = 0;
};

}  // namespace vfiod::test
