// Synthetic host trees for tests: a temporary directory laid out the way Linux lays out sysfs and
// procfs (real symlinks, "(null)" overrides, attribute values with trailing newlines), so the
// reader, the host-use detector and the fake kernel run on the same shapes as on a real host.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace vfiod::test {

class FakeTree {
public:
    struct Function {
        std::string address;              // "0000:01:00.0"
        std::string vendor = "8086";      // 4 hex digits, written as "0x8086\n"
        std::string device = "10d3";
        std::string class_code = "020000";  // 6 hex digits, written as "0x020000\n"
        std::string driver;               // bound driver; "" for none
        std::optional<unsigned> group;    // iommu group; nullopt for none
        std::string parent;               // BDF of the upstream bridge; "" for the root bus
        std::string driver_override;      // "" is written as "(null)"
        int numa_node = -1;
        std::optional<int> boot_vga;      // boot_vga attribute, only on display devices
        unsigned sriov_totalvfs = 0;      // >0 makes it an SR-IOV PF (sriov_* attributes)
        unsigned sriov_numvfs = 0;
        std::string sriov_vf_device;      // the VFs' device ID; "" for the PF's own
        unsigned sriov_offset = 1;        // VF i's routing ID: the PF's + offset + stride * i
        unsigned sriov_stride = 1;
        std::string physfn;               // BDF of the PF for a VF (physfn link, PF gets virtfnN)
    };

    // A Function in one line, for the common fields.
    static Function pci(const std::string& address, const std::string& vendor,
                        const std::string& device, const std::string& class_code,
                        const std::string& driver, std::optional<unsigned> group,
                        const std::string& parent = "") {
        Function f;
        f.address = address;
        f.vendor = vendor;
        f.device = device;
        f.class_code = class_code;
        f.driver = driver;
        f.group = group;
        f.parent = parent;
        return f;
    }

    FakeTree();                           // a fresh temporary directory
    ~FakeTree();                          // removed recursively
    FakeTree(const FakeTree&) = delete;
    FakeTree& operator=(const FakeTree&) = delete;

    const std::string& root() const { return root_; }

    // sys/class/iommu/dmar0 (what makes the IOMMU "enabled").
    FakeTree& enable_iommu();
    // sys/bus/pci/drivers/<name>/ with bind, unbind, new_id, remove_id files.
    FakeTree& add_driver(const std::string& name);
    // sys/devices/pci<DDDD>:<BB>/…/<BDF>/ with vendor, device, subsystem_*, class, revision,
    // driver_override, numa_node, uevent, modalias, enable, reset_method; the
    // sys/bus/pci/devices/<BDF> link; driver link (driver added if needed) and the driver's
    // back-link; iommu_group link and sys/kernel/iommu_groups/<N>/devices/<BDF>. The parent
    // must already exist.
    FakeTree& add_function(const Function& fn);
    // A netdev under the function: <BDF>/<subdir>/net/<ifname> (subdir "" or e.g. "virtio0"),
    // with sys/class/net/<ifname> linking to it.
    FakeTree& add_netdev(const std::string& bdf, const std::string& ifname,
                         const std::string& subdir = "");
    // A virtual netdev (bridge, bond, vlan) in sys/devices/virtual/net/<ifname>.
    FakeTree& add_virtual_netdev(const std::string& ifname);
    // Stack lower under upper: lower/master -> upper (if as_master) and lower/upper_<upper>,
    // upper/lower_<lower>, like bonds/bridges (master) and VLANs/macvlans (upper_ only).
    FakeTree& stack_netdev(const std::string& lower, const std::string& upper, bool as_master);
    // A block disk under the function at <BDF>/<subdir>/block/<name> (subdir e.g. "nvme/nvme0")
    // with dev "MAJ:MIN", holders/, and sys/class/block/<name> -> it. With bdf "" the disk sits
    // directly in the virtual device dir `subdir` (relative to the root), like an NVMe multipath
    // head in sys/devices/virtual/nvme-subsystem/nvme-subsys0/nvme0n1.
    FakeTree& add_block(const std::string& bdf, const std::string& subdir, const std::string& name,
                        unsigned major, unsigned minor);
    // A partition <disk>/<name> of an existing disk, with its own dev and class/block link.
    FakeTree& add_partition(const std::string& disk, const std::string& name, unsigned major,
                            unsigned minor);
    // holder (e.g. "dm-0") of block device `name`: <name>/holders/<holder> link.
    FakeTree& add_holder(const std::string& name, const std::string& holder);

    // A character device under the function, as the kernel registers one: <BDF>/<subdir>/ with
    // dev "MAJ:MIN" and uevent DEVNAME=<devname>, and sys/dev/char/MAJ:MIN linking to it
    // (subdir e.g. "sound/card0/controlC0", devname "snd/controlC0").
    FakeTree& add_char_device(const std::string& bdf, const std::string& subdir,
                              const std::string& devname, unsigned major, unsigned minor);
    // Process pid (its comm) holding `target` open as fd: proc/<pid>/fd/<fd> -> target.
    FakeTree& hold_open(unsigned pid, const std::string& comm, unsigned fd,
                        const std::string& target);

    // Plain files and links anywhere under the root (proc/self/mountinfo, proc/net/route, …).
    FakeTree& write_file(const std::string& rel, const std::string& content);
    FakeTree& symlink(const std::string& rel, const std::string& target);
    // A link at rel to target (both relative to the root), written relative as sysfs writes
    // its links ("../../../devices/…").
    FakeTree& link(const std::string& rel, const std::string& target);
    FakeTree& remove(const std::string& rel);  // recursive

    // What the kernel does on bind/unbind: driver link, the driver's back-link, /dev/vfio/<N>
    // appearing with the first vfio-pci function of a group. Used by the fake kernel.
    void bind(const std::string& bdf, const std::string& driver);
    void unbind(const std::string& bdf);
    // Removes the function as surprise removal does (bus link, group link, device dir).
    void remove_function(const std::string& bdf);

    // The canonical device dir of a function, relative to the root.
    std::string devpath(const std::string& bdf) const;

    // The number a new IOMMU group gets: one above the highest group there is. A tree's gaps in
    // the numbering stand for devices it does not lay out, whose groups the kernel's lowest-free
    // allocation would skip too.
    unsigned next_free_group() const;

private:
    std::string root_;
};

}  // namespace vfiod::test
