// Who may change things over D-Bus: uid 0 only, as the bus driver reports it. Fails closed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>

namespace sdbus {
class IConnection;
class IProxy;
}  // namespace sdbus

namespace vfiod {

class Authorizer {
public:
    explicit Authorizer(sdbus::IConnection& connection);
    ~Authorizer();
    Authorizer(const Authorizer&) = delete;
    Authorizer& operator=(const Authorizer&) = delete;

    // The uid of a bus peer by its unique name, asked from org.freedesktop.DBus. sd-bus's own
    // sender credentials are "augmented" (read from /proc after the fact, racy against pid
    // reuse), so they are not used for decisions. nullopt when the driver cannot say.
    std::optional<uid_t> caller_uid(const std::string& sender) const;

    // True only when the bus driver says uid 0.
    bool is_privileged(const std::string& sender) const;

private:
    std::unique_ptr<sdbus::IProxy> bus_;
};

}  // namespace vfiod
