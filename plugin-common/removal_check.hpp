// Tells a removal vfiod makes while it runs (a Reload dropped a group) from the removals it
// sends on its way out: vfiod removes every object when it stops, and the plugin then keeps
// the last inventory, since bindings outlive vfiod. vfiod answers a call only from its running
// loop, and the bus keeps one sender's messages in order: a Ping to the removal's sender that
// is answered was answered after the removal was sent, by a vfiod that goes on. One that is
// not (vfiod gone, or too slow) leaves the decision to the owner change or a whole read.
// Loop thread only. It owns the Ping in flight and the inventory as it was before the
// removals; it never reads or changes the current inventory itself.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

#include "dbus_client.hpp"

namespace vfiod::plugin {

class RemovalCheck {
public:
    // vfiod answered (`alive`), or why not and the inventory as it was before the removals.
    using Done =
        std::function<void(bool alive, const std::string& why, client::Inventory&& before)>;

    RemovalCheck(sdbus::IConnection& bus, std::chrono::milliseconds timeout);
    ~RemovalCheck() { cancel(); }
    RemovalCheck(const RemovalCheck&) = delete;
    RemovalCheck& operator=(const RemovalCheck&) = delete;

    // Pings `sender` (the removal's unique bus name) and keeps a copy of `before`, the inventory
    // the removals are about to change. `done` runs from the connection's message processing.
    // False when the Ping cannot be sent: then nothing is pending. Never throws sdbus::Error.
    bool start(const std::string& sender, const client::Inventory& before, Done done);
    bool pending() const { return before_.has_value(); }
    // The inventory as it was before the removals, while they are not confirmed; else null.
    const client::Inventory* before() const { return before_ ? &*before_ : nullptr; }
    // Abandons the check (its `done` never runs); what before() held, if anything.
    std::optional<client::Inventory> cancel();

private:
    void answered(const sdbus::Error* error);

    sdbus::IConnection& bus_;
    std::chrono::milliseconds timeout_;
    // To sender_; replaced only from start(), never inside its own callback (sdbus-c++ still
    // uses a proxy after its callback returns).
    std::unique_ptr<sdbus::IProxy> proxy_;
    std::string sender_;
    sdbus::PendingAsyncCall call_;
    std::optional<client::Inventory> before_;
    Done done_;
};

}  // namespace vfiod::plugin
