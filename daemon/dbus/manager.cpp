#include "dbus/manager.hpp"

#include <memory>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/strings.hpp"
#include "dbus/authorization.hpp"
#include "dbus/call_log.hpp"
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

}  // namespace

ManagerObject::ManagerObject(sdbus::IConnection& c, Service& service, Authorizer& auth,
                             CallLog& log)
    : AdaptorInterfaces(c, kManagerObjectPath), service_(service), auth_(auth), log_(log) {
    registerAdaptor();
}

ManagerObject::~ManagerObject() { unregisterAdaptor(); }

void ManagerObject::update(std::string mode, bool iommu) {
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

// Starts `work` once the caller is authorized; work calls its argument with the result, which
// answers the call. The answer may come long after this returns; a caller that leaves first
// gets none.
template <typename Work>
void ManagerObject::authorized(const char* method, sdbus::Result<>&& result, Work work) {
    const sdbus::Message* msg = getObject().getCurrentlyProcessedMessage();
    std::string sender = msg ? msg->getSender() : "";
    auto res = std::make_shared<sdbus::Result<>>(std::move(result));
    auth_.check(sender, [this, method, sender, res, work](const AuthResult& a) {
        std::string uid = a.uid ? std::to_string(*a.uid) : "unknown";
        if (!a.allowed()) {
            log_.note(a.uid,
                      fmt::format("denied {} to {} (uid {}): {}", method, sender, uid, a.why));
            send(*res, sdbus::Error(a.error_name(), std::string(method) + ": " + a.why +
                                                        " (polkit action " + kManageAction + ")"));
            return;
        }
        auto answer = [this, method, sender, uid, res, who = a.uid](const OpResult& r) {
            if (r.ok()) {
                send(*res, std::nullopt);
                return;
            }
            log_.note(who, fmt::format("{} from {} (uid {}) failed: {}: {}", method, sender, uid,
                                       error_name(r.code), r.message));
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

// Every reply goes out here. An error message may quote the host (a driver name): it is made
// UTF-8 first, or sd-bus would refuse to send the reply at all.
void ManagerObject::send(const sdbus::Result<>& res, const std::optional<sdbus::Error>& error) {
    try {
        if (error)
            res.returnError(sdbus::Error(error->getName(), utf8_safe(error->getMessage())));
        else
            res.returnResults();
    } catch (const sdbus::Error& e) {
        spdlog::debug("cannot send a reply: {}", e.getMessage());
    }
}

void ManagerObject::Bind(sdbus::Result<>&& result, std::string address) {
    authorized("Bind", std::move(result), [this, address](const Reply& reply) {
        service_.bind_async(address, reply);
    });
}

void ManagerObject::Release(sdbus::Result<>&& result, std::string address) {
    authorized("Release", std::move(result), [this, address](const Reply& reply) {
        service_.release_async(address, reply);
    });
}

void ManagerObject::Reload(sdbus::Result<>&& result) {
    authorized("Reload", std::move(result),
               [this](const Reply& reply) { service_.reload_async(reply); });
}

std::string ManagerObject::Plan() {
    try {
        return utf8_safe(service_.plan_json());
    } catch (const std::exception& e) {
        spdlog::error("Plan: {}", printable(e.what(), 512));
        throw sdbus::Error("org.vfiod1.Error.Failed", std::string("Plan: ") + utf8_safe(e.what()));
    }
}

std::string ManagerObject::Version() { return VFIOD_VERSION; }
std::string ManagerObject::Mode() { return mode_; }
bool ManagerObject::IommuEnabled() { return iommu_; }

}  // namespace vfiod
