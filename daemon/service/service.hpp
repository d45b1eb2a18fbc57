// The daemon's service layer: event → re-read → plan → execute → publish. It owns the running
// config and the per-group states; the D-Bus adaptor and the event loop only call into it.
#pragma once

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
#include "exec/executor.hpp"
#include "io/snapshot.hpp"
#include "io/host_fs.hpp"
#include "io/host_tables.hpp"
#include "service/inventory.hpp"

namespace vfiod {

class Executor;
class FencedHostFs;
class Journal;
class Workers;

struct ServiceOptions {
    std::optional<std::string> config_file;  // --config; default: root/etc/vfiod/vfiod.toml
    bool force_observe = false;              // --observe
};

// The outcome of an operator request, in the closed set of D-Bus errors (DESIGN §6).
struct OpResult {
    // Busy: too many requests already wait (org.freedesktop.DBus.Error.LimitsExceeded).
    enum class Code { Ok, InvalidArgs, NotFound, NotAllowlisted, Refused, Failed, Busy };
    Code code = Code::Ok;
    std::string message;  // for Refused it starts with the reason code

    bool ok() const { return code == Code::Ok; }
    static OpResult error(Code c, std::string m) { return {c, std::move(m)}; }
};

class Service {
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
    using Reply = std::function<void(const OpResult&)>;
    void set_workers(Workers* workers) { workers_ = workers; }
    // What says that the host's mount table, swaps, routes or links changed, so events re-read
    // them only then. The live host watches the kernel (watch_kernel_tables()); a tree has
    // nothing to watch and re-reads them on every event. Tests replace it before start().
    void set_table_watch(std::unique_ptr<TableWatch> watch) { tables_ = HostTables(std::move(watch)); }
    const HostTables& tables() const { return tables_; }
    void bind_async(std::string address, Reply reply);
    void release_async(std::string address, Reply reply);
    void reload_async(Reply reply);
    // True while an operation on the group runs or waits.
    bool busy(unsigned group) const;
    // Runs `cb` on the loop once no operation runs or waits (at once if none does): the daemon
    // tells systemd it is ready when the coldplug pass has ended, while serving the bus already.
    void when_idle(std::function<void()> cb);

    std::string plan_json() const;
    const Inventory& inventory() const { return inventory_; }
    Mode mode() const;

    // Called by publish() when the inventory changed, with what changed: the first time with
    // everything. A bind's `pending` step is published before its writes end (they run on a
    // worker, after the dispatch that decided them), so consumers see each transition.
    using OnChange = std::function<void(const Inventory&, const InventoryChange&)>;
    void set_on_change(OnChange cb) { on_change_ = std::move(cb); }

    // One group's published state and why.
    struct Status {
        GroupState state = GroupState::Pending;
        Reason reason = Reason::None;
        std::string message;
        std::vector<PciAddress> blockers;
        bool operator==(const Status&) const = default;
    };

private:
    template <typename F>
    OpResult guarded(const char* what, F&& entry);
    void apply_events(const std::set<PciAddress>& touched);
    OpResult apply_reload();
    // One operation split at its writes: decided on the loop, written off it.
    struct Prepared {
        std::optional<OpResult> done;  // answered (or decided) without writing
        unsigned group = 0;
        GroupPlan plan;               // its functions are fenced while the writes run
        bool releasing = false;
        Trigger trigger{};
        // The early-override clean-up: each function's writes back to the host; the group's
        // status is then `after`, whatever the writes did.
        std::vector<std::pair<PciAddress, std::vector<Write>>> cleanup;
        std::optional<Status> after;
        // Finishing or rolling back what the last run left unfinished (the journal names the
        // functions); the group's decision follows in its queue.
        bool reconciling = false;
        std::vector<PciAddress> functions;
    };
    struct Request {
        enum class Kind { Bind, Release, Decide, Reconcile };
        Kind kind = Kind::Bind;
        std::string address;       // Bind, Release
        Reply reply;               // Bind, Release
        bool from_events = false;  // Decide: a udev event, not coldplug or a reload
    };
    Prepared prepare(const Request& r, unsigned group);
    static Prepared ended(OpResult r);  // a request answered without writes
    // The function an operator's Bind or Release names, re-read now; nullptr, with the answer
    // in *why, when the address is malformed or names no function.
    const PciFunction* requested_function(std::string_view address, OpResult* why);
    Prepared prepare_bind(std::string_view address);
    Prepared prepare_release(std::string_view address);
    Prepared prepare_decide(unsigned group, bool from_events);
    GroupOutcome run_writes(const Prepared& p);  // any thread: executor only
    OpResult complete(const Prepared& p, const GroupOutcome& o);
    void submit(Request r);
    void enqueue(unsigned group, Request r);
    void start_next(unsigned group);
    // Sends `reply` once what this dispatch changed is published (publish()).
    void answer(Reply reply, OpResult r);
    void finish(unsigned group, const Prepared& p, const GroupOutcome& o);
    void group_idle(unsigned group);
    void serve_reloads();
    void refresh_fences();

    void reread();
    std::set<unsigned> refresh(std::set<PciAddress> touched);
    // What a read of the host found odd (a FIFO for an attribute, junk names), logged as a
    // warning the first time it is seen, not again while it stays: a re-read does not repeat it.
    void log_host_warnings(const std::vector<std::string>& warnings, bool whole_host);
    std::set<PciAddress> members(const std::set<unsigned>& groups) const;
    std::optional<std::pair<GroupInfo, std::vector<DeviceInfo>>> group_view(unsigned id) const;
    void decide(const std::set<unsigned>& groups, bool from_events);
    std::vector<const PciFunction*> parked_early(const GroupPlan& gp) const;
    void reconcile();
    void log_interrupted(const GroupOutcome& o);
    OpResult refusal(const GroupPlan& gp) const;
    void set_status(unsigned group, Status s);
    void forget_group(unsigned group);
    void publish_changes();
    const GroupPlan* group_plan(unsigned group) const;
    std::optional<unsigned> group_of(const PciAddress& a) const;
    std::set<unsigned> groups_whose_entries_changed(const Config& before, const Config& after) const;
    std::map<PciAddress, std::string> originals(unsigned group) const;

    HostFs& fs_;                          // the executor's: writes, on worker threads
    std::unique_ptr<FencedHostFs> view_;  // the loop's reads
    ServiceOptions options_;
    Config config_;
    // The host as last read, and the plan of every group that holds an allowlisted function.
    // Start-up and Reload read everything; an event, an operation and its outcome re-read only
    // the groups concerned (refresh), so their cost does not grow with the host.
    Snapshot snapshot_;
    HostTables tables_;
    std::map<unsigned, GroupPlan> plans_;
    std::map<unsigned, std::set<PciAddress>> claimants_;  // functions whose link names the group
    std::set<unsigned> dirty_;    // groups whose published view may have changed since publish()
    bool publish_all_ = true;     // everything may have (start-up, Reload)
    // What on_change_ has not been told yet: everything at first, and what a publication that
    // threw did not get across.
    InventoryChange unsent_{.manager = true, .groups = {}, .devices = {}};
    std::vector<std::pair<Reply, OpResult>> replies_;  // held until publish()
    std::map<unsigned, Status> status_;
    std::set<unsigned> reasserted_;  // groups whose drift was re-asserted once already
    std::set<std::string> host_warned_;  // host warnings logged and still seen
    std::set<unsigned> deciding_;    // groups the current entry has started to decide
    // Made with the service and never replaced: operations on worker threads use them until
    // they end, and the workers go before the service (set_workers()).
    const std::unique_ptr<Journal> journal_;
    const std::unique_ptr<Executor> executor_;
    Inventory inventory_;
    OnChange on_change_;

    Workers* workers_ = nullptr;
    // Operator requests a group's queue or a waiting reload holds at most; more are answered Busy,
    // so callers queuing behind a hung write cannot grow vfiod without bound.
    static constexpr std::size_t kMaxWaiting = 32;
    std::map<unsigned, std::deque<Request>> queues_;  // per group; the front one is running
    std::map<unsigned, std::set<PciAddress>> running_;  // functions being written, per group
    std::map<unsigned, std::set<PciAddress>> deferred_events_;
    std::vector<Reply> reloads_;  // waiting for the operations in flight; served by one reload
    std::deque<Request> held_;    // arrived while a reload waits
    bool serving_reloads_ = false;  // serve_reloads() is running
    std::vector<std::function<void()>> idle_waiters_;
    std::map<unsigned, std::vector<PciAddress>> interrupted_;  // start(): to reconcile, per group
};

}  // namespace vfiod
