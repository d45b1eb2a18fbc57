#include "dbus/pf.hpp"

#include <vector>

#include "dbus/device.hpp"
#include "dbus/sd_bus_objects.hpp"

namespace vfiod {

namespace {

constexpr const char kPrefix[] = "/org/vfiod1/pf";

// In the order and with the annotations of org.vfiod1.PhysicalFunction.xml. Every value is
// made here from numbers, codes and parsed addresses: a PfInfo holds no host text, so nothing
// in it can be other than ASCII. Values, not pointers: PropertiesChanged compares them.
constexpr Property<PfInfo> kProperties[] = {
    property<PfInfo, [](const PfInfo& p) { return p.address.str(); }>("Address", true),
    property<PfInfo, [](const PfInfo& p) { return uint32_t{p.total_vfs}; }>("TotalVfs"),
    property<PfInfo, [](const PfInfo& p) { return uint32_t{p.num_vfs}; }>("NumVfs"),
    property<PfInfo, [](const PfInfo& p) { return uint32_t{p.wanted_vfs}; }>("WantedVfs"),
    property<PfInfo, [](const PfInfo& p) { return std::string(to_string(p.state)); }>("State"),
    property<PfInfo, [](const PfInfo& p) { return std::string(to_string(p.reason)); }>(
        "Reason"),
    property<PfInfo, [](const PfInfo& p) {
        std::vector<std::string> out;
        for (const auto& a : p.blockers)
            out.push_back(a.str());
        return out;
    }>("Blockers"),
};

const ObjectKind<PciAddress, PfInfo> kPfs{
    "org.vfiod1.PhysicalFunction", kPrefix, [](const PciAddress& a) { return pf_object_path(a); },
    device_of_path_element, kProperties};

}  // namespace

std::string pf_object_path(const PciAddress& a) {
    return std::string(kPrefix) + "/" + a.object_path_element();
}

const ObjectKind<PciAddress, PfInfo>& pf_objects() { return kPfs; }

}  // namespace vfiod
