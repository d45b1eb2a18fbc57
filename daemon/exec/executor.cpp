#include "exec/executor.hpp"

#include "core/pci_paths.hpp"
#include "core/strings.hpp"
#include "exec/hang_safe_write.hpp"
#include "exec/journal_check.hpp"
#include "exec/write_text.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace vfiod {

namespace {

using pci_paths::device;
using write_text::error_text;
using write_text::shown;

}  // namespace

// A named driver ("" = none), or, when a release does not know the host driver, anything except
// the vfio driver it is leaving; plus the driver_override wanted.
struct Executor::Home {
    std::optional<std::string> driver;
    std::string avoid;
    std::string override_;

    bool satisfied_by(const std::string& cur) const {
        return driver ? cur == *driver : (avoid.empty() || cur != avoid);
    }
    std::string describe() const {
        if (driver)
            return driver->empty() ? "no driver" : "'" + printable(*driver) + "'";
        return "a driver other than '" + printable(avoid) + "'";
    }
};

Executor::Executor(HostFs& fs, Journal* journal, std::chrono::milliseconds write_timeout)
    : fs_(fs), journal_(journal), timeout_(write_timeout) {}

Executor::~Executor() = default;

// Each write is hang-safe (exec/hang_safe_write): a blocked one is left behind and its function
// remembered, so nobody writes to it again meanwhile.
int Executor::timed_write(const PciAddress& fn, const std::string& rel, const std::string& value) {
    std::shared_ptr<Pending> left;
    const int err = write_within(fs_, rel, value, timeout_.load(), &left);
    if (err != kWriteStuck)
        return err;
    // Not under left->m: held_by_stuck_write() takes stuck_m_ first, then a Pending's.
    std::lock_guard stuck_lock(stuck_m_);
    stuck_[fn] = left;
    return kStuck;
}

int Executor::write(const PciAddress& fn, const std::string& rel, const std::string& value) {
    {
        std::lock_guard stuck_lock(stuck_m_);
        if (auto it = stuck_.find(fn); it != stuck_.end()) {
            std::lock_guard lock(it->second->m);
            if (!it->second->done)
                return EBUSY;
        }
    }
    int err = timed_write(fn, rel, value);
    return err == kStuck ? ETIMEDOUT : err;
}

std::vector<PciAddress> Executor::stuck() const {
    std::vector<PciAddress> out;
    std::lock_guard stuck_lock(stuck_m_);
    for (const auto& [addr, p] : stuck_) {
        std::lock_guard lock(p->m);
        if (!p->done)
            out.push_back(addr);
    }
    return out;
}

std::vector<PciAddress> Executor::stuck_among(const std::vector<PciAddress>& fns) {
    std::lock_guard stuck_lock(stuck_m_);
    std::erase_if(stuck_, [](const auto& kv) {
        std::lock_guard lock(kv.second->m);
        return kv.second->done;
    });
    std::vector<PciAddress> out;
    for (const auto& fn : fns)
        if (stuck_.count(fn))
            out.push_back(fn);
    return out;
}

std::optional<GroupOutcome> Executor::held_by_stuck_write(const GroupPlan& plan) {
    std::vector<PciAddress> fns;
    for (const auto& d : plan.devices)
        fns.push_back(d.address);
    GroupOutcome out;
    out.blockers = stuck_among(fns);
    if (out.blockers.empty())
        return std::nullopt;
    out.group = plan.group;
    out.state = Outcome::Stuck;
    out.reason = Reason::Stuck;
    out.message = out.blockers.front().str() +
                  ": an earlier write is still blocked in the kernel; the group is left alone "
                  "until it returns";
    return out;
}

namespace {

std::string read_override(const HostFs& fs, const PciAddress& a) {
    return pci_paths::override_value(fs.read(pci_paths::override_file(a)).value_or(""));
}

std::string read_driver(const HostFs& fs, const PciAddress& a) {
    return fs.link_name(pci_paths::driver_link(a)).value_or("");
}

// A driver name read from the host, for a message: quoted and printable.
std::string driver_text(const std::string& d) {
    return d.empty() ? "none" : "'" + printable(d) + "'";
}

const JournalEntry::Function* find_function(const std::optional<JournalEntry>& e,
                                            const PciAddress& a) {
    if (!e)
        return nullptr;
    for (const auto& f : e->functions)
        if (f.address == a)
            return &f;
    return nullptr;
}

GroupOutcome outcome(const std::optional<unsigned>& group, Outcome state, Reason reason = Reason::None,
                     std::string message = "", std::vector<PciAddress> blockers = {}) {
    return {{state, reason, std::move(message), std::move(blockers)}, group};
}

}  // namespace

// Drives one function to `home` in the same race-free order as a bind: override first, so the
// probe can only pick the wanted driver; then unbind; then probe; then look. Used for rollback
// and for reconciling interrupted operations. Problems are appended to *note.
bool Executor::converge(const PciAddress& fn, const Home& home, std::string* note) {
    auto problem = [&](const std::string& s) {
        *note += (note->empty() ? "" : "; ") + fn.str() + ": " + s;
    };
    // A removed function has nothing left to restore and no override to leave behind.
    if (!fs_.exists(device(fn)))
        return true;
    auto step = [&](const std::string& rel, const std::string& value, const char* name) {
        int err = timed_write(fn, rel, value);
        if (err == 0)
            return true;
        problem(std::string(name) + ": writing '" + shown(value) + "' to " + rel + ": " +
                (err == kStuck ? "blocked; left as it is" : error_text(err)));
        return false;
    };
    // Stop at the first failed step: with the wrong override a probe could attach the wrong
    // driver, and after a blocked write every later one would block on the device lock too.
    if (read_override(fs_, fn) != home.override_ &&
        !step(pci_paths::override_file(fn), pci_paths::override_write(home.override_),
              "driver_override"))
        return false;
    std::string cur = read_driver(fs_, fn);
    if (!cur.empty() && !home.satisfied_by(cur) && !step(pci_paths::unbind_file(fn), fn.str(), "unbind"))
        return false;
    bool wants_a_driver = !home.driver || !home.driver->empty();
    if (read_driver(fs_, fn).empty() && wants_a_driver &&
        !step(pci_paths::kDriversProbe, fn.str(), "drivers_probe"))
        return false;
    cur = read_driver(fs_, fn);
    if (!home.satisfied_by(cur)) {
        problem("driver is " + driver_text(cur) + ", expected " + home.describe());
        return false;
    }
    return true;
}

bool Executor::released(unsigned group) const { return journal_ && journal_->released(group); }

int Executor::clear_released(unsigned group) {
    return journal_ ? journal_->clear_released(group) : 0;
}

GroupOutcome Executor::apply(const GroupPlan& plan, Trigger trigger) {
    // The sticky rule (DESIGN §6) lives here so no caller can forget it: only an operator's Bind
    // undoes an operator's Release. A refusal is reported as such either way: it writes nothing.
    if (plan.action != Action::Refuse && plan.group && released(*plan.group)) {
        if (trigger == Trigger::Automatic)
            return outcome(plan.group, Outcome::Released, Reason::None,
                           "released earlier; kept (vfioctl bind re-binds it)");
        clear_released(*plan.group);
    }
    return run(plan, JournalEntry::Op::Bind);
}

GroupOutcome Executor::release(const GroupPlan& plan) {
    return run(plan, JournalEntry::Op::Release);
}

GroupOutcome Executor::run(const GroupPlan& plan, JournalEntry::Op op) {
    if (plan.action == Action::Refuse || !plan.group)
        return outcome(plan.group, Outcome::Refused, plan.group ? plan.reason : Reason::NoIommu,
                       join(plan.details, "; "), plan.blockers);
    if (auto held = held_by_stuck_write(plan))
        return *held;
    std::optional<JournalEntry> prev;
    if (journal_)
        prev = journal_->load(*plan.group);  // an unreadable entry is as good as none here
    JournalEntry entry = record(plan, op, prev);
    if (plan.action == Action::Bound)
        return outcome(plan.group, Outcome::Bound);
    if (plan.action == Action::Released)
        return keep_released(std::move(entry), prev);
    if (op == JournalEntry::Op::Bind)
        if (auto missing = missing_driver(plan))
            return *missing;
    entry.phase = JournalEntry::Phase::Started;
    if (std::string err = store(entry); !err.empty())
        return outcome(plan.group, Outcome::Failed, Reason::WriteFailed,
                       err + "; nothing was written");
    return write_all(plan, entry);
}

// The journal entry for this operation: every non-bridge function's driver and override right
// now, and the original host driver a later Release gives back.
JournalEntry Executor::record(const GroupPlan& plan, JournalEntry::Op op,
                              const std::optional<JournalEntry>& prev) const {
    JournalEntry entry;
    entry.group = *plan.group;
    entry.op = op;
    for (const auto& d : plan.devices) {
        if (!d.target)
            continue;  // bridges stay with the host and are never written
        JournalEntry::Function f;
        f.address = d.address;
        f.before = read_driver(fs_, d.address);
        f.before_override = read_override(fs_, d.address);
        f.target = *d.target;
        const auto* pf = find_function(prev, d.address);
        if (op == JournalEntry::Op::Release)
            f.original = pf ? pf->original : *d.target;
        else if (!f.before.empty() && f.before != *d.target)
            f.original = f.before;  // on a host driver now: that is the one to give back
        else
            f.original = pf ? pf->original : f.before;
        entry.functions.push_back(std::move(f));
    }
    return entry;
}

// A release with nothing to write: the functions are home, but the operator asked, so the
// group is recorded released (sticky) all the same.
GroupOutcome Executor::keep_released(JournalEntry entry, const std::optional<JournalEntry>& prev) {
    GroupOutcome out = outcome(entry.group, Outcome::Released);
    if (!journal_)
        return out;
    if (prev && !prev->functions.empty())
        entry.functions = prev->functions;
    entry.phase = JournalEntry::Phase::Done;
    entry.released = true;
    out.message = store(entry);
    return out;
}

std::optional<GroupOutcome> Executor::missing_driver(const GroupPlan& plan) const {
    for (const auto& d : plan.devices) {
        if (!d.target || d.writes.empty() || fs_.exists(pci_paths::driver(*d.target)))
            continue;
        return outcome(plan.group, Outcome::Failed, Reason::VfioUnavailable,
                       pci_paths::driver(*d.target) + " does not exist: the '" + *d.target +
                           "' driver is not loaded (modprobe it); nothing was written",
                       {d.address});
    }
    return std::nullopt;
}

// The plan's writes, function by function, each function verified after its last write. The
// first failure abandons the group: what moved so far is rolled back.
GroupOutcome Executor::write_all(const GroupPlan& plan, JournalEntry& entry) {
    const bool binding = entry.op == JournalEntry::Op::Bind;
    std::vector<size_t> moved;  // indexes into entry.functions, in write order
    size_t index = 0;
    for (const auto& d : plan.devices) {
        if (!d.target)
            continue;
        const auto& f = entry.functions[index];
        if (!d.writes.empty())
            moved.push_back(index);
        ++index;
        for (const auto& w : d.writes) {
            int err = timed_write(d.address, w.path(), w.value);
            if (err == 0)
                continue;
            std::string what = write_text::writing(d.address.str(), w);
            if (err != kStuck)
                return abandon(entry, moved, d.address, what + error_text(err), false);
            moved.pop_back();  // its device lock is held: rolling it back would block too
            return abandon(entry, moved, d.address,
                           what + "no answer within " + std::to_string(timeout_.load().count()) +
                               " ms; left as it is (a blocked kernel write cannot be cancelled)",
                           true);
        }
        Home want = binding || !d.target->empty() ? Home{*d.target, "", ""}
                                                   : Home{std::nullopt, f.before, ""};
        if (auto wrong = verify(d.address, want))
            return abandon(entry, moved, d.address, *wrong, false);
    }
    entry.phase = JournalEntry::Phase::Done;
    entry.released = !binding;
    // The kernel state is right even if this store fails; reconcile() finishes a stale entry.
    return outcome(entry.group, binding ? Outcome::Bound : Outcome::Released, Reason::None,
                   store(entry));
}

// nullopt when the function sits where `want` says; otherwise what is wrong, for the message.
std::optional<std::string> Executor::verify(const PciAddress& fn, const Home& want) const {
    if (!fs_.exists(device(fn)))
        return fn.str() + ": verify: the device is gone";
    std::string cur = read_driver(fs_, fn);
    if (want.satisfied_by(cur))
        return std::nullopt;
    return fn.str() + ": verify: driver is " + driver_text(cur) + ", expected " + want.describe();
}

// Undoes the functions already moved, newest first, then records and reports the failure.
GroupOutcome Executor::abandon(JournalEntry& entry, const std::vector<size_t>& moved,
                               const PciAddress& at, const std::string& what, bool stuck) {
    std::string notes;
    for (auto it = moved.rbegin(); it != moved.rend(); ++it) {
        const auto& f = entry.functions[*it];
        converge(f.address, Home{f.before, "", f.before_override}, &notes);
    }
    entry.phase = stuck ? JournalEntry::Phase::Stuck : JournalEntry::Phase::RolledBack;
    std::string message =
        what + "; " +
        (notes.empty() ? std::string(stuck ? "the group's other functions were rolled back"
                                           : "the group was rolled back")
                       : "rollback incomplete: " + notes);
    if (std::string err = store(entry); !err.empty())
        message += "; " + err;
    return outcome(entry.group, stuck ? Outcome::Stuck : Outcome::Failed,
                   stuck ? Reason::Stuck : Reason::WriteFailed, message, {at});
}

std::string Executor::store(const JournalEntry& entry) {
    if (!journal_)
        return "";
    int err = journal_->store(entry);
    return err ? journal_->describe_error(entry.group, err) : "";
}

namespace {

bool finished(const JournalEntry& e) {
    return e.phase == JournalEntry::Phase::Done || e.phase == JournalEntry::Phase::RolledBack;
}

}  // namespace

std::vector<GroupOutcome> Executor::reconcile(const Config& config) {
    std::vector<GroupOutcome> outs;
    std::vector<std::string> errors;
    for (const auto& [g, fns] : unfinished(&errors))
        if (auto o = reconcile(g, config))
            outs.push_back(std::move(*o));
    for (const auto& err : errors)
        outs.push_back(outcome(std::nullopt, Outcome::Failed, Reason::None,
                               "unreadable journal entry left alone: " + err));
    return outs;
}

std::map<unsigned, std::vector<PciAddress>> Executor::unfinished(
    std::vector<std::string>* errors) const {
    std::map<unsigned, std::vector<PciAddress>> out;
    if (!journal_)
        return out;
    for (const auto& e : journal_->load_all(errors))
        if (!finished(e)) {
            auto& fns = out[e.group];
            for (const auto& f : e.functions)
                fns.push_back(f.address);
        }
    return out;
}

std::optional<GroupOutcome> Executor::reconcile(unsigned group, const Config& config) {
    std::optional<JournalEntry> e = journal_ ? journal_->load(group) : std::nullopt;
    if (!e || finished(*e))
        return std::nullopt;
    // Read now, on this thread, right before the first write: the entry is only as good as the
    // host's agreement with it (a stale run/vfiod, an address reused after a hot-unplug).
    auto problems = entry_problems(*e, read_entry_facts(fs_, *e), config);
    if (!problems.empty())
        return discard(*e, problems);
    return reconcile_entry(*e);
}

// An entry the host does not agree with: nothing is written for it, and it goes, so it is never
// acted on again. Its `released` mark goes with it: vfiod sets the mark only on an entry it has
// finished, so an unfinished one carrying it is not vfiod's record, and must not hold a group
// back from binding either.
GroupOutcome Executor::discard(const JournalEntry& e, const std::vector<EntryProblem>& problems) {
    std::vector<PciAddress> blockers;
    std::string why = describe_problems(problems, &blockers);
    GroupOutcome out = outcome(e.group, Outcome::Refused, Reason::None,
                               "the " + std::string(to_string(e.op)) + " entry " +
                                   journal_->entry_path(e.group) +
                                   " does not match this host; nothing was written for it and it "
                                   "was discarded: " + why,
                               std::move(blockers));
    if (int err = journal_->remove(e.group))
        out.message += "; removing it: " + journal_->describe_error(e.group, err);
    return out;
}

// One unfinished entry: a bind that completed is finished, any other bind rolled back; a
// release is finished (the operator asked for the group back).
GroupOutcome Executor::reconcile_entry(JournalEntry& e) {
    GroupOutcome out = outcome(e.group, Outcome::Released);
    std::string notes;
    bool ok = true;
    if (e.op == JournalEntry::Op::Release) {
        for (const auto& f : e.functions)
            ok = converge(f.address,
                          f.target.empty() ? Home{std::nullopt, f.before, ""}
                                           : Home{f.target, "", ""},
                          &notes) && ok;
        e.phase = JournalEntry::Phase::Done;
        e.released = true;
        out.message = "an interrupted release was finished";
    } else if (std::all_of(e.functions.begin(), e.functions.end(), [&](const auto& f) {
                   return fs_.exists(device(f.address)) && read_driver(fs_, f.address) == f.target;
               })) {
        // The crash came after the last write: finishing is only bookkeeping.
        e.phase = JournalEntry::Phase::Done;
        out.state = Outcome::Bound;
        out.message = "an interrupted bind had completed";
    } else {
        for (auto it = e.functions.rbegin(); it != e.functions.rend(); ++it)
            ok = converge(it->address, Home{it->before, "", it->before_override}, &notes) && ok;
        e.phase = JournalEntry::Phase::RolledBack;
        out.state = Outcome::RolledBack;
        out.message = "an interrupted bind was rolled back";
    }
    if (!ok) {
        // Leave the entry unfinished: the next start tries once more, nothing loops.
        out.state = Outcome::Failed;
        out.reason = Reason::WriteFailed;
        out.message += " only in part: " + notes;
    } else if (std::string err = store(e); !err.empty()) {
        out.message += "; " + err;
    }
    return out;
}

}  // namespace vfiod
