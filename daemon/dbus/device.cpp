#include "dbus/device.hpp"

#include <algorithm>

#include "core/plan_json.hpp"
#include "dbus/group.hpp"
#include "dbus/sd_bus_objects.hpp"

namespace vfiod {

namespace {

constexpr const char kPrefix[] = "/org/vfiod1/device";

// In the order and with the annotations of org.vfiod1.Device.xml (tests/integration/dbus_test.sh
// compares a live object's introspection with the XML). Values, not pointers: PropertiesChanged
// compares them.
constexpr Property<DeviceInfo> kProperties[] = {
    property<DeviceInfo, [](const DeviceInfo& d) { return d.address.str(); }>("Address", true),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex4(d.vendor); }>("Vendor"),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex4(d.device); }>("Device"),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex6(d.class_code); }>("Class"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.driver; }>("Driver"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.target.value_or(""); }>("Target"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.original_driver; }>("OriginalDriver"),
    property<DeviceInfo, [](const DeviceInfo& d) { return uint32_t{d.group}; }>("IommuGroup"),
    property<DeviceInfo, [](const DeviceInfo& d) { return int32_t{d.numa_node}; }>("NumaNode"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.resource_name.value_or(""); }>(
        "ResourceName"),
    property<DeviceInfo, [](const DeviceInfo& d) { return std::string(to_string(d.role)); }>(
        "Role"),
    property<DeviceInfo, [](const DeviceInfo& d) {
        return sdbus::ObjectPath(group_object_path(d.group));
    }>("Group"),
    property<DeviceInfo, [](const DeviceInfo& d) { return std::string(to_string(d.health)); }>(
        "Health"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.health_reason; }>("HealthReason"),
};

const ObjectKind<PciAddress, DeviceInfo> kDevices{
    "org.vfiod1.Device", kPrefix, [](const PciAddress& a) { return device_object_path(a); },
    device_of_path_element, kProperties};

}  // namespace

std::string device_object_path(const PciAddress& a) {
    return std::string(kPrefix) + "/" + a.object_path_element();
}

std::optional<PciAddress> device_of_path_element(std::string_view element) {
    std::string text(element);  // DDDD_BB_SS_F -> DDDD:BB:SS.F
    auto last = text.rfind('_');
    if (last == std::string::npos)
        return std::nullopt;
    std::replace(text.begin(), text.end(), '_', ':');
    text[last] = '.';
    return PciAddress::parse(text);
}

const ObjectKind<PciAddress, DeviceInfo>& device_objects() { return kDevices; }

}  // namespace vfiod
