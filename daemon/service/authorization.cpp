#include "service/authorization.hpp"

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

namespace vfiod {

Authorizer::Authorizer(sdbus::IConnection& connection)
    : bus_(sdbus::createProxy(connection, "org.freedesktop.DBus", "/org/freedesktop/DBus")) {}

Authorizer::~Authorizer() = default;

std::optional<uid_t> Authorizer::caller_uid(const std::string& sender) const {
    if (sender.empty())
        return std::nullopt;
    try {
        uint32_t uid = 0;
        bus_->callMethod("GetConnectionUnixUser")
            .onInterface("org.freedesktop.DBus")
            .withArguments(sender)
            .storeResultsTo(uid);
        return static_cast<uid_t>(uid);
    } catch (const sdbus::Error& e) {
        spdlog::warn("cannot learn the uid of {}: {}", sender, e.getMessage());
        return std::nullopt;
    }
}

bool Authorizer::is_privileged(const std::string& sender) const {
    auto uid = caller_uid(sender);
    return uid && *uid == 0;
}

}  // namespace vfiod
