// vfiod-device-plugin's engine (DESIGN §9): follows vfiod's inventory on the bus and
// /dev/vfio, keeps one ResourceServer per published resource, registers them with the kubelet
// and serves them again when the kubelet restarts. Runs on one Loop thread; gRPC threads reach
// it only through the loop's mailbox. It owns its servers, its inotify watches and its view of
// the inventory; it never writes to sysfs and never calls vfiod's methods (reads only).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sdbus-c++/sdbus-c++.h>

#include "dbus_client.hpp"
#include "infra/fd.hpp"
#include "infra/loop.hpp"
#include "io/host_fs.hpp"
#include "model.hpp"
#include "registrar.hpp"
#include "server.hpp"

namespace vfiod::plugin {

// vfiod answers its whole inventory in tens of milliseconds (bench/README.md: 28 ms for 4,000
// objects); one that has not answered in 5 s is frozen or hostile, and the plugin goes on with
// what it knows.
constexpr auto kReadTimeout = std::chrono::seconds(5);
// After a failed read the next one waits 1 s, doubling up to 30 s, whatever vfiod's signals say
// meanwhile: a frozen or garbage-answering vfiod is asked again now and then, never in a loop.
constexpr auto kFirstReadRetry = std::chrono::seconds(1);
constexpr auto kMaxReadRetry = std::chrono::seconds(30);

// The command line, as main() parsed it.
struct Options {
    std::string kubelet_dir = "/var/lib/kubelet/device-plugins";
    std::string pod_resources = "/var/lib/kubelet/pod-resources/kubelet.sock";
    std::string root = "/";
    bool verbose = false;
};

class Plugin {
public:
    Plugin(const Options& o, sdbus::IConnection& bus, Loop& loop)
        : opts_(o),
          bus_(bus),
          loop_(loop),
          host_(o.root),
          endpoints_{o.kubelet_dir, o.pod_resources},
          registrar_(o.kubelet_dir),
          reader_(bus, kReadTimeout) {}

    // Until SIGTERM/SIGINT (0); 1 when it cannot start (no inotify, no match on the bus) or the
    // bus is lost.
    int run();

private:
    // A resource not registered with the current kubelet yet.
    struct Pending {
        std::uint64_t attempt_id = 0;  // the Register in flight; 0 when none is
        int tries = 0;                 // failed for want of a listener, in a row
        Loop::TimerId retry = 0;       // the next try, when one is scheduled
    };

    // Runs one entry from the bus, the loop or gRPC: what it throws (sdbus::Error, bad_alloc,
    // system_error) is logged and the inventory read again after the usual backoff, rather than
    // unwinding through sd-bus or the loop into std::terminate.
    void guarded(const char* what, const std::function<void()>& f);
    void settle();
    void read_inventory();
    void on_change(sdbus::Message& signal);
    void on_read(const client::ClientResult& r, client::Inventory&& inventory);
    void read_failed(const client::ClientResult& r);
    void owner_changed(bool owner);
    void rebuild();
    void reconcile(const Snapshot& before, const Snapshot& after);
    void stop_servers(const std::vector<ResourceServer*>& servers);
    void check_sockets(bool kubelet_restarted);
    void register_all_pending();
    void need_registration(const std::string& name);
    void try_register(const std::string& name);
    void registered(const std::string& name, std::uint64_t attempt, const RegisterOutcome& out);
    void watch_vfio_dir();
    void handle_inotify();

    const Options& opts_;
    sdbus::IConnection& bus_;
    Loop& loop_;
    KernelHostFs host_;
    Endpoints endpoints_;
    Registrar registrar_;
    SnapshotStore store_;
    client::Inventory inventory_;  // read whole at start and on a new owner, then kept by signals
    client::ViewReader reader_;
    int failures_ = 0;            // reads failed in a row (not for want of an owner)
    Loop::TimerId read_retry_ = 0;  // the backed-off next read, while one is scheduled
    bool said_absent_ = false;
    std::map<std::string, std::unique_ptr<ResourceServer>> servers_;
    std::map<std::string, Pending> unregistered_;
    std::uint64_t attempts_ = 0;
    bool said_waiting_ = false;

    Fd inotify_;
    int wd_kubelet_ = -1, wd_vfio_ = -1, wd_dev_ = -1;
    bool dirty_ = true;  // a whole read is due
    bool model_dirty_ = false, health_dirty_ = false;  // the snapshot is due
    bool trim_ = false;  // an inventory was read: give its memory back
};

}  // namespace vfiod::plugin
