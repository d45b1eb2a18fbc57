#include "dbus/group.hpp"

#include <charconv>
#include <vector>

#include "core/pci_paths.hpp"
#include "dbus/device.hpp"
#include "dbus/sd_bus_objects.hpp"

namespace vfiod {

namespace {

constexpr const char kPrefix[] = "/org/vfiod1/group";

std::vector<std::string> strings(const std::vector<PciAddress>& list) {
    std::vector<std::string> out;
    for (const auto& a : list)
        out.push_back(a.str());
    return out;
}

// In the order and with the annotations of org.vfiod1.Group.xml (tests/integration/dbus_test.sh
// compares a live object's introspection with the XML). Values, not pointers: PropertiesChanged
// compares them.
constexpr Property<GroupInfo> kProperties[] = {
    property<GroupInfo, [](const GroupInfo& g) { return uint32_t{g.id}; }>("Id", true),
    property<GroupInfo, [](const GroupInfo& g) { return std::string(to_string(g.state)); }>(
        "State"),
    property<GroupInfo, [](const GroupInfo& g) { return std::string(to_string(g.reason)); }>(
        "Reason"),
    property<GroupInfo, [](const GroupInfo& g) { return strings(g.blockers); }>("Blockers"),
    property<GroupInfo, [](const GroupInfo& g) {
        return pci_paths::host_path(pci_paths::vfio_group(g.id));
    }>("VfioPath", true),
    property<GroupInfo, [](const GroupInfo& g) {
        std::vector<sdbus::ObjectPath> out;
        for (const auto& a : g.devices)
            out.emplace_back(device_object_path(a));
        return out;
    }>("Devices"),
    property<GroupInfo, [](const GroupInfo& g) { return std::string(to_string(g.health)); }>(
        "Health"),
};

const ObjectKind<unsigned, GroupInfo> kGroups{
    "org.vfiod1.Group", kPrefix, [](const unsigned& id) { return group_object_path(id); },
    group_of_path_element, kProperties};

}  // namespace

std::string group_object_path(unsigned id) {
    return std::string(kPrefix) + "/" + std::to_string(id);
}

std::optional<unsigned> group_of_path_element(std::string_view element) {
    unsigned id = 0;
    const char* end = element.data() + element.size();
    auto [stop, ec] = std::from_chars(element.data(), end, id);
    return ec == std::errc() && stop == end ? std::optional(id) : std::nullopt;
}

const ObjectKind<unsigned, GroupInfo>& group_objects() { return kGroups; }

}  // namespace vfiod
