#include "service/service.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "core/pci_paths.hpp"
#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "infra/workers.hpp"
#include "io/claims.hpp"
#include "io/config_loader.hpp"
#include "service/decider.hpp"
#include "service/host_model.hpp"
#include "service/pf_decider.hpp"
#include "service/status_store.hpp"

namespace vfiod {

namespace {

GroupStatus from_outcome(const GroupOutcome& o) {
    GroupState state = published_state(o.state);
    // A success publishes no reason and no message: those describe what stands in the way.
    if (state == GroupState::Bound || state == GroupState::Released)
        return {state, Reason::None, "", {}};
    return {state, o.reason, o.message, o.blockers};
}

}  // namespace

Service::Service(HostFs& fs, ServiceOptions options)
    : fs_(fs),
      options_(std::move(options)),
      journal_(std::make_unique<Journal>(fs_)),
      executor_(std::make_unique<Executor>(fs_, journal_.get())),
      host_(std::make_unique<HostModel>(fs_)),
      store_(std::make_unique<StatusStore>(*host_, *journal_, [this] { return mode(); })),
      decider_(std::make_unique<Decider>(*host_, *store_, *executor_, *journal_,
                                         [this] { return mode(); })),
      pf_decider_(std::make_unique<PfDecider>(*host_, *store_, [this] { return mode(); })),
      queue_(std::make_unique<GroupQueue>(GroupQueue::Hooks{
          .answer = [this](Reply reply, OpResult r) {
              store_->answer(std::move(reply), std::move(r));
          },
          .reload = [this] { return reload(); },
          .group_idle = [this](unsigned g) { group_idle(g); },
      })) {
    host_->set_on_replan([this](std::optional<unsigned> g) { store_->mark(g); });
    if (fs.live()) {
        std::vector<std::string> notes;
        set_table_watch(watch_kernel_tables(&notes));
        for (const auto& n : notes)
            spdlog::info("{}", n);
    }
}

Service::~Service() = default;

Mode Service::mode() const { return options_.force_observe ? Mode::Observe : host_->config().mode; }

void Service::set_workers(Workers* workers) { queue_->set_workers(workers); }
void Service::set_table_watch(std::unique_ptr<TableWatch> watch) {
    host_->set_table_watch(std::move(watch));
}
const HostTables& Service::tables() const { return host_->tables(); }
const Inventory& Service::inventory() const { return store_->inventory(); }
void Service::set_on_change(OnChange cb) { store_->set_on_change(std::move(cb)); }
bool Service::busy(unsigned group) const { return queue_->busy(group); }
void Service::when_idle(std::function<void()> cb) { queue_->when_idle(std::move(cb)); }
void Service::publish() { store_->publish(); }

std::string Service::plan_json() const { return plan_to_json(host_->whole_plan()); }

bool Service::start() {
    ConfigResult r = load_config(fs_, options_.config_file);
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("{}", e);
        return false;
    }
    host_->replace_config(std::move(*r.config));
    const Config& config = host_->config();
    executor_->set_write_timeout(std::chrono::seconds(config.write_timeout));
    if (config.files.empty())
        spdlog::info("no configuration file: the allowlist is empty, nothing to do");
    else
        spdlog::info("configuration {}: {} device entries, {} protect entries, mode {}",
                     join(config.files), config.devices.size(), config.protects.size(),
                     to_string(mode()));
    std::map<unsigned, std::vector<PciAddress>> interrupted;
    if (mode() == Mode::Enforce)
        interrupted = reconcile();
    host_->reread();
    std::set<unsigned> all;
    for (const auto& [g, gp] : host_->plans())
        all.insert(g);
    for (auto& [g, fns] : interrupted) {
        host_->unfence_group(g);  // the operation fences them from here
        all.insert(g);            // decided once it is done, whatever the fenced read made of it
        enqueue(g, {Request::Kind::Reconcile, "", {}, false});
    }
    decide(all, false);
    if (mode() == Mode::Enforce) {
        std::vector<std::string> errors;
        auto unfinished = executor_->unfinished_pfs(&errors);
        for (const auto& err : errors)
            spdlog::error("unreadable journal entry left alone: {}", err);
        decide_pfs({unfinished.begin(), unfinished.end()}, Request::Kind::PfReconcile);
    }
    decide_pfs(host_->governed_pfs());
    if (!host_->snapshot().topology.iommu_enabled) {
        Plan plan = host_->whole_plan();
        if (!plan.groups.empty())
            spdlog::warn("the IOMMU is disabled: {} allowlisted function(s) cannot be passed "
                         "through", plan.groups.size());
    }
    store_->publish_changes();
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
            if (host_->group_plan(g))  // not one the entry found gone
                store_->set_status(
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
        if (auto g = host_->group_of(a))
            events_of[*g].insert(a);
    std::set<PciAddress> pfs_before = host_->pfs_concerned(touched);
    for (unsigned g : host_->refresh(touched))
        events_of[g];
    for (const auto& a : touched)
        if (auto g = host_->group_of(a))
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
            deferred_events_[g].merge(host_->members({g}));
    }
    decide(groups, true);
    pf_events(touched, std::move(pfs_before));
}

void Service::pf_events(const std::set<PciAddress>& touched, std::set<PciAddress> before) {
    std::set<PciAddress> pfs = host_->pfs_concerned(touched);
    pfs.merge(before);
    decide_pfs(pfs);
    probe_left(touched);
}

void Service::probe_left(const std::set<PciAddress>& vfs, const PciAddress* finishing) {
    if (mode() != Mode::Enforce)
        return;
    for (const auto& vf : pf_decider_->to_probe(vfs)) {
        // While its PF's change runs, autoprobe may still be 0 and the kernel would attach
        // nothing: the change's end probes the VFs then.
        const PciFunction* fn = host_->snapshot().topology.find(vf);
        auto pf_group = host_->group_of(*fn->physfn);
        if (pf_group && busy(*pf_group) && !(finishing && *finishing == *fn->physfn))
            continue;
        if (auto g = host_->group_of(vf))
            enqueue(*g, {Request::Kind::Probe, vf.str(), {}, true});
    }
}

void Service::decide_pfs(const std::set<PciAddress>& pfs, Request::Kind kind) {
    for (const auto& pf : pfs) {
        if (auto g = host_->group_of(pf))
            enqueue(*g, {kind, pf.str(), {}, false});
        else if (host_->pf_plan(pf))
            store_->set_pf_status(pf, {PfState::Refused, Reason::NoIommu,
                                           "the PF is in no IOMMU group: vfiod changes VF "
                                           "counts only on a host with IOMMU groups", {}});
    }
}

void Service::retry_pfs() {
    std::set<PciAddress> waiting = host_->governed_pfs();
    std::erase_if(waiting, [&](const PciAddress& a) {
        const auto* st = store_->pf_status(a);
        return st && st->state == PfState::Ready;
    });
    decide_pfs(waiting);
}

void Service::refresh_fences() { host_->refresh_fences(executor_->stuck()); }

void Service::decide(const std::set<unsigned>& groups, bool from_events) {
    // Each group is an operation of its own: decided now, its writes (if any) on a worker.
    for (unsigned g : groups)
        enqueue(g, {Request::Kind::Decide, "", {}, from_events});
}

// What a crash or a blocked write left unfinished: each group's entry is finished or rolled back
// by an operation in that group's queue, before its decision, off the loop. A previous run's
// write may still be blocked in the kernel (its process cannot exit until it returns): then
// reading those functions would block too, so the loop does not read them until it is done.
std::map<unsigned, std::vector<PciAddress>> Service::reconcile() {
    std::vector<std::string> errors;
    auto interrupted = executor_->unfinished(&errors);
    for (const auto& err : errors)
        spdlog::error("unreadable journal entry left alone: {}", err);
    for (const auto& [g, fns] : interrupted)
        host_->fence_group(g, {fns.begin(), fns.end()});
    refresh_fences();
    return interrupted;
}

void Service::log_interrupted(const GroupOutcome& o) {
    std::string g = o.group ? std::to_string(*o.group) : "?";
    if (published_state(o.state) == GroupState::Failed)
        spdlog::error("group {}: unfinished operation from the last run: {} {}: {}", g,
                      to_string(o.state), to_string(o.reason), o.message);
    else
        spdlog::warn("group {}: unfinished operation from the last run: {}{}{}", g,
                     to_string(o.state), o.message.empty() ? "" : ": ", o.message);
}

OpResult Service::apply_reload() {
    refresh_fences();
    ConfigResult r = load_config(fs_, options_.config_file);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("reload rejected: {}", e);
        spdlog::warn("reload rejected; the previous configuration stays in effect");
        return OpResult::error(OpResult::Code::Failed,
                               "configuration rejected, previous one kept: " + join(r.errors, "; "));
    }
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    Config before = host_->replace_config(std::move(*r.config));
    const Config& config = host_->config();
    // The running executor, not a new one: operations started before may still be writing
    // through it, and it knows which functions have a write stuck in the kernel.
    executor_->set_write_timeout(std::chrono::seconds(config.write_timeout));
    for (unsigned g : host_->groups_whose_entries_changed(before)) {
        if (executor_->released(g)) {
            spdlog::info("group {}: the entries matching it changed; no longer held released", g);
            executor_->clear_released(g);
        }
    }
    decider_->forget_reassertions();
    std::set<unsigned> groups;
    for (const auto& [g, st] : store_->statuses())
        groups.insert(g);
    host_->reread();
    for (const auto& [g, gp] : host_->plans())
        groups.insert(g);
    spdlog::info("configuration reloaded: {} device entries, {} protect entries, mode {}",
                 config.devices.size(), config.protects.size(), to_string(mode()));
    decide(groups, false);
    decide_pfs(host_->governed_pfs());
    return {};
}

// ---- the bridge to the executor ----

Prepared Service::prepare_bind(std::string_view address) {
    Prepared p = decider_->bind(address);
    if (p.redecide)
        enqueue(*p.redecide, {Request::Kind::Decide, "", {}, false});
    return p;
}

Prepared Service::prepare(const Request& r, unsigned g) {
    switch (r.kind) {
    case Request::Kind::Bind: return prepare_bind(r.address);
    case Request::Kind::Release: return decider_->release(r.address);
    case Request::Kind::Reconcile: break;
    case Request::Kind::Decide:
        deciding_.insert(g);
        return decider_->decide(g, r.from_events);
    case Request::Kind::Pf:
    case Request::Kind::PfReconcile:
    case Request::Kind::Probe: {
        // Addresses the daemon wrote itself, from its own snapshot.
        PciAddress a = *PciAddress::parse(r.address);
        if (r.kind == Request::Kind::Pf)
            return pf_decider_->decide(a, g);
        if (r.kind == Request::Kind::PfReconcile)
            return pf_decider_->settle_entry(a, g);
        Prepared p;
        p.group = g;
        p.probe = a;
        p.functions = {a};
        return p;
    }
    }
    Prepared p;
    p.group = g;
    p.reconciling = true;
    if (auto entry = journal_->load(g))
        for (const auto& f : entry->functions)
            p.functions.push_back(f.address);
    return p;
}

Written Service::run_pf_writes(const Prepared& p) {
    Written w;
    if (p.pf) {
        w.pf = executor_->apply_pf(*p.pf);
    } else if (p.pf_reconcile) {
        auto o = executor_->reconcile_pf(*p.pf_reconcile, p.pf_wanted, host_->config());
        w.pf = o ? *o : PfOutcome{PfState::Ready, Reason::None, "", {}};
    } else if (int err = executor_->write(*p.probe, pci_paths::kDriversProbe, p.probe->str())) {
        w.pf = {PfState::Failed, Reason::WriteFailed,
                std::string(pci_paths::kDriversProbe) + ": " + std::strerror(err), {*p.probe}};
    } else {
        w.pf = {PfState::Ready, Reason::None, "", {}};
    }
    return w;
}

Written Service::run_writes(const Prepared& p) {
    if (p.pf || p.pf_reconcile || p.probe)
        return run_pf_writes(p);
    if (p.reconciling) {
        // The config is stable here: a Reload waits for the operations in flight (DESIGN §6).
        auto o = executor_->reconcile(p.group, host_->config());
        return {o ? *o : GroupOutcome{{Outcome::RolledBack, Reason::None, "", {}}, p.group}, {}};
    }
    for (const auto& [fn, writes] : p.cleanup) {
        for (const auto& w : writes)
            if (int err = executor_->write(fn, w.path(), w.value)) {
                spdlog::error("group {}: writing {}: {}", p.group, w.path(), std::strerror(err));
                break;
            }
    }
    if (!p.cleanup.empty())
        return {};  // `after` says what to publish
    if (p.releasing)
        return {executor_->release(p.plan), {}};
    // Exclusive claims are probed here, off the loop and just before the first write, since the
    // probe is itself a claim for an instant (DESIGN §4). A claimed disk makes the plan a
    // refusal, which the executor reports without writing.
    GroupPlan checked = p.plan;
    refuse_if_claimed(fs_, &checked);
    return {executor_->apply(checked, p.trigger), {}};
}

OpResult Service::complete_pf(const Prepared& p, const Written& w) {
    if (p.pf || p.pf_reconcile) {
        // One read of the PF and its VFs: the count the change reached, and the VFs whose add
        // events came while it ran (or, after a crash, were never heard), probed now.
        const PciAddress& pf = p.pf ? p.pf->address : *p.pf_reconcile;
        std::set<PciAddress> fns = host_->vfs_of(pf);
        fns.insert(pf);
        host_->refresh(fns);
        if (p.pf)
            pf_decider_->finish(pf, w.pf);
        else if (!w.pf.message.empty())
            spdlog::warn("PF {}: unfinished VF count change from the last run: {}", pf.str(),
                         w.pf.message);
        probe_left(host_->vfs_of(pf), &pf);
    } else {
        host_->refresh({*p.probe});
        const PciFunction* vf = host_->snapshot().topology.find(*p.probe);
        if (w.pf.state != PfState::Ready)
            spdlog::warn("{}: probing its host driver: {}", p.probe->str(), w.pf.message);
        else if (vf && !vf->driver.empty())
            spdlog::info("{}: a VF no entry allowlists, sent to its host driver {}",
                         p.probe->str(), vf->driver);
        else
            spdlog::info("{}: a VF no entry allowlists, probed; no host driver took it",
                         p.probe->str());
    }
    return {};
}

OpResult Service::complete(const Prepared& p, const Written& w) {
    if (p.pf || p.pf_reconcile || p.probe)
        return complete_pf(p, w);
    const GroupOutcome& o = w.group;
    if (p.reconciling) {
        if (!o.message.empty())  // empty: the entry was finished already
            log_interrupted(o);
        host_->reread();
        return {};
    }
    GroupStatus st = p.after ? *p.after : from_outcome(o);
    // First, so the state-change line names the drivers the functions went to.
    std::set<PciAddress> written = host_->members({p.group});
    for (const auto& d : p.plan.devices)
        written.insert(d.address);
    host_->refresh(std::move(written));
    store_->set_status(p.group, st);
    if (p.releasing || p.trigger == Trigger::Operator)
        retry_pfs();
    GroupState want = p.releasing ? GroupState::Released : GroupState::Bound;
    if (st.state == want)
        return {};
    if (st.state == GroupState::Refused) {  // a claim found on the worker, said as refusal() does
        GroupPlan refused;
        refused.group = p.group;
        refused.reason = st.reason;
        refused.blockers = st.blockers;
        if (!st.message.empty())
            refused.details.push_back(st.message);
        return Decider::refusal(refused);
    }
    return OpResult::error(OpResult::Code::Failed,
                           std::string(to_string(st.reason)) + ": " + st.message);
}

OpResult Service::bind(std::string_view address) {
    Prepared p = prepare_bind(address);
    return p.done ? *p.done : complete(p, run_writes(p));
}

OpResult Service::release(std::string_view address) {
    Prepared p = decider_->release(address);
    return p.done ? *p.done : complete(p, run_writes(p));
}

// ---- operations: one at a time per group, off the loop (GroupQueue) ----

void Service::bind_async(std::string address, Reply reply) {
    submit({Request::Kind::Bind, std::move(address), std::move(reply)});
}

void Service::release_async(std::string address, Reply reply) {
    submit({Request::Kind::Release, std::move(address), std::move(reply)});
}

void Service::reload_async(Reply reply) { queue_->reload(std::move(reply)); }

void Service::submit(Request r) {
    bool release = r.kind == Request::Kind::Release;
    if (!queue_->threaded())
        return store_->answer(std::move(r.reply),
                                  release ? this->release(r.address) : bind(r.address));
    if (queue_->reload_waiting()) {
        Reply reply = std::move(r.reply);
        return queue_->hold(std::move(reply), [this, r = std::move(r)](Reply later) mutable {
            resubmit(std::move(r), std::move(later));
        });
    }
    auto addr = PciAddress::parse(r.address);
    std::optional<unsigned> g = addr ? host_->group_of(*addr) : std::nullopt;
    if (addr && !g) {
        refresh_fences();
        host_->refresh({*addr});  // a function that appeared since the last event
        g = host_->group_of(*addr);
    }
    if (!g) {
        // No group: answered from the plan (InvalidArgs, NotFound, NotAllowlisted, no-iommu),
        // without a write.
        return store_->answer(std::move(r.reply),
                                  release ? this->release(r.address) : bind(r.address));
    }
    queue_->submit(*g, operation(std::move(r), *g));
}

void Service::resubmit(Request r, Reply reply) {
    // Guarded like the D-Bus call it came from: a throw answers this request Failed.
    r.reply = reply;
    OpResult res = guarded("a request held for a reload", [&] {
        submit(std::move(r));
        return OpResult{};
    });
    if (!res.ok())
        store_->answer(std::move(reply), res);
}

void Service::enqueue(unsigned g, Request r) { queue_->enqueue(g, operation(std::move(r), g)); }

GroupQueue::Op Service::operation(Request r, unsigned g) {
    Reply reply = std::move(r.reply);
    return {[this, r = std::move(r), g] { return start_operation(r, g); }, std::move(reply)};
}

GroupQueue::Started Service::start_operation(const Request& r, unsigned g) {
    refresh_fences();
    const char* what = r.kind == Request::Kind::Bind        ? "Bind"
                       : r.kind == Request::Kind::Release   ? "Release"
                       : r.kind == Request::Kind::Reconcile ? "finishing the last run's operation"
                       : r.kind == Request::Kind::Decide    ? "deciding a group"
                                                             : "an SR-IOV operation";
    Prepared p;
    OpResult failed = guarded(what, [&] {
        p = prepare(r, g);
        return OpResult{};
    });
    if (!failed.ok())
        p.done = failed;
    if (p.done)
        return {p.done, {}, {}};
    // From here until the outcome, the loop reads nothing of these functions.
    std::set<PciAddress> fenced(p.functions.begin(), p.functions.end());
    for (const auto& d : p.plan.devices)
        fenced.insert(d.address);
    host_->fence_group(g, fenced);
    refresh_fences();
    auto prepared = std::make_shared<Prepared>(std::move(p));
    auto outcome = std::make_shared<Written>();
    return {std::nullopt, [this, prepared, outcome] { *outcome = run_writes(*prepared); },
            [this, g, prepared, outcome] { return finish(g, *prepared, *outcome); }};
}

OpResult Service::finish(unsigned g, const Prepared& p, const Written& o) {
    host_->unfence_group(g);
    refresh_fences();  // a function whose write is stuck stays fenced
    const char* what = p.releasing                      ? "Release"
                       : p.reconciling                  ? "finishing the last run's operation"
                       : p.trigger == Trigger::Operator ? "Bind"
                                                        : "deciding a group";
    return guarded(what, [&] { return complete(p, o); });
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
