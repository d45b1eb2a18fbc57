#include "dbus/mdev.hpp"

#include <algorithm>
#include <vector>

#include "core/mdev.hpp"
#include "dbus/sd_bus_objects.hpp"

namespace vfiod {

namespace {

constexpr const char kPrefix[] = "/org/vfiod1/mdev";

// In the order and with the annotations of org.vfiod1.MediatedDevice.xml. The record went
// through publishable() (dbus/objects.cpp): every string is valid UTF-8.
constexpr Property<MdevInfo> kProperties[] = {
    property<MdevInfo, [](const MdevInfo& m) { return m.uuid; }>("Uuid", true),
    property<MdevInfo, [](const MdevInfo& m) { return m.parent; }>("Parent", true),
    property<MdevInfo, [](const MdevInfo& m) { return m.type; }>("Type"),
    property<MdevInfo, [](const MdevInfo& m) { return m.type_name; }>("TypeName"),
    property<MdevInfo, [](const MdevInfo& m) { return m.resource_name; }>("ResourceName"),
    property<MdevInfo, [](const MdevInfo& m) { return uint32_t{m.group.value_or(0)}; }>(
        "IommuGroup"),
    property<MdevInfo, [](const MdevInfo& m) {
        return m.group ? "/dev/vfio/" + std::to_string(*m.group) : std::string();
    }>("VfioPath"),
    property<MdevInfo, [](const MdevInfo& m) { return int32_t{m.numa_node}; }>("NumaNode"),
    property<MdevInfo, [](const MdevInfo& m) { return std::string(to_string(m.state)); }>(
        "State"),
    property<MdevInfo, [](const MdevInfo& m) { return std::string(to_string(m.reason)); }>(
        "Reason"),
    property<MdevInfo, [](const MdevInfo& m) { return m.blockers; }>("Blockers"),
    property<MdevInfo, [](const MdevInfo& m) { return std::string(to_string(m.health)); }>(
        "Health"),
    property<MdevInfo, [](const MdevInfo& m) { return m.health_reason; }>("HealthReason"),
};

const ObjectKind<std::string, MdevInfo> kMdevs{"org.vfiod1.MediatedDevice", kPrefix,
                                               mdev_object_path, mdev_of_path_element,
                                               kProperties};

}  // namespace

std::string mdev_object_path(const std::string& uuid) {
    std::string element = uuid;
    std::replace(element.begin(), element.end(), '-', '_');
    return std::string(kPrefix) + "/" + element;
}

std::optional<std::string> mdev_of_path_element(std::string_view element) {
    std::string uuid(element);
    std::replace(uuid.begin(), uuid.end(), '_', '-');
    if (!is_canonical_uuid(uuid))
        return std::nullopt;
    return uuid;
}

const ObjectKind<std::string, MdevInfo>& mdev_objects() { return kMdevs; }

}  // namespace vfiod
