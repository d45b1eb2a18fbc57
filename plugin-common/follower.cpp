#include "follower.hpp"

#include <malloc.h>

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace vfiod::plugin {

InventoryFollower::InventoryFollower(sdbus::IConnection& bus, Loop& loop,
                                     std::function<void(Update)> updated)
    : loop_(loop),
      updated_(std::move(updated)),
      reader_(bus, kReadTimeout),
      check_(bus, kReadTimeout) {}

client::DaemonView InventoryFollower::view() const {
    const client::Inventory* before = check_.before();
    return (before ? *before : inventory_).view();
}

bool InventoryFollower::follow(sdbus::IConnection& bus, std::string* err) {
    try {
        watch_ = client::watch_inventory(
            bus,
            [this](sdbus::Message& m) { guarded("a change from vfiod", [&] { on_change(m); }); },
            [this](bool owner) {
                guarded("vfiod's bus name changing hands", [&] { owner_changed(owner); });
            });
    } catch (const sdbus::Error& e) {
        *err = "cannot follow vfiod's signals on the bus: " + e.getMessage();
        return false;
    }
    return true;
}

void InventoryFollower::read() {
    due_ = false;
    client::ClientResult r =
        reader_.start([this](const client::ClientResult& res, client::Inventory&& inventory) {
            guarded("applying vfiod's inventory", [&] { on_read(res, std::move(inventory)); });
        });
    if (!r.ok())
        read_failed(r);
}

// From the bus's message processing. A change is applied to the inventory by itself; the
// snapshot follows after this turn's messages. A change that comes while a whole read is due,
// in flight or backed off is left to that read, or to one after it (the answer may predate the
// change); one that cannot be applied by itself asks for a whole read. A removal is applied
// too, but served only once RemovalCheck says vfiod goes on: vfiod removes every object when
// it stops, and the plugin then keeps the last inventory (bindings outlive vfiod). The
// removals that follow one before its answer are the same episode: they were sent before it.
void InventoryFollower::on_change(sdbus::Message& signal) {
    if (due_ || reader_.busy() || backoff_.retry) {
        due_ = true;
        return;
    }
    if (signal.getMemberName() == "InterfacesRemoved" && !check_.pending() &&
        !check_.start(signal.getSender(), inventory_,
                      [this](bool alive, const std::string& why, client::Inventory&& before) {
                          guarded("checking a removal", [&] {
                              removal_checked(alive, why, std::move(before));
                          });
                      })) {
        due_ = true;  // unconfirmed, so unapplied: the whole read says what is gone
        return;
    }
    if (inventory_.apply(signal))
        updated_(Update::Changed);
    else
        due_ = true;
}

// vfiod answered after the removals: they stand. Otherwise the inventory goes back to what it
// was, and the owner change that follows a stopping vfiod, or a whole read, says what is gone.
void InventoryFollower::removal_checked(bool alive, const std::string& why,
                                        client::Inventory&& before) {
    if (alive) {
        updated_(Update::Changed);
        return;
    }
    spdlog::debug("vfiod did not confirm a removal ({}); keeping the inventory as it was",
                  why);
    inventory_ = std::move(before);
    due_ = true;
}

// From the bus's message processing: no D-Bus call here, and nothing that waits.
void InventoryFollower::on_read(const client::ClientResult& r, client::Inventory&& inventory) {
    if (r.ok()) {
        if (backoff_.failures)
            spdlog::info("vfiod answers again: inventory read");
        backoff_.failures = 0;
        backoff_.said_absent = false;
        check_.cancel();  // the answer is newer than any removal it would confirm
        inventory_ = std::move(inventory);
        updated_(Update::Read);
        trim_ = true;
    } else if (r.code == client::ClientResult::Code::Unavailable) {
        // Read again on NameOwnerChanged, not before.
        if (!backoff_.said_absent)
            spdlog::info("vfiod is not running; waiting for org.vfiod1 on the system bus");
        backoff_.said_absent = true;
        backoff_.failures = 0;
    } else {
        read_failed(r);
    }
}

// Keeps the last inventory (bindings outlive a sick vfiod; /dev/vfio still drives health) and
// reads again after a backoff. One warning per episode.
void InventoryFollower::read_failed(const client::ClientResult& r) {
    int& failures = backoff_.failures;
    auto delay = std::min<std::chrono::seconds>(kFirstReadRetry * (1 << std::min(failures, 5)),
                                                kMaxReadRetry);
    if (failures++ == 0)
        spdlog::warn("cannot read vfiod's inventory: {}; serving the last one known, asking "
                     "again in {} s and backing off", r.message, delay.count());
    else
        spdlog::debug("vfiod's inventory still unreadable: {}; asking again in {} s", r.message,
                      delay.count());
    backoff_.retry = loop_.after(delay, [this] {
        backoff_.retry = 0;
        due_ = true;
    });
}

// A new owner is a new vfiod: what was in flight or backed off concerned the old one.
void InventoryFollower::owner_changed(bool owner) {
    reader_.cancel();
    // Removals not confirmed yet were the old owner's last words, or are re-read from the new.
    if (auto before = check_.cancel())
        inventory_ = std::move(*before);
    loop_.cancel(backoff_.retry);
    backoff_.retry = 0;
    backoff_.failures = 0;
    due_ = owner;
    if (owner)
        spdlog::info("vfiod is on the bus: re-reading its inventory");
    else
        spdlog::warn("vfiod left the bus: keeping the last inventory, following /dev/vfio for "
                     "health");
}

void InventoryFollower::guarded(const char* what, const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        spdlog::error("{}: {}", what, e.what());
        if (!backoff_.retry)
            read_failed({client::ClientResult::Code::Failed, std::string(what) + ": " + e.what()});
    }
}

void InventoryFollower::settle() {
    if (due_ && !reader_.busy() && !backoff_.retry)
        read();
    // Reading 256 devices' objects allocates about 6 MiB for a moment (every property an
    // sd-bus Variant); freed in the middle of the heap, glibc would keep it all resident.
    // Here, not in on_read(): by now the reply and its decoded objects are gone too.
    if (std::exchange(trim_, false))
        malloc_trim(0);
}

}  // namespace vfiod::plugin
