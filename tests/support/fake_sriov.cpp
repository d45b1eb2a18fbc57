#include "fake_sriov.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "core/pci_address.hpp"
#include "kernel_parse.hpp"

namespace vfiod::test {

namespace {

const std::string kDevices = "sys/bus/pci/devices/";

unsigned to_unsigned(const std::string& s, int base = 10) {
    return static_cast<unsigned>(std::strtoul(s.c_str(), nullptr, base));
}

// "0x1b36" (vendor, class) or "10" (sriov_vf_device, printed with %x) as FakeTree::Function
// spells IDs: lower-case hex, zero-padded to width.
std::string hex_id(const std::string& attr_value, size_t width) {
    std::string s = attr_value.rfind("0x", 0) == 0 ? attr_value.substr(2) : attr_value;
    while (s.size() < width)
        s.insert(s.begin(), '0');
    return s;
}

}  // namespace

FakeSriov::FakeSriov(FakeTree& tree, FakePciCore& core)
    : tree_(tree), sysfs_(tree.root()), core_(core) {
    // vfio-pci's sriov_configure answers ENOENT unless loaded with enable_sriov=1, the default.
    no_configure_.insert("vfio-pci");
}

void FakeSriov::set_vf_driver(const std::string& pf, const std::string& driver) {
    vf_drivers_[pf] = driver;
}

void FakeSriov::lacks_sriov_configure(const std::string& driver) { no_configure_.insert(driver); }

std::string FakeSriov::attr(const std::string& bdf, const std::string& name) const {
    return sysfs_.read(kDevices + bdf + "/" + name).value_or("");
}

std::string FakeSriov::physfn_of(const std::string& bdf) const {
    return sysfs_.link_name(kDevices + bdf + "/physfn").value_or("");
}

bool FakeSriov::may_probe(const std::string& bdf, bool has_override) const {
    std::string pf = physfn_of(bdf);
    return pf.empty() || has_override || attr(pf, "sriov_drivers_autoprobe") == "1";
}

std::string FakeSriov::vf_driver(const std::string& pf) const {
    auto set = vf_drivers_.find(pf);
    if (set != vf_drivers_.end())
        return set->second;
    bool own_id = hex_id(attr(pf, "sriov_vf_device"), 4) == hex_id(attr(pf, "device"), 4);
    return own_id ? core_.native_driver(pf) : "";
}

std::optional<int> FakeSriov::store(const std::string& pf, const std::string& name,
                                    const std::string& value) {
    // Read-only attributes: sysfs refuses to open them for writing, even for root.
    for (const char* ro : {"sriov_totalvfs", "sriov_offset", "sriov_stride", "sriov_vf_device"})
        if (name == ro)
            return EACCES;
    if (name == "sriov_drivers_autoprobe") {
        auto on = kernel_strtobool(value);
        if (!on)
            return EINVAL;
        tree_.write_file(tree_.devpath(pf) + "/" + name, *on ? "1\n" : "0\n");
        return 0;
    }
    if (name == "sriov_numvfs")
        return store_numvfs(pf, value);
    return std::nullopt;
}

// sriov_numvfs_store: the number is checked before the device lock and the driver, so a bad or
// too large value fails the same with or without a driver; an unchanged count always succeeds.
int FakeSriov::store_numvfs(const std::string& pf, const std::string& value) {
    auto n = kernel_strtoull(value, 0xffff);  // kstrtou16
    if (!n)
        return EINVAL;
    if (*n > to_unsigned(attr(pf, "sriov_totalvfs")))
        return ERANGE;
    unsigned now = to_unsigned(attr(pf, "sriov_numvfs"));
    if (*n == now)
        return 0;
    std::string driver = sysfs_.link_name(kDevices + pf + "/driver").value_or("");
    if (driver.empty() || no_configure_.count(driver))
        return ENOENT;
    if (*n == 0) {
        disable(pf);
        return 0;
    }
    if (now != 0)
        return EBUSY;  // "VFs already enabled. Disable before enabling"
    enable(pf, *n);
    return 0;
}

// sriov_enable: per VF an add uevent, the physfn/virtfn links with a change uevent, then the
// probe; a change uevent on the PF once all are there. Each VF gets an IOMMU group of its own,
// as QEMU's NVMe VFs (and VFs behind ACS-capable ports) do.
void FakeSriov::enable(const std::string& pf, unsigned n) {
    FakeTree::Function vf;
    vf.vendor = hex_id(attr(pf, "vendor"), 4);
    vf.device = hex_id(attr(pf, "sriov_vf_device"), 4);
    vf.class_code = hex_id(attr(pf, "class"), 6);
    vf.numa_node = std::atoi(attr(pf, "numa_node").c_str());
    vf.physfn = pf;
    const std::string native = vf_driver(pf);
    // Each VF takes the group above the last one's: listing the groups once, not per VF, keeps
    // making thousands of VFs linear (vfiod-bench-sriov at 32 PFs spent most of its time here).
    const unsigned first_group = tree_.next_free_group();
    for (unsigned i = 0; i < n; ++i) {
        vf.address = vf_address(pf, i);
        vf.group = first_group + i;
        core_.add_device(vf, native);
        core_.uevent("change", vf.address);
        core_.probe_new_device(vf.address);
    }
    tree_.write_file(tree_.devpath(pf) + "/sriov_numvfs", std::to_string(n) + "\n");
    core_.uevent("change", pf);
}

// sriov_disable: VF 0 first, each unbound and removed as any device is; no uevent on the PF.
void FakeSriov::disable(const std::string& pf) {
    unsigned n = to_unsigned(attr(pf, "sriov_numvfs"));
    std::vector<std::string> vfs;
    for (unsigned i = 0; i < n; ++i)
        if (auto vf = sysfs_.link_name(kDevices + pf + "/virtfn" + std::to_string(i)))
            vfs.push_back(*vf);
    for (const auto& vf : vfs)
        core_.remove_device(vf);
    tree_.write_file(tree_.devpath(pf) + "/sriov_numvfs", "0\n");
}

// VF i's routing ID is the PF's plus sriov_offset + sriov_stride * i; it may spill onto the
// next bus numbers.
std::string FakeSriov::vf_address(const std::string& pf, unsigned index) const {
    PciAddress a = PciAddress::parse(pf).value_or(PciAddress{});
    unsigned rid = (unsigned{a.bus} << 8) | (unsigned{a.slot} << 3) | a.function;
    rid += to_unsigned(attr(pf, "sriov_offset")) + to_unsigned(attr(pf, "sriov_stride")) * index;
    a.bus = static_cast<uint8_t>(rid >> 8);
    a.slot = static_cast<uint8_t>((rid >> 3) & 0x1f);
    a.function = static_cast<uint8_t>(rid & 7);
    return a.str();
}


}  // namespace vfiod::test
