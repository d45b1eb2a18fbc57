// vfiod's inventory as the plugin knows it (DESIGN §9): read whole at start and whenever
// org.vfiod1 changes hands, kept current in between by vfiod's signals one change at a time
// (removals too, once RemovalCheck says vfiod goes on). A read that fails is asked again after
// a backoff; while vfiod is away the last inventory stays, since bindings outlive vfiod. Loop
// thread only. It owns the inventory, its reader, the removal check, the signal subscription
// and the backoff; it never calls vfiod's methods beyond those reads and the check's Ping.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <sdbus-c++/sdbus-c++.h>

#include "dbus_client.hpp"
#include "infra/loop.hpp"
#include "removal_check.hpp"

namespace vfiod::plugin {

// vfiod answers its whole inventory in tens of milliseconds (bench/README.md: 28 ms for 4,000
// objects); one that has not answered in 5 s is frozen or hostile, and the plugin goes on with
// what it knows.
constexpr auto kReadTimeout = std::chrono::seconds(5);
// After a failed read the next one waits 1 s, doubling up to 30 s, whatever vfiod's signals say
// meanwhile: a frozen or garbage-answering vfiod is asked again now and then, never in a loop.
constexpr auto kFirstReadRetry = std::chrono::seconds(1);
constexpr auto kMaxReadRetry = std::chrono::seconds(30);

class InventoryFollower {
public:
    // How the inventory to serve changed: by a signal (serve it after this turn's messages) or
    // by a whole read (serve it now).
    enum class Update { Changed, Read };

    InventoryFollower(sdbus::IConnection& bus, Loop& loop, std::function<void(Update)> updated);

    // Subscribes to vfiod's signals and its bus name; a whole read follows at the next
    // settle(). False with *err when the bus refuses a subscription: a plugin without the
    // signals would serve a stale inventory forever, so it exits and is started again.
    bool follow(sdbus::IConnection& bus, std::string* err);
    // The inventory to serve: while removals wait for their check, the one before them.
    client::DaemonView view() const;
    // After each loop turn: a whole read if one is due, then the heap trimmed after a read.
    void settle();
    // Runs one entry from the bus, the loop or gRPC: what it throws (sdbus::Error, bad_alloc,
    // system_error) is logged and the inventory read again after the usual backoff, rather than
    // unwinding through sd-bus or the loop into std::terminate.
    void guarded(const char* what, const std::function<void()>& f);

private:
    // The state of a failing or absent vfiod.
    struct Backoff {
        int failures = 0;         // reads failed in a row (not for want of an owner)
        Loop::TimerId retry = 0;  // the backed-off next read, while one is scheduled
        bool said_absent = false;
    };

    void read();
    void on_change(sdbus::Message& signal);
    void on_read(const client::ClientResult& r, client::Inventory&& inventory);
    void read_failed(const client::ClientResult& r);
    void owner_changed(bool owner);
    void removal_checked(bool alive, const std::string& why, client::Inventory&& before);

    Loop& loop_;
    std::function<void(Update)> updated_;
    client::Inventory inventory_;  // read whole at start and on a new owner, then kept by signals
    client::ViewReader reader_;
    RemovalCheck check_;
    std::shared_ptr<client::Watch> watch_;
    Backoff backoff_;
    bool due_ = true;    // a whole read is due
    bool trim_ = false;  // an inventory was read: give its memory back
};

}  // namespace vfiod::plugin
