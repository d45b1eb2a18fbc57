#include "service/dbus_objects.hpp"

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "org.vfiod1.Device.adaptor.h"
#include "org.vfiod1.Group.adaptor.h"
#include "org.vfiod1.Manager.adaptor.h"
#include "service/authorization.hpp"
#include "service/call_log.hpp"
#include "service/service.hpp"

namespace vfiod {

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

class GroupObject final : public sdbus::AdaptorInterfaces<org::vfiod1::Group_adaptor> {
public:
    GroupObject(sdbus::IConnection& c, GroupInfo info)
        : AdaptorInterfaces(c, group_object_path(info.id)), info_(std::move(info)) {
        registerAdaptor();
        getObject().emitInterfacesAddedSignal({INTERFACE_NAME});
    }
    ~GroupObject() {
        // Also runs on shutdown after the bus is gone; a destructor must not throw.
        try {
            getObject().emitInterfacesRemovedSignal({INTERFACE_NAME});
        } catch (const sdbus::Error&) {
        }
        unregisterAdaptor();
    }

    void update(GroupInfo info) {
        std::vector<std::string> changed;
        if (info.state != info_.state)
            changed.push_back("State");
        if (info.reason != info_.reason)
            changed.push_back("Reason");
        if (info.blockers != info_.blockers)
            changed.push_back("Blockers");
        if (info.devices != info_.devices)
            changed.push_back("Devices");
        info_ = std::move(info);
        if (!changed.empty())
            getObject().emitPropertiesChangedSignal(INTERFACE_NAME, changed);
    }

private:
    uint32_t Id() override { return info_.id; }
    std::string State() override { return to_string(info_.state); }
    std::string Reason() override { return to_string(info_.reason); }
    std::vector<std::string> Blockers() override { return strings(info_.blockers); }
    std::string VfioPath() override { return "/dev/vfio/" + std::to_string(info_.id); }
    std::vector<sdbus::ObjectPath> Devices() override {
        std::vector<sdbus::ObjectPath> out;
        for (const auto& a : info_.devices)
            out.emplace_back(device_object_path(a));
        return out;
    }

    GroupInfo info_;
};

class DeviceObject final : public sdbus::AdaptorInterfaces<org::vfiod1::Device_adaptor> {
public:
    DeviceObject(sdbus::IConnection& c, DeviceInfo info)
        : AdaptorInterfaces(c, device_object_path(info.address)), info_(std::move(info)) {
        registerAdaptor();
        getObject().emitInterfacesAddedSignal({INTERFACE_NAME});
    }
    ~DeviceObject() {
        // Also runs on shutdown after the bus is gone; a destructor must not throw.
        try {
            getObject().emitInterfacesRemovedSignal({INTERFACE_NAME});
        } catch (const sdbus::Error&) {
        }
        unregisterAdaptor();
    }

    void update(DeviceInfo info) {
        std::vector<std::string> changed;
        auto note = [&](bool differs, const char* name) {
            if (differs)
                changed.push_back(name);
        };
        note(info.vendor != info_.vendor, "Vendor");
        note(info.device != info_.device, "Device");
        note(info.class_code != info_.class_code, "Class");
        note(info.driver != info_.driver, "Driver");
        note(info.target != info_.target, "Target");
        note(info.original_driver != info_.original_driver, "OriginalDriver");
        note(info.group != info_.group, "IommuGroup");
        note(info.group != info_.group, "Group");
        note(info.numa_node != info_.numa_node, "NumaNode");
        note(info.resource_name != info_.resource_name, "ResourceName");
        note(info.role != info_.role, "Role");
        info_ = std::move(info);
        if (!changed.empty())
            getObject().emitPropertiesChangedSignal(INTERFACE_NAME, changed);
    }

private:
    std::string Address() override { return info_.address.str(); }
    std::string Vendor() override { return hex4(info_.vendor); }
    std::string Device() override { return hex4(info_.device); }
    std::string Class() override { return hex6(info_.class_code); }
    std::string Driver() override { return info_.driver; }
    std::string Target() override { return info_.target; }
    std::string OriginalDriver() override { return info_.original_driver; }
    uint32_t IommuGroup() override { return info_.group; }
    int32_t NumaNode() override { return info_.numa_node; }
    std::string ResourceName() override { return info_.resource_name; }
    std::string Role() override { return to_string(info_.role); }
    sdbus::ObjectPath Group() override { return group_object_path(info_.group); }

    DeviceInfo info_;
};

DbusObjects::DbusObjects(sdbus::IConnection& connection, Service& service, Authorizer& auth,
                         CallLog& log)
    : connection_(connection),
      manager_(std::make_unique<ManagerObject>(connection, service, auth, log)) {}

DbusObjects::~DbusObjects() = default;

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
            devices_.erase(a);
    for (unsigned id : change.groups)
        if (!inv.groups.count(id))
            groups_.erase(id);
    for (unsigned id : change.groups) {
        auto g = inv.groups.find(id);
        if (g == inv.groups.end())
            continue;
        auto it = groups_.find(id);
        if (it == groups_.end())
            groups_.emplace(id, std::make_unique<GroupObject>(connection_, g->second));
        else
            it->second->update(g->second);
    }
    for (const auto& a : change.devices) {
        auto d = inv.devices.find(a);
        if (d == inv.devices.end())
            continue;
        auto it = devices_.find(a);
        if (it == devices_.end())
            devices_.emplace(a, std::make_unique<DeviceObject>(connection_, publishable(d->second)));
        else
            it->second->update(publishable(d->second));
    }
}

}  // namespace vfiod
