// The daemon's service layer: event → re-read → plan → execute → publish. A thin front: it
// routes each entry (coldplug, a udev burst, a Reload, a D-Bus method) to the operations it
// makes (service/group_ops, service/pf_ops), which GroupQueue runs (when, and on which thread)
// over the parts (HostModel: what the host is; the deciders: what to do about it; StatusStore:
// what was decided, and what the consumers are told). It owns the config's lifecycle (load,
// reload) and the entries' error guard. The D-Bus adaptor and the event loop only call into it.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "core/plan.hpp"
#include "io/snapshot.hpp"
#include "io/host_fs.hpp"
#include "io/host_tables.hpp"
#include "service/group_queue.hpp"
#include "service/inventory.hpp"
#include "service/op_result.hpp"
#include "service/operation.hpp"
#include "service/service_parts.hpp"

namespace vfiod {

class HealthOp;
class OperatorOp;
class Workers;

struct ServiceOptions {
    std::optional<std::string> config_file;  // --config; default: root/etc/vfiod/vfiod.toml
    bool force_observe = false;              // --observe
};

class Service final : private FollowUps {
public:
    Service(HostFs& fs, ServiceOptions options);
    ~Service();
    Service(const Service&) = delete;
    Service& operator=(const Service&) = delete;

    // Loads the config, runs the coldplug pass over every group and publishes the result (the
    // loop does not run yet; an exception publishing it reaches the caller). False when the
    // config is bad (errors logged with FILE:LINE:COLUMN): the daemon then refuses to start.
    bool start();

    // Publishes what the entries since the last call changed, only the groups concerned (their
    // objects and their functions'), then sends the replies held for it: a caller never has its
    // answer before the bus shows what the operation did. The event loop calls it after every
    // dispatch (run_event_loop); whoever drives the service without a loop (tests, benchmarks)
    // calls it after each entry. Never throws: a failure to publish is logged, the groups it was
    // publishing are published `failed`, and the next call sends everything again.
    void publish();

    // The event loop's entries (a udev burst, SIGHUP) never throw, like D-Bus method calls: an
    // exception from below (publishing on a bus that went away, std::bad_alloc) is logged, the
    // groups being decided are published `failed`, and the daemon keeps serving.

    // Functions named by a burst of udev events: re-read the host and re-decide only the groups
    // those functions belong (or belonged) to.
    void handle_events(const std::set<PciAddress>& touched);
    // Mdev parents that announced or withdrew their types (change, MDEV_STATE=registered or
    // unregistered): each (parent, type) pair of theirs that an [[mdev]] entry names is planned
    // again, and their mdevs published as they are now (DESIGN §12).
    void handle_mdev_events(const std::set<std::string>& parents);
    // Mdevs that came, were probed or went (their own add, bind, unbind, remove): their parents'
    // records are read again and published, and nothing is planned or written (these are not
    // DESIGN §12's triggers: one of vfiod's removed by hand shows pending until the next one,
    // and a create failing in the probe, which sends add and remove, cannot trigger itself).
    void handle_mdev_changes(const std::set<std::string>& uuids);
    // The PCIe error recovery uevents of a burst (DESIGN §13), by function: each one's group
    // checks its health, whatever the function's role (the kernel sends them to every function
    // below the port, the port's other functions included).
    void handle_recovery(const std::map<PciAddress, Recovery>& recovery);
    // Health reasons whose count alone changed wait up to a second (DESIGN §13): when the next
    // is due, and publishing those due by now (the event loop's deadline and after-dispatch).
    std::optional<std::chrono::steady_clock::time_point> health_due() const;
    void flush_health();

    // D-Bus Reload / SIGHUP: a bad config is rejected and the running one kept.
    OpResult reload();
    // Synchronous: the writes run on the caller's thread (tests, and the daemon without workers).
    OpResult bind(std::string_view address);
    OpResult release(std::string_view address);

    // Every write, the D-Bus methods' (DESIGN §6) and the daemon's own (coldplug, udev events,
    // drift re-assertion, the early-override clean-up), goes through one path: decided on the
    // loop, written on a worker thread, its outcome published back on the loop. Operations on
    // one group run one at a time, in order; other groups' run meanwhile. The methods return at
    // once and `reply` runs later on the loop. A Reload waits for the operations in flight,
    // another Reload's included; when they have ended, one reload answers every Reload waiting
    // then, and requests arriving meanwhile wait for it. Without set_workers() everything runs
    // synchronously. Set the workers before start(), the coldplug binds use them too, and let
    // them go first: their jobs use the service until they end (~Workers waits for them).
    void set_workers(Workers* workers);
    // What says that the host's mount table, swaps, routes or links changed, so events re-read
    // them only then. The live host watches the kernel (watch_kernel_tables()); a tree has
    // nothing to watch and re-reads them on every event. Tests replace it before start().
    void set_table_watch(std::unique_ptr<TableWatch> watch);
    const HostTables& tables() const;
    void bind_async(std::string address, Reply reply);
    void release_async(std::string address, Reply reply);
    void reload_async(Reply reply);
    // True while an operation on the group runs or waits.
    bool busy(unsigned group) const;
    // Runs `cb` on the loop once no operation runs or waits (at once if none does): the daemon
    // tells systemd it is ready when the coldplug pass has ended, while serving the bus already.
    void when_idle(std::function<void()> cb);

    std::string plan_json() const;
    const Inventory& inventory() const;
    Mode mode() const;

    // Called by publish() when the inventory changed, with what changed: the first time with
    // everything. A bind's `pending` step is published before its writes end (they run on a
    // worker, after the dispatch that decided them), so consumers see each transition.
    void set_on_change(OnChange cb);

private:
    template <typename F>
    OpResult guarded(const char* what, F&& entry);
    void apply_events(const std::set<PciAddress>& touched);
    OpResult apply_reload();
    // What a crash or a blocked write left unfinished, per group (start()).
    std::map<unsigned, std::vector<PciAddress>> reconcile();
    void refresh_fences();
    void decide(const std::set<unsigned>& groups, bool from_events);
    // An operation per PF, in its group's queue (a PF outside any group is not acted on).
    void for_pfs(const std::set<PciAddress>& pfs,
                 const std::function<OperationPtr(const PciAddress&)>& make);
    void decide_pfs(const std::set<PciAddress>& pfs);
    using MdevPair = std::pair<std::string, std::string>;  // (parent, type)
    // The mdev side read (null: all of it) or `parents` alone (so an event costs the same
    // however many mdevs exist), planned, and published as planned (parents being written
    // excepted: their operation publishes them; and with keep_unsettled, pairs whose last
    // operation was refused or failed: their records stand until a trigger); the plan read.
    std::vector<MdevPlan> read_mdevs(const std::set<std::string>* parents, bool keep_unsettled);
    // read_mdevs, then an MdevOp per (parent, type) pair of what it read, in config order, in
    // the mdev queue.
    void decide_mdevs(const std::set<std::string>* parents);
    // The mdev names the loop must not read (FencedHostFs): being written, or stuck.
    std::set<std::string> fenced_mdev_names();
    // The mdev entries a crash (or anyone) left in the journal, logged and removed (enforce
    // mode, at start): the plan that follows decides every mdev write from the host, so an
    // entry never makes vfiod write to an mdev, its own or not (DESIGN §12).
    void settle_mdev_journal();
    // One pair's MdevOp, unless it waits in the queue already.
    void queue_mdev(const MdevPair& key);
    // st, whose outcome (now, or when its writes end) files the pair as settled or not.
    GroupQueue::Started noting_mdev(const MdevPair& key, GroupQueue::Started st);
    // The SR-IOV side of a burst: the PFs it concerns (`before`: as the last read had them)
    // and the new VFs left to the host.
    void pf_events(const std::set<PciAddress>& touched, std::set<PciAddress> before);
    // FollowUps, what the operations ask for on their way.
    void decide(unsigned group) override;
    // The PFs not ready yet, tried again: nothing says when a VM let a VF go (DESIGN §11).
    void retry_pfs() override;
    // The VFs among `vfs` left to the host, each probed in its group's queue (enforce mode),
    // except those whose PF's group is busy, unless that PF is `finishing` its operation.
    void probe_left(const std::set<PciAddress>& vfs, const PciAddress* finishing) override;
    void deciding(unsigned group) override;
    void check_health(unsigned group, HealthCheck why,
                      const std::map<PciAddress, std::string>& released = {}) override {
        check_health(group, why, released, {});
    }
    // With the recovery uevents the check takes into account.
    void check_health(unsigned group, HealthCheck why,
                      const std::map<PciAddress, std::string>& released,
                      const std::map<PciAddress, Recovery>& recovery);
    // One check each, of every group health is watched in: the published ones and those of
    // PCI mdev parents (start, Reload).
    void check_all_health(HealthCheck why);
    // An operator's Bind or Release: queued in its group, or answered at once from the plan.
    void submit(std::shared_ptr<OperatorOp> op, Reply reply);
    void enqueue(unsigned group, OperationPtr op);
    // An operation as the group queue carries it: prepared, fenced, run and completed.
    GroupQueue::Op queued(OperationPtr op, unsigned group, Reply reply);
    GroupQueue::Started start(const OperationPtr& op, unsigned group);
    GroupQueue::Started start_health(const std::shared_ptr<HealthOp>& op);
    OpResult finish(Operation& op, unsigned group);
    // A group's queue emptied: the events it held back are heard now.
    void group_idle(unsigned group);

    ServiceOptions options_;
    // Made with the service and never replaced: operations on worker threads use them until
    // they end, and the workers go before the service (set_workers()).
    ServiceParts s_;
    const std::unique_ptr<GroupQueue> queue_;
    // The health checks (DESIGN §13), one at a time per group, beside the group's writes, and
    // at most kMaxHealthChecks of all groups at once.
    static constexpr std::size_t kMaxHealthChecks = 8;
    const std::unique_ptr<GroupQueue> health_queue_;
    // Events about a group busy with an operation, heard when it ends.
    std::map<unsigned, std::set<PciAddress>> deferred_events_;
    std::set<unsigned> deciding_;  // groups the current entry has started to decide
    // The mdev names the running MdevOp fences (Operation::fenced_mdevs): they run one at a
    // time, in the one mdev queue.
    std::set<std::string> mdev_writing_;
    std::set<MdevPair> mdev_waiting_;  // pairs queued, not started
    // Pairs whose last operation was refused or failed: the §11 retries queue these alone.
    std::set<MdevPair> mdev_unsettled_;
    // A group's health check queued and not started: later triggers join it, so an error storm
    // costs one check per group at a time (DESIGN §13).
    std::map<unsigned, std::shared_ptr<HealthOp>> health_waiting_;
};

}  // namespace vfiod
