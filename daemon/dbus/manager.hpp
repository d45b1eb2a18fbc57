// The Manager object: org.vfiod1.Manager (Bind, Release, Reload behind polkit; Plan, Version and
// the Mode and IommuEnabled properties) and the ObjectManager for all of vfiod's objects, on
// sdbus-c++ through the adaptor generated from org.vfiod1.Manager.xml. It owns only the two
// property values; the service does the work, Authorizer decides who may, CallLog notes denials
// and failures. The Group and Device objects are not its: see group.hpp and device.hpp.
#pragma once

#include <optional>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

#include "org.vfiod1.Manager.adaptor.h"

namespace vfiod {

class Authorizer;
class CallLog;
class Service;

// Its one path, fixed (DESIGN §6): there is nothing to parse. Also where the ObjectManager
// lists the groups and devices from.
inline constexpr const char* kManagerObjectPath = "/org/vfiod1";

class ManagerObject final
    : public sdbus::AdaptorInterfaces<org::vfiod1::Manager_adaptor, sdbus::ObjectManager_adaptor> {
public:
    ManagerObject(sdbus::IConnection& c, Service& service, Authorizer& auth, CallLog& log);
    ~ManagerObject();

    // The properties: the first call sets them quietly (the object is new on the bus), a later
    // one sends PropertiesChanged naming those that changed.
    void update(std::string mode, bool iommu);

    sdbus::IObject& object() { return getObject(); }

private:
    template <typename Work>
    void authorized(const char* method, sdbus::Result<>&& result, Work work);
    static void send(const sdbus::Result<>& res, const std::optional<sdbus::Error>& error);

    void Bind(sdbus::Result<>&& result, std::string address) override;
    void Release(sdbus::Result<>&& result, std::string address) override;
    void Reload(sdbus::Result<>&& result) override;
    std::string Plan() override;
    std::string Version() override;
    std::string Mode() override;
    bool IommuEnabled() override;

    Service& service_;
    Authorizer& auth_;
    CallLog& log_;
    std::string mode_;
    bool iommu_ = false;
    bool registered_ = false;
};

}  // namespace vfiod
