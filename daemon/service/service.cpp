#include "service/service.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "io/claims.hpp"
#include "io/config_loader.hpp"
#include "io/host_use.hpp"
#include "io/topology_reader.hpp"
#include "service/fenced_host_fs.hpp"
#include "infra/workers.hpp"

namespace vfiod {

namespace {

std::string addresses(const std::vector<PciAddress>& list) {
    std::vector<std::string> s;
    for (const auto& a : list)
        s.push_back(a.str());
    return join(s);
}

// "0000:01:00.0 e1000e→vfio-pci, 0000:01:00.1 snd_hda_intel→vfio-pci": what a log reader needs
// to know which functions moved where. `moves` false names only the current drivers.
std::string describe_devices(const GroupPlan& gp, bool moves = true) {
    std::vector<std::string> s;
    for (const auto& d : gp.devices) {
        std::string from = d.driver.empty() ? "(none)" : printable(d.driver);
        if (!moves || !d.target || *d.target == d.driver)
            s.push_back(d.address.str() + " " + from);
        else
            s.push_back(d.address.str() + " " + from + "→" + *d.target);
    }
    return join(s);
}

// What decides a function's fate in a config: its first matching [[device]] entry and whether a
// [[protect]] entry matches. Origins are left out: moving an entry to another line changes
// nothing about the group.
std::string entry_signature(const Config& c, const PciFunction& fn) {
    std::string sig = protected_by(c, fn) ? "protected;" : "";
    if (const DeviceEntry* e = governing_entry(c, fn))
        sig += (e->selector ? e->selector->str() : "") + "|" +
               (e->address ? e->address->str() : "") + "|" + e->driver + "|" + e->resource_name +
               "|" + (e->early ? "early" : "");
    return sig;
}

Service::Status from_outcome(const GroupOutcome& o) {
    GroupState state = published_state(o.state);
    // A success publishes no reason and no message: those describe what stands in the way.
    if (state == GroupState::Bound || state == GroupState::Released)
        return {state, Reason::None, "", {}};
    return {state, o.reason, o.message, o.blockers};
}

}  // namespace

Service::Service(HostFs& fs, ServiceOptions options)
    : fs_(fs),
      view_(std::make_unique<FencedHostFs>(fs)),
      options_(std::move(options)),
      journal_(std::make_unique<Journal>(fs_)),
      executor_(std::make_unique<Executor>(fs_, journal_.get())) {
    if (fs.live()) {
        std::vector<std::string> notes;
        set_table_watch(watch_kernel_tables(&notes));
        for (const auto& n : notes)
            spdlog::info("{}", n);
    }
}

Service::~Service() = default;

Mode Service::mode() const { return options_.force_observe ? Mode::Observe : config_.mode; }

bool Service::start() {
    ConfigResult r = load_config(fs_.root(), options_.config_file);
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("{}", e);
        return false;
    }
    config_ = std::move(*r.config);
    executor_->set_write_timeout(std::chrono::seconds(config_.write_timeout));
    if (config_.files.empty())
        spdlog::info("no configuration file: the allowlist is empty, nothing to do");
    else
        spdlog::info("configuration {}: {} device entries, {} protect entries, mode {}",
                     join(config_.files), config_.devices.size(), config_.protects.size(),
                     to_string(mode()));
    if (mode() == Mode::Enforce)
        reconcile();
    reread();
    std::set<unsigned> all;
    for (const auto& [g, gp] : plans_)
        all.insert(g);
    std::map<unsigned, std::vector<PciAddress>> interrupted;
    interrupted.swap(interrupted_);
    for (auto& [g, fns] : interrupted) {
        running_.erase(g);  // the operation fences them from here
        all.insert(g);      // decided once it is done, whatever the fenced read made of it
        Request finish_first;
        finish_first.kind = Request::Kind::Reconcile;
        enqueue(g, std::move(finish_first));
    }
    decide(all, false);
    if (!snapshot_.topology.iommu_enabled) {
        Plan plan = make_plan(snapshot_.topology, snapshot_.use, config_);
        if (!plan.groups.empty())
            spdlog::warn("the IOMMU is disabled: {} allowlisted function(s) cannot be passed "
                         "through", plan.groups.size());
    }
    publish_changes();
    return true;
}

void Service::reread() {
    snapshot_ = read_snapshot(*view_);
    log_host_warnings(snapshot_.warnings, true);
    claimants_.clear();
    for (const auto& [a, fn] : snapshot_.topology.functions)
        if (fn.iommu_group)
            claimants_[*fn.iommu_group].insert(a);
    plans_.clear();
    for (auto& gp : make_plan(snapshot_.topology, snapshot_.use, config_).groups)
        if (gp.group)
            plans_.emplace(*gp.group, std::move(gp));
    publish_all_ = true;
}

void Service::log_host_warnings(const std::vector<std::string>& warnings, bool whole_host) {
    // The readers bound their own output (BoundedWarnings), so a whole-host read brings a few
    // dozen at most; a burst's partial read only adds to what is known.
    std::set<std::string> seen(warnings.begin(), warnings.end());
    for (const auto& w : warnings)
        if (!host_warned_.count(w))
            spdlog::warn("{}", w);
    if (whole_host)
        host_warned_ = std::move(seen);
    else if (host_warned_.size() < 1024)
        host_warned_.merge(seen);
}

// What changed with `touched`, and nothing else: those functions, their groups' members, the
// host-use facts about them, their groups' plans. Returns the groups re-planned. Equal to a full
// reread() as long as the kernel names every function whose state changes (the property test in
// tests/unit/test_incremental.cpp holds it to that).
std::set<unsigned> Service::refresh(std::set<PciAddress> touched) {
    Topology& topo = snapshot_.topology;
    const bool iommu_before = topo.iommu_enabled;
    std::vector<std::string> warnings;
    std::set<unsigned> groups = refresh_topology(*view_, &topo, touched, &warnings);
    if (topo.iommu_enabled != iommu_before) {
        // Every decision hangs on it: read it all again.
        for (const auto& [g, gp] : plans_)
            groups.insert(g);
        reread();
        for (const auto& [g, gp] : plans_)
            groups.insert(g);
        return groups;
    }
    std::set<PciAddress> only = members(groups);
    only.merge(touched);
    for (unsigned g : groups) {
        auto& c = claimants_[g];
        c.insert(only.begin(), only.end());
        std::erase_if(c, [&](const PciAddress& a) {
            const PciFunction* fn = topo.find(a);
            return !fn || fn->iommu_group != g;
        });
        if (c.empty())
            claimants_.erase(g);
    }
    merge_host_use(&snapshot_.use, read_host_use(*view_, topo, &warnings, only, &tables_), only);
    log_host_warnings(warnings, false);
    static const std::set<PciAddress> kNone;
    for (unsigned g : groups) {
        auto c = claimants_.find(g);
        auto gp = plan_one_group(topo, snapshot_.use, config_, g,
                                 c == claimants_.end() ? kNone : c->second);
        if (gp)
            plans_.insert_or_assign(g, std::move(*gp));
        else
            plans_.erase(g);
        dirty_.insert(g);
    }
    return groups;
}

std::set<PciAddress> Service::members(const std::set<unsigned>& groups) const {
    std::set<PciAddress> out;
    for (unsigned g : groups)
        if (auto it = snapshot_.topology.groups.find(g); it != snapshot_.topology.groups.end())
            out.insert(it->second.begin(), it->second.end());
    return out;
}

const GroupPlan* Service::group_plan(unsigned group) const {
    auto it = plans_.find(group);
    return it == plans_.end() ? nullptr : &it->second;
}

std::optional<unsigned> Service::group_of(const PciAddress& a) const {
    const PciFunction* fn = snapshot_.topology.find(a);
    return fn ? fn->iommu_group : std::nullopt;
}

template <typename F>
OpResult Service::guarded(const char* what, F&& entry) {
    // Entries nest (a udev burst decides groups, each one an operation of its own): an inner
    // one that fails answers for the groups it decided; one that succeeds hands them to the
    // outer one. What they set is published once the dispatch ends (publish()).
    std::set<unsigned> outer = std::exchange(deciding_, {});
    try {
        OpResult r = entry();
        deciding_.merge(outer);
        return r;
    } catch (const std::exception& e) {
        std::string why = std::string(what) + ": " + e.what();
        spdlog::error("{}; the groups it was deciding are marked failed", why);
        for (unsigned g : deciding_)
            if (group_plan(g))  // not one the entry found gone
                set_status(g, {GroupState::Failed, Reason::None, "internal error: " + why, {}});
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
        if (auto g = group_of(a))
            events_of[*g].insert(a);
    for (unsigned g : refresh(touched))
        events_of[g];
    for (const auto& a : touched)
        if (auto g = group_of(a))
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
            deferred_events_[g].merge(members({g}));
    }
    decide(groups, true);
}

bool Service::busy(unsigned group) const { return queues_.count(group) != 0; }

void Service::refresh_fences() {
    std::set<PciAddress> keep;
    for (const auto& [g, fns] : running_)
        keep.insert(fns.begin(), fns.end());
    for (const auto& a : executor_->stuck())
        keep.insert(a);
    std::set<PciAddress> fenced = view_->fenced();
    for (const auto& a : fenced)
        if (!keep.count(a))
            view_->unfence(a);
    for (const auto& a : keep)
        view_->fence(a);
}

void Service::decide(const std::set<unsigned>& groups, bool from_events) {
    // Each group is an operation of its own: decided now, its writes (if any) on a worker.
    for (unsigned g : groups) {
        Request r;
        r.kind = Request::Kind::Decide;
        r.from_events = from_events;
        enqueue(g, std::move(r));
    }
}

// What the daemon does with a group on its own: a status to publish at once, or writes (a bind,
// or the early-override clean-up of a refused group) to run off the loop.
Service::Prepared Service::prepare_decide(unsigned id, bool from_events) {
    deciding_.insert(id);
    Prepared p;
    p.group = id;
    p.trigger = Trigger::Automatic;
    auto settle = [&](Status st) {
        set_status(id, std::move(st));
        p.done = OpResult{};
        return p;
    };
    const GroupPlan* found = group_plan(id);
    if (!found) {
        forget_group(id);
        p.done = OpResult{};
        return p;
    }
    const GroupPlan& gp = *found;
    if (executor_->released(id))  // what to publish; the executor would not bind it anyway
        return settle({GroupState::Released, Reason::None, "", {}});
    Status planned{planned_state(gp.action), gp.reason, join(gp.details, "; "), gp.blockers};
    if (gp.action == Action::Refuse && mode() == Mode::Enforce) {
        for (const PciFunction* fn : parked_early(gp)) {
            spdlog::warn("group {}: {} refused; clearing its early driver_override '{}' and "
                         "probing the host driver",
                         id, fn->address.str(), printable(fn->driver_override));
            p.cleanup.emplace_back(fn->address, release_writes(*fn));
        }
        if (!p.cleanup.empty()) {
            set_status(id, planned);
            p.plan = gp;
            p.after = planned;
            return p;
        }
    }
    if (gp.action != Action::Bind)
        return settle(planned);
    auto prev = status_.find(id);
    bool drifted = from_events && prev != status_.end() && prev->second.state == GroupState::Bound;
    if (drifted) {
        // Someone moved a function of a bound group back to a host driver. Re-assert once; a
        // second drift is a human (or a tool) meaning it, and fighting it would be a bind loop.
        spdlog::warn("group {}: drift: no longer bound ({})", id, describe_devices(gp));
        if (mode() == Mode::Enforce) {
            if (reasserted_.count(id))
                return settle({GroupState::Failed, Reason::Drift,
                               "drifted again after one re-assertion; use Bind to take it back",
                               {}});
            reasserted_.insert(id);
            spdlog::warn("group {}: re-asserting the binding once", id);
        }
    }
    if (mode() == Mode::Observe)
        return settle({planned_state(gp.action), Reason::None, "would bind " + describe_devices(gp), {}});
    // Consumers see `pending` while the writes run.
    set_status(id, {planned_state(gp.action), Reason::None, "binding " + describe_devices(gp), {}});
    p.plan = gp;
    return p;
}

// What a crash or a blocked write left unfinished: each group's entry is finished or rolled back
// by an operation in that group's queue, before its decision, off the loop. A previous run's
// write may still be blocked in the kernel (its process cannot exit until it returns): then
// reading those functions would block too, so the loop does not read them until it is done.
void Service::reconcile() {
    std::vector<std::string> errors;
    interrupted_ = executor_->unfinished(&errors);
    for (const auto& err : errors)
        spdlog::error("unreadable journal entry left alone: {}", err);
    for (const auto& [g, fns] : interrupted_)
        running_[g].insert(fns.begin(), fns.end());
    refresh_fences();
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

// The udev rule set driver_override on an `early` function before its group could be judged;
// once the group is refused, such a function goes back to the host rather than stay parked on an
// override nothing will ever complete. A group in the journal was moved by vfiod itself: that
// is Release's business, not this clean-up's.
std::vector<const PciFunction*> Service::parked_early(const GroupPlan& gp) const {
    std::vector<const PciFunction*> out;
    if (journal_->load(*gp.group))
        return out;
    const HostUse& use = snapshot_.use;  // the snapshot's one proc/*/fd scan found vfio's users
    for (const auto& d : gp.devices) {
        const PciFunction* fn = snapshot_.topology.find(d.address);
        if (!fn || !d.target || fn->driver_override.empty() || fn->is_bridge())
            continue;
        if (!fn->driver.empty() && fn->driver != fn->driver_override)
            continue;  // a host driver holds it despite the override: nothing is parked
        if (use.vfio.count(fn->address))
            continue;  // a user holds it: never pull a device from under a VM
        out.push_back(fn);
    }
    return out;
}

std::map<PciAddress, std::string> Service::originals(unsigned group) const {
    auto entry = journal_->load(group);
    return entry ? entry->originals() : std::map<PciAddress, std::string>{};
}

void Service::set_status(unsigned group, Status s) {
    dirty_.insert(group);
    auto it = status_.find(group);
    if (it != status_.end() && it->second == s)
        return;
    const GroupPlan* gp = group_plan(group);
    // A released group's plan would bind it again; what matters is where its functions are now.
    std::string devices = gp ? describe_devices(*gp, s.state != GroupState::Released) : "";
    switch (s.state) {
    case GroupState::Bound:
    case GroupState::Released:
        spdlog::info("group {}: {} ({})", group, to_string(s.state), devices);
        break;
    case GroupState::Pending:
        spdlog::info("group {}: pending: {}", group, s.message);
        break;
    case GroupState::Refused:
        spdlog::warn("group {}: refused {} (blockers {}): {}", group, to_string(s.reason),
                     addresses(s.blockers), s.message);
        break;
    case GroupState::Failed:
        spdlog::error("group {}: failed{}{}: {} ({})", group, s.reason == Reason::None ? "" : " ",
                      to_string(s.reason), s.message, devices);
        break;
    }
    status_[group] = std::move(s);
}

void Service::forget_group(unsigned group) {
    dirty_.insert(group);
    if (status_.erase(group))
        spdlog::info("group {}: gone (no allowlisted function left)", group);
    reasserted_.erase(group);
}

// The published view of one group (nullopt: not published): its object and its functions'.
std::optional<std::pair<GroupInfo, std::vector<DeviceInfo>>> Service::group_view(unsigned id) const {
    const GroupPlan* gp = group_plan(id);
    auto st = status_.find(id);
    if (!gp || st == status_.end())
        return std::nullopt;
    std::pair<GroupInfo, std::vector<DeviceInfo>> out;
    GroupInfo& gi = out.first;
    gi.id = id;
    gi.state = st->second.state;
    gi.reason = st->second.reason;
    gi.blockers = st->second.blockers;
    auto orig = originals(id);
    for (const auto& d : gp->devices) {
        gi.devices.push_back(d.address);
        DeviceInfo di;
        di.address = d.address;
        di.vendor = d.vendor;
        di.device = d.device;
        di.class_code = d.class_code;
        di.driver = d.driver;
        di.target = d.target.value_or("");
        auto o = orig.find(d.address);
        if (o != orig.end())
            di.original_driver = o->second;
        else if (!d.target || d.driver != *d.target)
            di.original_driver = d.driver;  // still on it: the host driver is the original
        di.group = id;
        if (const PciFunction* fn = snapshot_.topology.find(d.address))
            di.numa_node = fn->numa_node;
        di.resource_name = d.resource_name.value_or("");
        di.role = d.role;
        out.second.push_back(std::move(di));
    }
    return out;
}

void Service::publish() {
    try {
        publish_changes();
    } catch (const std::exception& e) {
        // What the consumers were told is unknown: the groups being published are marked
        // failed, and everything not acknowledged goes again.
        spdlog::error("publishing: {}; the groups it was publishing are marked failed", e.what());
        for (unsigned g : unsent_.groups)
            if (group_plan(g) && status_.count(g))
                set_status(g, {GroupState::Failed, Reason::None,
                               std::string("internal error: publishing: ") + e.what(), {}});
        try {
            publish_changes();
        } catch (const std::exception& again) {
            spdlog::error("publishing again: {}", again.what());
        }
    }
    std::vector<std::pair<Reply, OpResult>> replies;
    replies.swap(replies_);
    for (auto& [reply, r] : replies) {
        // One reply that cannot be sent (a caller gone, no memory) costs the others nothing.
        try {
            reply(r);
        } catch (const std::exception& e) {
            spdlog::error("answering a request: {}", e.what());
        }
    }
}

void Service::publish_changes() {
    // Only the groups that may have changed are rebuilt (each costs a journal read), and only
    // they go to the consumers: an event about one group costs the same on a host of four
    // groups or four thousand.
    std::set<unsigned> groups;
    if (publish_all_) {
        for (const auto& [g, gp] : plans_)
            groups.insert(g);
        for (const auto& [g, gi] : inventory_.groups)
            groups.insert(g);
    } else {
        groups = dirty_;
    }
    InventoryChange change;
    std::string m = to_string(mode());
    if (inventory_.mode != m || inventory_.iommu != snapshot_.topology.iommu_enabled) {
        inventory_.mode = std::move(m);
        inventory_.iommu = snapshot_.topology.iommu_enabled;
        change.manager = true;
    }
    for (unsigned g : groups) {
        auto view = group_view(g);
        auto old = inventory_.groups.find(g);
        if (old != inventory_.groups.end() && view && old->second == view->first &&
            std::all_of(view->second.begin(), view->second.end(), [&](const DeviceInfo& d) {
                auto it = inventory_.devices.find(d.address);
                return it != inventory_.devices.end() && it->second == d;
            }))
            continue;
        if (old == inventory_.groups.end() && !view)
            continue;
        change.groups.insert(g);
        if (old != inventory_.groups.end()) {
            for (const auto& a : old->second.devices) {
                change.devices.insert(a);
                if (auto d = inventory_.devices.find(a);
                    d != inventory_.devices.end() && d->second.group == g)
                    inventory_.devices.erase(d);
            }
            inventory_.groups.erase(old);
        }
        if (!view)
            continue;
        inventory_.groups.emplace(g, std::move(view->first));
        for (auto& d : view->second) {
            change.devices.insert(d.address);
            inventory_.devices.insert_or_assign(d.address, std::move(d));
        }
    }
    dirty_.clear();
    publish_all_ = false;
    // Until on_change_ returns, consumers may hold a partial view: kept, and sent again.
    unsent_.merge(std::move(change));
    if (unsent_.empty())
        return;
    if (on_change_)
        on_change_(inventory_, unsent_);
    unsent_ = {};
}

std::string Service::plan_json() const {
    return plan_to_json(make_plan(snapshot_.topology, snapshot_.use, config_));
}

OpResult Service::apply_reload() {
    refresh_fences();
    ConfigResult r = load_config(fs_.root(), options_.config_file);
    if (!r.config) {
        for (const auto& e : r.errors)
            spdlog::error("reload rejected: {}", e);
        spdlog::warn("reload rejected; the previous configuration stays in effect");
        return OpResult::error(OpResult::Code::Failed,
                               "configuration rejected, previous one kept: " + join(r.errors, "; "));
    }
    for (const auto& w : r.warnings)
        spdlog::warn("{}", w);
    Config before = std::move(config_);
    config_ = std::move(*r.config);
    // The running executor, not a new one: operations started before may still be writing
    // through it, and it knows which functions have a write stuck in the kernel.
    executor_->set_write_timeout(std::chrono::seconds(config_.write_timeout));
    for (unsigned g : groups_whose_entries_changed(before, config_)) {
        if (executor_->released(g)) {
            spdlog::info("group {}: the entries matching it changed; no longer held released", g);
            executor_->clear_released(g);
        }
    }
    // A new config is a deliberate act: drift gets its one re-assertion again.
    reasserted_.clear();
    std::set<unsigned> groups;
    for (const auto& [g, st] : status_)
        groups.insert(g);
    reread();
    for (const auto& [g, gp] : plans_)
        groups.insert(g);
    spdlog::info("configuration reloaded: {} device entries, {} protect entries, mode {}",
                 config_.devices.size(), config_.protects.size(), to_string(mode()));
    decide(groups, false);
    return {};
}

std::set<unsigned> Service::groups_whose_entries_changed(const Config& before,
                                                         const Config& after) const {
    std::set<unsigned> changed;
    for (const auto& [g, members] : snapshot_.topology.groups)
        for (const auto& a : members)
            if (const PciFunction* fn = snapshot_.topology.find(a))
                if (entry_signature(before, *fn) != entry_signature(after, *fn))
                    changed.insert(g);
    return changed;
}

OpResult Service::refusal(const GroupPlan& gp) const {
    std::string msg = std::string(to_string(gp.reason)) + ": group " +
                      (gp.group ? std::to_string(*gp.group) : "(none)");
    if (!gp.blockers.empty())
        msg += ", blocked by " + addresses(gp.blockers);
    if (!gp.details.empty())
        msg += ": " + join(gp.details, "; ");
    return OpResult::error(OpResult::Code::Refused, msg);
}

Service::Prepared Service::ended(OpResult r) {
    Prepared p;
    p.done = std::move(r);
    return p;
}

const PciFunction* Service::requested_function(std::string_view address, OpResult* why) {
    std::string err;
    auto addr = PciAddress::parse(address, &err);
    if (!addr) {
        *why = OpResult::error(OpResult::Code::InvalidArgs, err);
        return nullptr;
    }
    refresh({*addr});  // decide on the host as it is now (the whole group), not as the last event left it
    const PciFunction* fn = snapshot_.topology.find(*addr);
    if (!fn)
        *why = OpResult::error(OpResult::Code::NotFound, "no PCI function " + addr->str());
    return fn;
}

Service::Prepared Service::prepare_bind(std::string_view address) {
    OpResult why;
    const PciFunction* fn = requested_function(address, &why);
    if (!fn)
        return ended(why);
    const PciAddress addr = fn->address;
    const GroupPlan* gp = nullptr;
    std::optional<Plan> whole;  // only for a function outside any group: its no-iommu entry
    auto holds = [&](const GroupPlan& g) {
        return std::any_of(g.devices.begin(), g.devices.end(),
                           [&](const PlannedDevice& d) { return d.address == addr; });
    };
    if (fn->iommu_group)
        if (const GroupPlan* g = group_plan(*fn->iommu_group); g && holds(*g))
            gp = g;
    if (!gp && (!fn->iommu_group || !snapshot_.topology.iommu_enabled)) {
        whole = make_plan(snapshot_.topology, snapshot_.use, config_);
        for (const auto& g : whole->groups)
            if (!g.group && holds(g))
                gp = &g;
    }
    if (!gp)
        return ended(OpResult::error(OpResult::Code::NotAllowlisted,
                                      addr.str() + " matches no [[device]] entry, nor does any "
                                                    "function of its IOMMU group"));
    if (gp->action == Action::Refuse) {
        OpResult refused = refusal(*gp);
        if (gp->group) {
            // Published as the daemon decides it, early-override clean-up included: after
            // this request, in the group's turn.
            Request decide;
            decide.kind = Request::Kind::Decide;
            enqueue(*gp->group, std::move(decide));
        }
        return ended(refused);
    }
    unsigned id = *gp->group;
    if (mode() == Mode::Observe)
        return ended(OpResult::error(OpResult::Code::Failed,
                                      "vfiod runs in observe mode and writes nothing; group " +
                                          std::to_string(id) + " stays pending"));
    spdlog::info("group {}: Bind requested for {}", id, addr.str());
    reasserted_.erase(id);
    if (gp->action == Action::Bound) {
        executor_->clear_released(id);  // the operator takes the group back; nothing to write
        set_status(id, {GroupState::Bound, Reason::None, "", {}});
        return ended({});
    }
    // Consumers see `pending` while the writes run.
    set_status(id, {planned_state(gp->action), Reason::None, "binding " + describe_devices(*gp), {}});
    Prepared p;
    p.group = id;
    p.plan = *gp;
    p.trigger = Trigger::Operator;  // an explicit Bind is the one way to undo a Release
    return p;
}

Service::Prepared Service::prepare_release(std::string_view address) {
    OpResult why;
    const PciFunction* fn = requested_function(address, &why);
    if (!fn)
        return ended(why);
    const PciAddress addr = fn->address;
    if (!fn->iommu_group || !status_.count(*fn->iommu_group))
        return ended(OpResult::error(OpResult::Code::NotAllowlisted,
                                      addr.str() + " is not in a group vfiod manages"));
    unsigned id = *fn->iommu_group;
    if (mode() == Mode::Observe)
        return ended(OpResult::error(OpResult::Code::Failed,
                                      "vfiod runs in observe mode and writes nothing"));
    GroupPlan rp = plan_release(snapshot_.topology, snapshot_.use, id, originals(id));
    if (rp.action == Action::Refuse) {
        spdlog::warn("group {}: Release refused: {}", id, join(rp.details, "; "));
        return ended(refusal(rp));
    }
    spdlog::info("group {}: Release requested for {}", id, addr.str());
    Prepared p;
    p.group = id;
    p.plan = std::move(rp);
    p.releasing = true;
    return p;
}

GroupOutcome Service::run_writes(const Prepared& p) {
    if (p.reconciling) {
        // config_ is stable here: a Reload waits for the operations in flight (DESIGN §6).
        auto o = executor_->reconcile(p.group, config_);
        return o ? *o : GroupOutcome{p.group, Outcome::RolledBack, Reason::None, "", {}};
    }
    for (const auto& [fn, writes] : p.cleanup) {
        for (const auto& w : writes)
            if (int err = executor_->write(fn, w.path, w.value)) {
                spdlog::error("group {}: writing {}: {}", p.group, w.path, std::strerror(err));
                break;
            }
    }
    if (!p.cleanup.empty())
        return {};  // `after` says what to publish
    if (p.releasing)
        return executor_->release(p.plan);
    // Exclusive claims are probed here, off the loop and just before the first write, since the
    // probe is itself a claim for an instant (DESIGN §4). A claimed disk makes the plan a
    // refusal, which the executor reports without writing.
    GroupPlan checked = p.plan;
    refuse_if_claimed(fs_, &checked);
    return executor_->apply(checked, p.trigger);
}

OpResult Service::complete(const Prepared& p, const GroupOutcome& o) {
    if (p.reconciling) {
        if (!o.message.empty())  // empty: the entry was finished already
            log_interrupted(o);
        reread();
        return {};
    }
    Status st = p.after ? *p.after : from_outcome(o);
    // First, so the state-change line names the drivers the functions went to.
    std::set<PciAddress> written = members({p.group});
    for (const auto& d : p.plan.devices)
        written.insert(d.address);
    refresh(std::move(written));
    set_status(p.group, st);
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
        return refusal(refused);
    }
    return OpResult::error(OpResult::Code::Failed,
                           std::string(to_string(st.reason)) + ": " + st.message);
}

OpResult Service::bind(std::string_view address) {
    Prepared p = prepare_bind(address);
    return p.done ? *p.done : complete(p, run_writes(p));
}

OpResult Service::release(std::string_view address) {
    Prepared p = prepare_release(address);
    return p.done ? *p.done : complete(p, run_writes(p));
}

// ---- operations: one at a time per group, off the loop ----

void Service::bind_async(std::string address, Reply reply) {
    submit({Request::Kind::Bind, std::move(address), std::move(reply)});
}

void Service::release_async(std::string address, Reply reply) {
    submit({Request::Kind::Release, std::move(address), std::move(reply)});
}

void Service::reload_async(Reply reply) {
    if (!workers_ || queues_.empty())
        return answer(std::move(reply), reload());
    // Waits for the operations in flight; requests that come meanwhile wait for it.
    if (reloads_.size() >= kMaxWaiting)
        return answer(std::move(reply),
                      OpResult::error(OpResult::Code::Busy,
                                      std::to_string(reloads_.size()) +
                                          " reloads already wait for the operations in flight"));
    reloads_.push_back(std::move(reply));
}

void Service::when_idle(std::function<void()> cb) {
    if (queues_.empty())
        cb();
    else
        idle_waiters_.push_back(std::move(cb));
}

void Service::submit(Request r) {
    bool release = r.kind == Request::Kind::Release;
    if (!workers_)
        return answer(std::move(r.reply), release ? this->release(r.address) : bind(r.address));
    if (!reloads_.empty()) {
        if (held_.size() >= kMaxWaiting)
            return answer(std::move(r.reply),
                          OpResult::error(OpResult::Code::Busy,
                                          std::to_string(held_.size()) +
                                              " requests already wait for a reload; try again later"));
        held_.push_back(std::move(r));
        return;
    }
    auto addr = PciAddress::parse(r.address);
    std::optional<unsigned> g = addr ? group_of(*addr) : std::nullopt;
    if (addr && !g) {
        refresh_fences();
        refresh({*addr});  // a function that appeared since the last event
        g = group_of(*addr);
    }
    if (!g) {
        // No group: answered from the plan (InvalidArgs, NotFound, NotAllowlisted, no-iommu),
        // without a write.
        return answer(std::move(r.reply), release ? this->release(r.address) : bind(r.address));
    }
    if (auto q = queues_.find(*g); q != queues_.end() && q->second.size() >= kMaxWaiting)
        return answer(std::move(r.reply),
                      OpResult::error(OpResult::Code::Busy,
                                      "group " + std::to_string(*g) + " already has " +
                                          std::to_string(q->second.size()) +
                                          " operations waiting; try again when they end"));
    enqueue(*g, std::move(r));
}

void Service::enqueue(unsigned g, Request r) {
    auto& q = queues_[g];
    q.push_back(std::move(r));
    if (q.size() == 1)
        start_next(g);
}

void Service::answer(Reply reply, OpResult r) {
    if (reply)
        replies_.emplace_back(std::move(reply), std::move(r));
}

Service::Prepared Service::prepare(const Request& r, unsigned g) {
    switch (r.kind) {
    case Request::Kind::Bind: return prepare_bind(r.address);
    case Request::Kind::Release: return prepare_release(r.address);
    case Request::Kind::Reconcile: break;
    case Request::Kind::Decide: return prepare_decide(g, r.from_events);
    }
    Prepared p;
    p.group = g;
    p.reconciling = true;
    if (auto entry = journal_->load(g))
        for (const auto& f : entry->functions)
            p.functions.push_back(f.address);
    return p;
}

void Service::start_next(unsigned g) {
    for (;;) {
        auto it = queues_.find(g);
        if (it == queues_.end() || it->second.empty()) {
            queues_.erase(g);
            group_idle(g);
            return;
        }
        refresh_fences();
        Request& r = it->second.front();
        const char* what = r.kind == Request::Kind::Bind        ? "Bind"
                           : r.kind == Request::Kind::Release   ? "Release"
                           : r.kind == Request::Kind::Reconcile ? "finishing the last run's operation"
                                                                 : "deciding a group";
        Prepared p;
        OpResult failed = guarded(what, [&] {
            p = prepare(r, g);
            return OpResult{};
        });
        if (!failed.ok())
            p.done = failed;
        if (p.done) {
            Reply reply = std::move(r.reply);
            it->second.pop_front();
            answer(std::move(reply), *p.done);
            continue;
        }
        // From here until the outcome, the loop reads nothing of these functions.
        auto& fenced = running_[g];
        for (const auto& d : p.plan.devices)
            fenced.insert(d.address);
        fenced.insert(p.functions.begin(), p.functions.end());
        refresh_fences();
        auto prepared = std::make_shared<Prepared>(std::move(p));
        auto outcome = std::make_shared<GroupOutcome>();
        bool started = workers_ && workers_->run(
                                       [this, prepared, outcome] { *outcome = run_writes(*prepared); },
                                       [this, g, prepared, outcome] { finish(g, *prepared, *outcome); });
        if (!started) {
            *outcome = run_writes(*prepared);
            finish(g, *prepared, *outcome);
        }
        return;
    }
}

void Service::finish(unsigned g, const Prepared& p, const GroupOutcome& o) {
    running_.erase(g);
    refresh_fences();  // a function whose write is stuck stays fenced
    const char* what = p.releasing                       ? "Release"
                       : p.reconciling                   ? "finishing the last run's operation"
                       : p.trigger == Trigger::Operator ? "Bind"
                                                         : "deciding a group";
    OpResult res = guarded(what, [&] { return complete(p, o); });
    auto it = queues_.find(g);
    if (it != queues_.end() && !it->second.empty()) {
        Reply reply = std::move(it->second.front().reply);
        it->second.pop_front();
        answer(std::move(reply), res);
    }
    start_next(g);
}

void Service::group_idle(unsigned g) {
    auto ev = deferred_events_.find(g);
    if (ev != deferred_events_.end()) {
        std::set<PciAddress> touched = std::move(ev->second);
        deferred_events_.erase(ev);
        handle_events(touched);
    }
    // A group that serve_reloads() settles without writes comes back here from within it:
    // serve_reloads() finishes first (the held requests are still to come), then looks again.
    if (!queues_.empty() || serving_reloads_)
        return;
    if (!reloads_.empty())
        serve_reloads();
    if (!queues_.empty())
        return;
    std::vector<std::function<void()>> waiters;
    waiters.swap(idle_waiters_);
    for (auto& cb : waiters)
        cb();
}

// One reload for every Reload waiting: a second one would re-read and re-decide the host while
// the first one's operations run. Then the requests held for it, in the order they came.
void Service::serve_reloads() {
    struct Serving {
        bool& flag;
        explicit Serving(bool& f) : flag(f) { flag = true; }
        ~Serving() { flag = false; }
    } serving(serving_reloads_);
    std::vector<Reply> reloads;
    reloads.swap(reloads_);
    OpResult reloaded = reload();
    for (auto& reply : reloads)
        answer(std::move(reply), reloaded);
    std::deque<Request> held;
    held.swap(held_);
    for (auto& r : held) {
        // Guarded like the D-Bus call it came from: a throw answers this request Failed.
        Reply reply = r.reply;
        OpResult res = guarded("a request held for a reload", [&] {
            submit(std::move(r));
            return OpResult{};
        });
        if (!res.ok())
            answer(std::move(reply), res);
    }
}

}  // namespace vfiod
