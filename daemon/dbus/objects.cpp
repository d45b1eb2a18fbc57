#include "dbus/objects.hpp"

#include <algorithm>
#include <charconv>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "org.vfiod1.Manager.adaptor.h"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
#include "dbus/sd_bus_objects.hpp"
#include "service/service.hpp"

namespace vfiod {

std::string group_object_path(unsigned id) { return "/org/vfiod1/group/" + std::to_string(id); }

std::string device_object_path(const PciAddress& a) {
    return "/org/vfiod1/device/" + a.object_path_element();
}

namespace {

const char* error_name(OpResult::Code c) {
    switch (c) {
    case OpResult::Code::Ok: return "";
    case OpResult::Code::InvalidArgs: return "org.freedesktop.DBus.Error.InvalidArgs";
    case OpResult::Code::NotFound: return "org.vfiod1.Error.NotFound";
    case OpResult::Code::NotAllowlisted: return "org.vfiod1.Error.NotAllowlisted";
    case OpResult::Code::Refused: return "org.vfiod1.Error.Refused";
    case OpResult::Code::Failed: return "org.vfiod1.Error.Failed";
    case OpResult::Code::Busy: return "org.freedesktop.DBus.Error.LimitsExceeded";
    }
    return "org.vfiod1.Error.Failed";
}

// The reads HeldCalls holds back: what they cost grows with the inventory. Matched by member
// whatever the interface (sd-bus's own handlers need it, and holding back a cheap namesake
// costs nothing).
bool is_bulk_read(sd_bus_message* m) {
    for (const char* member : {"GetManagedObjects", "Introspect", "Plan"})
        if (sd_bus_message_is_method_call(m, nullptr, member) > 0)
            return true;
    return false;
}

std::vector<std::string> strings(const std::vector<PciAddress>& list) {
    std::vector<std::string> out;
    for (const auto& a : list)
        out.push_back(a.str());
    return out;
}

}  // namespace

class ManagerObject final
    : public sdbus::AdaptorInterfaces<org::vfiod1::Manager_adaptor, sdbus::ObjectManager_adaptor> {
public:
    ManagerObject(sdbus::IConnection& c, Service& service, Authorizer& auth, CallLog& log)
        : AdaptorInterfaces(c, "/org/vfiod1"), service_(service), auth_(auth), log_(log) {
        registerAdaptor();
    }
    ~ManagerObject() { unregisterAdaptor(); }

    void update(std::string mode, bool iommu) {
        std::vector<std::string> changed;
        if (mode != mode_)
            changed.push_back("Mode");
        if (iommu != iommu_)
            changed.push_back("IommuEnabled");
        mode_ = std::move(mode);
        iommu_ = iommu;
        if (!changed.empty() && registered_)
            getObject().emitPropertiesChangedSignal(Manager_adaptor::INTERFACE_NAME, changed);
        registered_ = true;
    }

    sdbus::IObject& object() { return getObject(); }

private:
    // Starts `work` once the caller is authorized; work calls its argument with the result,
    // which answers the call. The answer may come long after this returns; a caller that
    // leaves first gets none.
    template <typename Work>
    void authorized(const char* method, sdbus::Result<>&& result, Work work) {
        const sdbus::Message* msg = getObject().getCurrentlyProcessedMessage();
        std::string sender = msg ? msg->getSender() : "";
        auto res = std::make_shared<sdbus::Result<>>(std::move(result));
        auth_.check(sender, [this, method, sender, res, work](const AuthResult& a) {
            std::string uid = a.uid ? std::to_string(*a.uid) : "unknown";
            if (!a.allowed()) {
                log_.note(a.uid, fmt::format("denied {} to {} (uid {}): {}", method, sender, uid,
                                             a.why));
                send(*res, sdbus::Error(a.error_name(), std::string(method) + ": " + a.why +
                                                            " (polkit action " + kManageAction +
                                                            ")"));
                return;
            }
            auto answer = [this, method, sender, uid, res, who = a.uid](const OpResult& r) {
                if (r.ok()) {
                    send(*res, std::nullopt);
                    return;
                }
                log_.note(who, fmt::format("{} from {} (uid {}) failed: {}: {}", method, sender,
                                           uid, error_name(r.code), r.message));
                send(*res, sdbus::Error(error_name(r.code), r.message));
            };
            try {
                work(answer);
            } catch (const std::exception& e) {
                // The service returns results, but a library below it may still throw
                // (std::bad_alloc, std::system_error): answer Failed rather than end the daemon.
                spdlog::error("{}: {}", method, e.what());
                answer(OpResult::error(OpResult::Code::Failed, std::string(method) + ": " + e.what()));
            }
        });
    }

    // Every reply goes out here. An error message may quote the host (a driver name): it is
    // made UTF-8 first, or sd-bus would refuse to send the reply at all.
    static void send(const sdbus::Result<>& res, const std::optional<sdbus::Error>& error) {
        try {
            if (error)
                res.returnError(sdbus::Error(error->getName(), utf8_safe(error->getMessage())));
            else
                res.returnResults();
        } catch (const sdbus::Error& e) {
            spdlog::debug("cannot send a reply: {}", e.getMessage());
        }
    }

    void Bind(sdbus::Result<>&& result, std::string address) override {
        authorized("Bind", std::move(result), [this, address](const Service::Reply& reply) {
            service_.bind_async(address, reply);
        });
    }
    void Release(sdbus::Result<>&& result, std::string address) override {
        authorized("Release", std::move(result), [this, address](const Service::Reply& reply) {
            service_.release_async(address, reply);
        });
    }
    void Reload(sdbus::Result<>&& result) override {
        authorized("Reload", std::move(result),
                   [this](const Service::Reply& reply) { service_.reload_async(reply); });
    }
    std::string Plan() override {
        try {
            return utf8_safe(service_.plan_json());
        } catch (const std::exception& e) {
            spdlog::error("Plan: {}", printable(e.what(), 512));
            throw sdbus::Error("org.vfiod1.Error.Failed", std::string("Plan: ") + utf8_safe(e.what()));
        }
    }
    std::string Version() override { return VFIOD_VERSION; }
    std::string Mode() override { return mode_; }
    bool IommuEnabled() override { return iommu_; }

    Service& service_;
    Authorizer& auth_;
    CallLog& log_;
    std::string mode_;
    bool iommu_ = false;
    bool registered_ = false;
};

namespace {

// A property value, not a pointer: PropertiesChanged compares values.
template <typename Enum>
std::string text(Enum e) {
    return to_string(e);
}

// The Group and Device interfaces, in the order and with the annotations of daemon/dbus/*.xml
// (tests/integration/dbus_test.sh compares a live object's introspection with the XML).
constexpr Property<GroupInfo> kGroupProperties[] = {
    property<GroupInfo, [](const GroupInfo& g) { return uint32_t{g.id}; }>("Id", true),
    property<GroupInfo, [](const GroupInfo& g) { return text(g.state); }>("State"),
    property<GroupInfo, [](const GroupInfo& g) { return text(g.reason); }>("Reason"),
    property<GroupInfo, [](const GroupInfo& g) { return strings(g.blockers); }>("Blockers"),
    property<GroupInfo, [](const GroupInfo& g) {
        return "/dev/vfio/" + std::to_string(g.id);
    }>("VfioPath", true),
    property<GroupInfo, [](const GroupInfo& g) {
        std::vector<sdbus::ObjectPath> out;
        for (const auto& a : g.devices)
            out.emplace_back(device_object_path(a));
        return out;
    }>("Devices"),
};

constexpr Property<DeviceInfo> kDeviceProperties[] = {
    property<DeviceInfo, [](const DeviceInfo& d) { return d.address.str(); }>("Address", true),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex4(d.vendor); }>("Vendor"),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex4(d.device); }>("Device"),
    property<DeviceInfo, [](const DeviceInfo& d) { return hex6(d.class_code); }>("Class"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.driver; }>("Driver"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.target; }>("Target"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.original_driver; }>("OriginalDriver"),
    property<DeviceInfo, [](const DeviceInfo& d) { return uint32_t{d.group}; }>("IommuGroup"),
    property<DeviceInfo, [](const DeviceInfo& d) { return int32_t{d.numa_node}; }>("NumaNode"),
    property<DeviceInfo, [](const DeviceInfo& d) { return d.resource_name; }>("ResourceName"),
    property<DeviceInfo, [](const DeviceInfo& d) { return text(d.role); }>("Role"),
    property<DeviceInfo, [](const DeviceInfo& d) {
        return sdbus::ObjectPath(group_object_path(d.group));
    }>("Group"),
};

// Where they live, and their keys <-> the last path element.
const ObjectKind<unsigned, GroupInfo> kGroups{
    "org.vfiod1.Group", "/org/vfiod1/group",
    [](const unsigned& id) { return group_object_path(id); },
    [](std::string_view e) -> std::optional<unsigned> {
        unsigned id = 0;
        auto [end, ec] = std::from_chars(e.data(), e.data() + e.size(), id);
        return ec == std::errc() && end == e.data() + e.size() ? std::optional(id) : std::nullopt;
    },
    kGroupProperties};

const ObjectKind<PciAddress, DeviceInfo> kDevices{
    "org.vfiod1.Device", "/org/vfiod1/device",
    [](const PciAddress& a) { return device_object_path(a); },
    [](std::string_view e) -> std::optional<PciAddress> {
        std::string text(e);  // DDDD_BB_SS_F -> DDDD:BB:SS.F
        auto last = text.rfind('_');
        if (last == std::string::npos)
            return std::nullopt;
        std::replace(text.begin(), text.end(), '_', ':');
        text[last] = '.';
        return PciAddress::parse(text);
    },
    kDeviceProperties};

}  // namespace

DbusObjects::DbusObjects(sdbus::IConnection& connection, Service& service, Authorizer& auth,
                         CallLog& log)
    : manager_(std::make_unique<ManagerObject>(connection, service, auth, log)) {
    sd_bus* bus = sd_bus_of(manager_->object());
    groups_ = std::make_unique<ExportedSet<unsigned, GroupInfo>>(bus, kGroups);
    devices_ = std::make_unique<ExportedSet<PciAddress, DeviceInfo>>(bus, kDevices);
}

DbusObjects::~DbusObjects() = default;

std::function<void()> DbusObjects::hold_bulk_reads() {
    if (!held_reads_)
        held_reads_ = std::make_unique<HeldCalls>(sd_bus_of(manager_->object()), is_bulk_read);
    return [held = held_reads_.get()] { held->release_one(); };
}

void DbusObjects::publish(const Inventory& inv, const InventoryChange& change) {
    // The one way onto the bus: the objects below only ever hold publishable strings. A signal
    // that still cannot be sent throws to Service::publish, which marks what it could not
    // publish as failed and sends it again. Only what changed is looked at.
    if (change.manager)
        manager_->update(utf8_safe(inv.mode), inv.iommu);
    // Devices go before their group and come after it, so a device's Group path always names
    // an exported object.
    for (const auto& a : change.devices)
        if (!inv.devices.count(a))
            devices_->erase(a);
    for (unsigned id : change.groups)
        if (!inv.groups.count(id))
            groups_->erase(id);
    for (unsigned id : change.groups)
        if (auto g = inv.groups.find(id); g != inv.groups.end())
            groups_->put(id, g->second);
    for (const auto& a : change.devices)
        if (auto d = inv.devices.find(a); d != inv.devices.end())
            devices_->put(a, publishable(d->second));
}

}  // namespace vfiod
