#include "service/service.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "core/mdev.hpp"
#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "infra/workers.hpp"
#include "io/config_loader.hpp"
#include "io/mdev_reader.hpp"
#include "io/proc_fds.hpp"
#include "io/vfio_use.hpp"
#include "service/group_ops.hpp"
#include "service/health_ops.hpp"
#include "service/mdev_ops.hpp"
#include "service/pf_ops.hpp"
#include "service/service_parts.hpp"

namespace vfiod {

namespace {
// The queue of every MdevOp: not an IOMMU group's number (the kernel numbers those from 0 up),
// one queue so a parent's pairs, which share its budget, run one after another in config order.
constexpr unsigned kMdevQueue = ~0u;
}  // namespace

ServiceParts::ServiceParts(HostFs& fs_, const std::function<Mode()>& mode_, FollowUps& then_)
    : fs(fs_),
      journal(fs),
      executor(fs, &journal),
      host(fs),
      health(fs),
      store(host, journal, health, mode_),
      decider(host, store, executor, journal, mode_),
      pf_decider(host, store, mode_),
      mdev_writer(fs, std::chrono::seconds(10), &journal),
      then(then_) {}

OpResult run_now(Operation& op, ServiceParts& s) {
    if (auto done = op.prepare(s))
        return *done;
    op.run(s);
    return op.complete(s);
}

Service::Service(HostFs& fs, ServiceOptions options)
    : options_(std::move(options)),
      s_(fs, [this] { return mode(); }, *this),
      queue_(std::make_unique<GroupQueue>(GroupQueue::Hooks{
          .answer = [this](Reply reply, OpResult r) {
              s_.store.answer(std::move(reply), std::move(r));
          },
          .reload = [this] { return reload(); },
          .group_idle = [this](unsigned g) { group_idle(g); },
      })),
      health_queue_(std::make_unique<GroupQueue>(GroupQueue::Hooks{
          .answer = [](Reply, OpResult) {},
          .reload = [] { return OpResult{}; },
          .group_idle = {},
      })) {
    s_.host.set_on_replan([this](std::optional<unsigned> g) { s_.store.mark(g); });
    if (fs.live()) {
        std::vector<std::string> notes;
        set_table_watch(watch_kernel_tables(&notes));
        for (const auto& n : notes)
            spdlog::info("{}", n);
    }
}

Service::~Service() = default;

Mode Service::mode() const {
    return options_.force_observe ? Mode::Observe : s_.host.config().mode;
}

void Service::set_workers(Workers* workers) {
    queue_->set_workers(workers);
    health_queue_->set_workers(workers);
    // A start or a Reload checks every group at once: a few threads at a time, not one per
    // group (a config read can sleep while a reset blocks config access).
    health_queue_->set_max_running(kMaxHealthChecks);
}
void Service::set_table_watch(std::unique_ptr<TableWatch> watch) {
    s_.host.set_table_watch(std::move(watch));
}
const HostTables& Service::tables() const { return s_.host.tables(); }
const Inventory& Service::inventory() const { return s_.store.inventory(); }
void Service::set_on_change(OnChange cb) { s_.store.set_on_change(std::move(cb)); }
bool Service::busy(unsigned group) const { return queue_->busy(group); }
void Service::when_idle(std::function<void()> cb) { queue_->when_idle(std::move(cb)); }
void Service::publish() { s_.store.publish(); }

std::string Service::plan_json() const {
    Plan plan = s_.host.whole_plan();
    if (!s_.host.config().mdevs.empty()) {  // the mdevs as MdevOp would plan them now
        const HostFs& fs = s_.host.view();
        MdevHost host = read_mdev_host(fs, nullptr);
        HostUse use;
        read_mdev_use(fs, host, scan_open_nodes(fs), &use);
        plan.mdevs = plan_mdevs(host, s_.host.snapshot().topology, use, s_.host.config(),
                                &plan.warnings);
    }
    return plan_to_json(plan);
}

bool Service::start() {
    ConfigResult r = load_config(s_.fs, options_.config_file);
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("{}", e);
        return false;
    }
    s_.host.replace_config(std::move(*r.config));
    const Config& config = s_.host.config();
    s_.executor.set_write_timeout(std::chrono::seconds(config.write_timeout));
    s_.mdev_writer.set_timeout(std::chrono::seconds(config.write_timeout));
    if (config.files.empty())
        spdlog::info("no configuration file: the allowlist is empty, nothing to do");
    else
        spdlog::info("configuration {}: {} device entries, {} protect entries, mode {}",
                     join(config.files), config.devices.size(), config.protects.size(),
                     to_string(mode()));
    s_.health.load();
    std::map<unsigned, std::vector<PciAddress>> interrupted;
    if (mode() == Mode::Enforce)
        interrupted = reconcile();
    s_.host.reread();
    std::set<unsigned> all;
    for (const auto& [g, gp] : s_.host.plans())
        all.insert(g);
    for (auto& [g, fns] : interrupted) {
        s_.host.unfence_group(g);  // the operation fences them from here
        all.insert(g);            // decided once it is done, whatever the fenced read made of it
        enqueue(g, std::make_shared<ReconcileOp>(g));
    }
    decide(all, false);
    if (mode() == Mode::Enforce) {
        std::vector<std::string> errors;
        auto unfinished = s_.executor.unfinished_pfs(&errors);
        for (const auto& err : errors)
            spdlog::error("unreadable journal entry left alone: {}", err);
        for_pfs({unfinished.begin(), unfinished.end()},
                [](const PciAddress& pf) { return std::make_shared<PfSettleOp>(pf); });
        settle_mdev_journal();
    }
    decide_pfs(s_.host.governed_pfs());
    decide_mdevs(nullptr);
    check_all_health(HealthCheck::Start);
    if (!s_.host.snapshot().topology.iommu_enabled) {
        Plan plan = s_.host.whole_plan();
        if (!plan.groups.empty())
            spdlog::warn("the IOMMU is disabled: {} allowlisted function(s) cannot be passed "
                         "through", plan.groups.size());
    }
    s_.store.publish_changes();
    return true;
}

template <typename F>
OpResult Service::guarded(const char* what, F&& entry) {
    // Entries nest (a udev burst decides groups, each one an operation of its own): an inner
    // one that fails answers for the groups it decided; one that succeeds hands them to the
    // outer one. What they set is published once the dispatch ends (publish()).
    std::set<unsigned> outer = std::exchange(deciding_, {});
    try {
        OpResult r = entry();
        // Into the bigger set: a burst nests one entry per group in an outer one that holds
        // them all, and merging the outer into each inner one would cost groups^2.
        if (deciding_.size() < outer.size())
            std::swap(deciding_, outer);
        deciding_.merge(outer);
        return r;
    } catch (const std::exception& e) {
        std::string why = std::string(what) + ": " + e.what();
        spdlog::error("{}; the groups it was deciding are marked failed", why);
        for (unsigned g : deciding_)
            if (s_.host.group_plan(g))  // not one the entry found gone
                s_.store.set_status(
                    g, {GroupState::Failed, Reason::None, "internal error: " + why, {}});
        deciding_ = std::move(outer);
        return OpResult::error(OpResult::Code::Failed, why);
    }
}

void Service::handle_events(const std::set<PciAddress>& touched) {
    guarded("udev events", [&] {
        apply_events(touched);
        return OpResult{};
    });
}

void Service::handle_mdev_events(const std::set<std::string>& parents) {
    guarded("mdev events", [&] {
        decide_mdevs(&parents);
        return OpResult{};
    });
}

void Service::handle_mdev_changes(const std::set<std::string>& uuids) {
    guarded("mdev events", [&] {
        std::set<std::string> parents;
        for (const std::string& uuid : uuids) {
            // Its parent as published, or, for one not published yet, the directory its
            // device lives in: an mdev's device is a child of its parent's, named alike.
            auto m = s_.store.mdevs().find(uuid);
            if (m != s_.store.mdevs().end()) {
                parents.insert(m->second.parent);
                continue;
            }
            auto dir = s_.host.view().resolve(std::string(mdev_paths::kDevices) + "/" + uuid);
            if (!dir)
                continue;  // gone before it was published: nothing to take back
            const std::string parent = dir->substr(0, dir->rfind('/'));
            parents.insert(parent.substr(parent.rfind('/') + 1));
        }
        read_mdevs(&parents, true);
        return OpResult{};
    });
}

OpResult Service::reload() {
    return guarded("reload", [&] { return apply_reload(); });
}

void Service::apply_events(const std::set<PciAddress>& touched) {
    refresh_fences();
    // A removed function is only in the old topology, an added one only in the new: ask both.
    // Groups no event names can change too (a PF's group when its VFs come or go): refresh
    // returns every group it re-planned, and each is decided again.
    std::map<unsigned, std::set<PciAddress>> events_of;
    for (const auto& a : touched)
        if (auto g = s_.host.group_of(a))
            events_of[*g].insert(a);
    std::set<PciAddress> pfs_before = s_.host.pfs_concerned(touched);
    for (unsigned g : s_.host.refresh(touched))
        events_of[g];
    for (const auto& a : touched)
        if (auto g = s_.host.group_of(a))
            events_of[*g].insert(a);
    // A group busy with an operation hears of its events when the operation ends: deciding it
    // now would race the writes (and most of these events are those writes' own).
    std::set<unsigned> groups;
    for (auto& [g, events] : events_of) {
        if (!busy(g))
            groups.insert(g);
        else if (!events.empty())
            deferred_events_[g].merge(events);
        else
            deferred_events_[g].merge(s_.host.members({g}));
    }
    decide(groups, true);
    pf_events(touched, std::move(pfs_before));
    // Correctable errors send no uevent: any event of a function reads its totals (DESIGN §13).
    std::set<unsigned> checked;
    for (const auto& a : touched) {
        if (!s_.host.snapshot().topology.find(a)) {
            s_.health.forget(a);
            continue;
        }
        if (auto g = s_.host.group_of(a); g && checked.insert(*g).second)
            check_health(*g, HealthCheck::Event);
    }
}

void Service::handle_recovery(const std::map<PciAddress, Recovery>& recovery) {
    guarded("recovery events", [&] {
        for (const auto& [a, r] : recovery) {
            auto g = s_.host.group_of(a);
            if (!g)
                continue;
            check_health(*g, HealthCheck::Event, {}, {{a, r}});
        }
        return OpResult{};
    });
}

void Service::check_health(unsigned g, HealthCheck why,
                           const std::map<PciAddress, std::string>& released,
                           const std::map<PciAddress, Recovery>& recovery) {
    if (auto waiting = health_waiting_.find(g); waiting != health_waiting_.end()) {
        waiting->second->add(why);
        waiting->second->add_released(released);
        for (const auto& [a, r] : recovery)
            waiting->second->add_recovery(a, r);
        return;
    }
    auto op = std::make_shared<HealthOp>(g, why);
    op->add_released(released);
    for (const auto& [a, r] : recovery)
        op->add_recovery(a, r);
    health_waiting_.emplace(g, op);
    // Without workers the queue may run it at once, before enqueue() returns.
    health_queue_->enqueue(g, {[this, op, g] {
                                   health_waiting_.erase(g);
                                   return start_health(op);
                               },
                               {}});
}

GroupQueue::Started Service::start_health(const std::shared_ptr<HealthOp>& op) {
    // Not fenced, and not in the group's queue: the check writes nothing and reads on a worker
    // (no read of it can block the loop), so neither a group's writes nor a Reload waits for it.
    std::optional<OpResult> done;
    OpResult failed = guarded(op->what(), [&] {
        done = op->prepare(s_);
        return OpResult{};
    });
    if (!failed.ok() || done)
        return {failed.ok() ? done : failed, {}, {}};
    return {std::nullopt, [this, op] { op->run(s_); },
            [this, op] { return guarded(op->what(), [&] { return op->complete(s_); }); }};
}

void Service::check_all_health(HealthCheck why) {
    std::set<unsigned> groups;
    for (const auto& [g, st] : s_.store.statuses())
        groups.insert(g);
    for (const auto& [uuid, m] : s_.store.mdevs())
        if (auto a = PciAddress::parse(m.parent))
            if (auto g = s_.host.group_of(*a))
                groups.insert(*g);
    for (unsigned g : groups)
        check_health(g, why);
}

std::optional<std::chrono::steady_clock::time_point> Service::health_due() const {
    return s_.health.due();
}

void Service::flush_health() {
    if (auto due = s_.health.due(); !due || *due > std::chrono::steady_clock::now())
        return;
    for (const auto& a : s_.health.flush(std::chrono::steady_clock::now()))
        s_.store.health_changed(a);
    s_.store.publish();
}

void Service::pf_events(const std::set<PciAddress>& touched, std::set<PciAddress> before) {
    std::set<PciAddress> pfs = s_.host.pfs_concerned(touched);
    pfs.merge(before);
    decide_pfs(pfs);
    probe_left(touched, nullptr);
}

void Service::probe_left(const std::set<PciAddress>& vfs, const PciAddress* finishing) {
    if (mode() != Mode::Enforce)
        return;
    for (const auto& vf : s_.pf_decider.to_probe(vfs)) {
        // While its PF's change runs, autoprobe may still be 0 and the kernel would attach
        // nothing: the change's end probes the VFs then.
        const PciFunction* fn = s_.host.snapshot().topology.find(vf);
        auto pf_group = s_.host.group_of(*fn->physfn);
        if (pf_group && busy(*pf_group) && !(finishing && *finishing == *fn->physfn))
            continue;
        if (auto g = s_.host.group_of(vf))
            enqueue(*g, std::make_shared<VfProbeOp>(vf));
    }
}

void Service::for_pfs(const std::set<PciAddress>& pfs,
                      const std::function<OperationPtr(const PciAddress&)>& make) {
    for (const auto& pf : pfs) {
        if (auto g = s_.host.group_of(pf))
            enqueue(*g, make(pf));
        else if (s_.host.pf_plan(pf))
            s_.store.set_pf_status(pf, {PfState::Refused, Reason::NoIommu,
                                           "the PF is in no IOMMU group: vfiod changes VF "
                                           "counts only on a host with IOMMU groups", {}});
    }
}

void Service::decide_pfs(const std::set<PciAddress>& pfs) {
    for_pfs(pfs, [](const PciAddress& pf) { return std::make_shared<PfChangeOp>(pf); });
}

void Service::retry_pfs() {
    std::set<PciAddress> waiting = s_.host.governed_pfs();
    std::erase_if(waiting, [&](const PciAddress& a) {
        const auto* st = s_.store.pf_status(a);
        return st && st->state == PfState::Ready;
    });
    decide_pfs(waiting);
    // The same triggers retry the mdev pairs (DESIGN §12), only those refused or failed last:
    // nothing is read here, so a release costs no more with more mdevs.
    for (const MdevPair& key : std::set<MdevPair>(mdev_unsettled_))
        queue_mdev(key);
}

std::vector<MdevPlan> Service::read_mdevs(const std::set<std::string>* parents,
                                          bool keep_unsettled) {
    const Config& config = s_.host.config();
    if (config.mdevs.empty()) {  // a Reload may have dropped the last entry: no mdev published
        s_.store.set_mdevs([](const MdevInfo&) { return true; }, {});
        return {};
    }
    refresh_fences();
    // An event reads the parents it names alone, never the mdev bus.
    const HostFs& view = s_.host.view();
    MdevHost host = parents ? read_mdev_parents(view, *parents, nullptr)
                            : read_mdev_host(view, nullptr);
    auto plan = plan_mdevs(host, s_.host.snapshot().topology, {}, config)
                    .value_or(std::vector<MdevPlan>{});
    if (parents)  // the plan of the others, absent from this read, is not this call's
        std::erase_if(plan, [&](const MdevPlan& p) { return !parents->count(p.parent); });
    // A parent being written reads as half there (its types fenced): its records wait for
    // the operation that writes it. keep_unsettled: a pair whose last operation failed keeps
    // the records it left (failed, refused) until a trigger plans it again.
    const std::set<std::string> fenced = fenced_mdev_names();
    auto kept = [&](const std::string& parent, const std::string& type, bool foreign) {
        return fenced.count(parent) ||
               (keep_unsettled && !foreign && mdev_unsettled_.count({parent, type}));
    };
    std::vector<MdevPlan> shown;
    for (const MdevPlan& p : plan)
        if (!kept(p.parent, p.type, p.action == MdevAction::Foreign))
            shown.push_back(p);
    s_.store.set_mdevs(
        [&](const MdevInfo& m) {
            return !kept(m.parent, m.type, m.state == MdevState::Foreign) &&
                   (!parents || parents->count(m.parent));
        },
        mdev_records(shown, host, s_.host.snapshot().topology, view));
    return plan;
}

void Service::decide_mdevs(const std::set<std::string>* parents) {
    std::set<MdevPair> pairs;  // this call's: a pair queued here may have run already
    for (const MdevPlan& p : read_mdevs(parents, false))
        if (p.action != MdevAction::Foreign && pairs.insert({p.parent, p.type}).second)
            queue_mdev({p.parent, p.type});
}

void Service::settle_mdev_journal() {
    std::vector<std::string> errors;
    auto entries = s_.journal.load_all_mdevs(&errors);
    for (const auto& err : errors)
        spdlog::error("unreadable journal entry left alone: {}", err);
    OwnMdevUuids& own = OwnMdevUuids::shared();
    for (const MdevJournalEntry& e : entries) {
        const char* what = e.create ? "create" : "remove";
        if (own.index_of(e.parent, e.type, e.uuid))
            spdlog::warn("mdev {} ({} on {}): its {} was interrupted ({}); the plan settles it",
                         e.uuid, e.type, e.parent, what, to_string(e.phase));
        else
            spdlog::warn("journal {}: a {} of mdev {}, which is not vfiod's own {} on {}: "
                         "nothing written", s_.journal.mdev_entry_path(e.uuid), what, e.uuid,
                         e.type, e.parent);
        if (int err = s_.journal.remove_mdev(e.uuid))
            spdlog::error("journal {}: {}", s_.journal.mdev_entry_path(e.uuid),
                          std::strerror(err));
    }
}

void Service::queue_mdev(const MdevPair& key) {
    if (!mdev_waiting_.insert(key).second)
        return;  // waiting already (another index of the pair, or an earlier trigger)
    auto op = std::make_shared<MdevOp>(key.first, key.second, mode());
    queue_->enqueue(kMdevQueue, {[this, op, key] {
                                     mdev_waiting_.erase(key);
                                     return noting_mdev(key, start(op, kMdevQueue));
                                 },
                                 {}});
}

GroupQueue::Started Service::noting_mdev(const MdevPair& key, GroupQueue::Started st) {
    auto note = [this, key](const OpResult& r) {
        if (r.ok())
            mdev_unsettled_.erase(key);
        else
            mdev_unsettled_.insert(key);
    };
    if (st.done) {
        note(*st.done);
        return st;
    }
    st.complete = [note, complete = std::move(st.complete)] {
        OpResult r = complete();
        note(r);
        return r;
    };
    return st;
}

std::set<std::string> Service::fenced_mdev_names() {
    std::set<std::string> names = s_.mdev_writer.stuck_names();
    names.insert(mdev_writing_.begin(), mdev_writing_.end());
    return names;
}

void Service::refresh_fences() {
    s_.host.refresh_fences(s_.executor.stuck());
    s_.host.fence_mdevs(fenced_mdev_names());
}

void Service::decide(const std::set<unsigned>& groups, bool from_events) {
    // Each group is an operation of its own: decided now, its writes (if any) on a worker.
    for (unsigned g : groups)
        enqueue(g, std::make_shared<DecideOp>(g, from_events));
}

void Service::decide(unsigned group) { enqueue(group, std::make_shared<DecideOp>(group, false)); }

void Service::deciding(unsigned group) { deciding_.insert(group); }

// What a crash or a blocked write left unfinished: each group's entry is finished or rolled back
// by an operation in that group's queue, before its decision, off the loop. A previous run's
// write may still be blocked in the kernel (its process cannot exit until it returns): then
// reading those functions would block too, so the loop does not read them until it is done.
std::map<unsigned, std::vector<PciAddress>> Service::reconcile() {
    std::vector<std::string> errors;
    auto interrupted = s_.executor.unfinished(&errors);
    for (const auto& err : errors)
        spdlog::error("unreadable journal entry left alone: {}", err);
    for (const auto& [g, fns] : interrupted)
        s_.host.fence_group(g, {fns.begin(), fns.end()});
    refresh_fences();
    return interrupted;
}

OpResult Service::apply_reload() {
    refresh_fences();
    ConfigResult r = load_config(s_.fs, options_.config_file);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("reload rejected: {}", e);
        spdlog::warn("reload rejected; the previous configuration stays in effect");
        return OpResult::error(OpResult::Code::Failed,
                               "configuration rejected, previous one kept: " + join(r.errors, "; "));
    }
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    Config before = s_.host.replace_config(std::move(*r.config));
    const Config& config = s_.host.config();
    // The running executor, not a new one: operations started before may still be writing
    // through it, and it knows which functions have a write stuck in the kernel.
    s_.executor.set_write_timeout(std::chrono::seconds(config.write_timeout));
    s_.mdev_writer.set_timeout(std::chrono::seconds(config.write_timeout));
    for (unsigned g : s_.host.groups_whose_entries_changed(before)) {
        if (s_.executor.released(g)) {
            spdlog::info("group {}: the entries matching it changed; no longer held released", g);
            s_.executor.clear_released(g);
        }
    }
    s_.decider.forget_reassertions();
    std::set<unsigned> groups;
    for (const auto& [g, st] : s_.store.statuses())
        groups.insert(g);
    s_.host.reread();
    for (const auto& [g, gp] : s_.host.plans())
        groups.insert(g);
    spdlog::info("configuration reloaded: {} device entries, {} protect entries, mode {}",
                 config.devices.size(), config.protects.size(), to_string(mode()));
    decide(groups, false);
    decide_pfs(s_.host.governed_pfs());
    decide_mdevs(nullptr);
    check_all_health(HealthCheck::Reload);
    return {};
}

// ---- operations: one at a time per group, off the loop (GroupQueue) ----

OpResult Service::bind(std::string_view address) {
    BindOp op{std::string(address)};
    return run_now(op, s_);
}

OpResult Service::release(std::string_view address) {
    ReleaseOp op{std::string(address)};
    return run_now(op, s_);
}

void Service::submit(std::shared_ptr<OperatorOp> op, Reply reply) {
    if (!queue_->threaded())
        return s_.store.answer(std::move(reply), run_now(*op, s_));
    if (queue_->reload_waiting()) {
        // Sent on its way once the reload has run, guarded like the D-Bus call it came from: a
        // throw answers it Failed.
        return queue_->hold(std::move(reply), [this, op](Reply later) {
            OpResult res = guarded("a request held for a reload", [&] {
                submit(op, later);
                return OpResult{};
            });
            if (!res.ok())
                s_.store.answer(std::move(later), res);
        });
    }
    auto addr = PciAddress::parse(op->address());
    std::optional<unsigned> g = addr ? s_.host.group_of(*addr) : std::nullopt;
    if (addr && !g) {
        refresh_fences();
        s_.host.refresh({*addr});  // a function that appeared since the last event
        g = s_.host.group_of(*addr);
    }
    if (!g) {
        // No group: answered from the plan (InvalidArgs, NotFound, NotAllowlisted, no-iommu),
        // without a write.
        return s_.store.answer(std::move(reply), run_now(*op, s_));
    }
    queue_->submit(*g, queued(std::move(op), *g, std::move(reply)));
}

void Service::bind_async(std::string address, Reply reply) {
    submit(std::make_shared<BindOp>(std::move(address)), std::move(reply));
}

void Service::release_async(std::string address, Reply reply) {
    submit(std::make_shared<ReleaseOp>(std::move(address)), std::move(reply));
}

void Service::reload_async(Reply reply) { queue_->reload(std::move(reply)); }

void Service::enqueue(unsigned g, OperationPtr op) {
    queue_->enqueue(g, queued(std::move(op), g, {}));
}

GroupQueue::Op Service::queued(OperationPtr op, unsigned g, Reply reply) {
    return {[this, op = std::move(op), g] { return start(op, g); }, std::move(reply)};
}

GroupQueue::Started Service::start(const OperationPtr& op, unsigned g) {
    refresh_fences();
    std::optional<OpResult> done;
    OpResult failed = guarded(op->what(), [&] {
        done = op->prepare(s_);
        return OpResult{};
    });
    if (!failed.ok())
        done = failed;
    if (done)
        return {done, {}, {}};
    // From here until the outcome, the loop reads nothing of these functions (or mdevs).
    s_.host.fence_group(g, op->fenced());
    if (auto names = op->fenced_mdevs(); !names.empty())
        mdev_writing_ = std::move(names);
    refresh_fences();
    return {std::nullopt, [this, op] { op->run(s_); }, [this, op, g] { return finish(*op, g); }};
}

OpResult Service::finish(Operation& op, unsigned g) {
    s_.host.unfence_group(g);
    if (g == kMdevQueue)
        mdev_writing_.clear();
    refresh_fences();  // a function (or mdev) whose write is stuck stays fenced
    return guarded(op.what(), [&] { return op.complete(s_); });
}

void Service::group_idle(unsigned g) {
    auto ev = deferred_events_.find(g);
    if (ev == deferred_events_.end())
        return;
    std::set<PciAddress> touched = std::move(ev->second);
    deferred_events_.erase(ev);
    handle_events(touched);
}

}  // namespace vfiod
