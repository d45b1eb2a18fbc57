#include "removal_check.hpp"

#include <utility>

namespace vfiod::plugin {

RemovalCheck::RemovalCheck(sdbus::IConnection& bus, std::chrono::milliseconds timeout)
    : bus_(bus), timeout_(timeout) {}

bool RemovalCheck::start(const std::string& sender, const client::Inventory& before, Done done) {
    cancel();
    try {
        if (!proxy_ || sender != sender_) {
            // The removal's own sender, not org.vfiod1: a new owner is not asked about the
            // old one's removals.
            proxy_ = sdbus::createProxy(bus_, sender, "/org/vfiod1");
            sender_ = sender;
        }
        auto ping = proxy_->createMethodCall("org.freedesktop.DBus.Peer", "Ping");
        call_ = proxy_->callMethod(
            ping, [this](sdbus::MethodReply&, const sdbus::Error* e) { answered(e); }, timeout_);
    } catch (const sdbus::Error&) {
        return false;
    }
    before_ = before;
    done_ = std::move(done);
    return true;
}

std::optional<client::Inventory> RemovalCheck::cancel() {
    call_.cancel();
    done_ = nullptr;
    return std::exchange(before_, std::nullopt);
}

void RemovalCheck::answered(const sdbus::Error* error) {
    if (!before_)
        return;
    client::Inventory before = std::move(*before_);
    before_.reset();
    Done done = std::exchange(done_, nullptr);
    done(error == nullptr, error ? error->getName() + ": " + error->getMessage() : std::string(),
         std::move(before));
}

}  // namespace vfiod::plugin
