#include "dbus/authorization.hpp"

#include <algorithm>

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

#include "core/strings.hpp"

namespace vfiod {

namespace {

constexpr const char* kDbus = "org.freedesktop.DBus";
constexpr const char* kPolkit = "org.freedesktop.PolicyKit1";
constexpr const char* kPolkitInterface = "org.freedesktop.PolicyKit1.Authority";

using Subject = sdbus::Struct<std::string, std::map<std::string, sdbus::Variant>>;
using PolkitAnswer = sdbus::Struct<bool, bool, std::map<std::string, std::string>>;

bool is_absent(const std::string& error) {
    return error == "org.freedesktop.DBus.Error.ServiceUnknown" ||
           error == "org.freedesktop.DBus.Error.NameHasNoOwner";
}

// An error from the bus or polkit as vfiod quotes it to the caller and the log: bounded, and
// with nothing in it that could forge a log line or move a terminal's cursor.
std::string quoted(const sdbus::Error& e) {
    return printable(e.getName() + ": " + e.getMessage(), Authorizer::kQuotedError);
}

AuthResult polkit_verdict(const sdbus::Error* e, const PolkitAnswer& a, uid_t uid) {
    using V = AuthResult::Verdict;
    const std::string action = kManageAction;
    if (e && is_absent(e->getName()))
        return {V::Denied, uid, "polkit is not running, so only root may"};
    // The bus refused to pass the question on (a limit of its own): not polkit's "no".
    if (e && e->getName() == "org.freedesktop.DBus.Error.LimitsExceeded")
        return {V::Busy, uid, "the bus refused to ask polkit (" + quoted(*e) + "); try again"};
    if (e)
        return {V::Denied, uid, "polkit failed (" + quoted(*e) + "), so the call is denied"};
    if (a.get<0>())
        return {V::Allowed, uid, "polkit grants " + action};
    if (a.get<1>())
        return {V::Challenge, uid,
                "polkit grants " + action + " only after authentication, and vfiod cannot prompt"};
    return {V::Denied, uid, "polkit does not grant " + action};
}

}  // namespace

PolkitSlots::Decision PolkitSlots::ask(uid_t uid) const {
    using K = Decision::Kind;
    std::size_t mine = held(uid);
    if (mine >= kShare)
        return {K::Refuse};
    if (total_ < kTotal)
        return {K::Take};
    // All taken, by at least kTotal / kShare uids. The one holding the most (the lowest uid of
    // those, so the choice is stable) yields only if that leaves it still holding more: two
    // uids never take a slot back and forth.
    auto most = std::max_element(held_.begin(), held_.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most->second > mine + 1)
        return {K::Preempt, most->first};
    return {K::Refuse};
}

void PolkitSlots::take(uid_t uid) {
    ++held_[uid];
    ++total_;
}

void PolkitSlots::give_back(uid_t uid) {
    auto it = held_.find(uid);
    if (it == held_.end())
        return;
    --total_;
    if (--it->second == 0)
        held_.erase(it);
}

std::size_t PolkitSlots::held(uid_t uid) const {
    auto it = held_.find(uid);
    return it == held_.end() ? 0 : it->second;
}

const char* AuthResult::error_name() const {
    switch (verdict) {
    case Verdict::Allowed: return "";
    case Verdict::Denied: return "org.freedesktop.DBus.Error.AccessDenied";
    case Verdict::Challenge: return "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";
    case Verdict::Busy: return "org.freedesktop.DBus.Error.LimitsExceeded";
    }
    return "org.freedesktop.DBus.Error.AccessDenied";
}

struct Authorizer::Query {
    Done done;
    sdbus::PendingAsyncCall call;  // the CheckAuthorization in flight, if any
    bool at_polkit = false;        // holds one of slots_ (the caller's uid's)
};

// What is kept of one caller, only while it has checks in flight: its uid (a unique name's uid
// never changes), a match on its leaving the bus, and its queries.
struct Authorizer::Caller {
    std::optional<uid_t> uid;
    bool uid_known = false;
    sdbus::Slot left;
    sdbus::PendingAsyncCall uid_call;
    std::map<std::uint64_t, Query> queries;
};

Authorizer::Authorizer(sdbus::IConnection& connection)
    : connection_(connection),
      bus_(sdbus::createProxy(connection, kDbus, "/org/freedesktop/DBus")),
      polkit_(sdbus::createProxy(connection, kPolkit, "/org/freedesktop/PolicyKit1/Authority")) {}

Authorizer::~Authorizer() = default;

std::size_t Authorizer::pending() const {
    std::size_t n = 0;
    for (const auto& [name, c] : callers_)
        n += c->queries.size();
    return n;
}

void Authorizer::tidy() { graveyard_.clear(); }

Authorizer::Caller* Authorizer::add_caller(const std::string& sender) {
    auto c = std::make_unique<Caller>();
    // The match goes first: the bus handles our calls in order, so if the caller is still there
    // when it answers GetConnectionUnixUser, its leaving later reaches this match; if it has
    // already left, that call fails with NameHasNoOwner. Either way nothing waits for a ghost.
    std::string rule = "type='signal',sender='org.freedesktop.DBus',path='/org/freedesktop/DBus',"
                       "interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='" +
                       sender + "'";
    c->left = connection_.addMatch(rule, [this](sdbus::Message& m) {
        std::string name, old_owner, new_owner;
        m >> name >> old_owner >> new_owner;
        if (new_owner.empty())
            caller_left(name);
    });
    // The uid the bus recorded when the caller connected (SO_PEERCRED: the effective uid).
    // sd-bus's own sender credentials may be "augmented" from /proc after the fact, which is
    // racy against pid reuse, so they are not used for decisions.
    c->uid_call = bus_->callMethodAsync("GetConnectionUnixUser")
                      .onInterface(kDbus)
                      .withArguments(sender)
                      .uponReplyInvoke([this, sender](const sdbus::Error* e, uint32_t uid) {
                          if (!e)
                              on_uid(sender, static_cast<uid_t>(uid), "", false);
                          else
                              on_uid(sender, std::nullopt, quoted(*e),
                                     e->getName() == "org.freedesktop.DBus.Error.NameHasNoOwner");
                      });
    return callers_.emplace(sender, std::move(c)).first->second.get();
}

void Authorizer::check(const std::string& sender, Done done) {
    if (sender.empty()) {
        done({AuthResult::Verdict::Denied, std::nullopt, "the call carries no sender"});
        return;
    }
    if (pending() >= kMaxPending) {
        done({AuthResult::Verdict::Busy, std::nullopt,
              "too many authorization checks in flight; try again"});
        return;
    }
    Caller* c = nullptr;
    auto it = callers_.find(sender);
    try {
        c = it != callers_.end() ? it->second.get() : add_caller(sender);
    } catch (const sdbus::Error& e) {
        done({AuthResult::Verdict::Denied, std::nullopt,
              "cannot ask the bus who the caller is: " + e.getMessage()});
        return;
    }
    if (c->queries.size() >= kMaxPendingPerCaller) {
        done({AuthResult::Verdict::Busy, c->uid,
              "too many calls of this caller are waiting for authorization"});
        return;
    }
    std::uint64_t id = next_id_++;
    c->queries[id].done = std::move(done);
    if (!c->uid_known)
        return;  // on_uid() continues
    if (!c->uid)
        finish(sender, id, {AuthResult::Verdict::Denied, std::nullopt, "the caller is unknown"});
    else if (*c->uid == 0)
        finish(sender, id, {AuthResult::Verdict::Allowed, c->uid, "root"});
    else
        ask_polkit(sender, id);
}

void Authorizer::on_uid(const std::string& sender, std::optional<uid_t> uid,
                        const std::string& error, bool gone) {
    auto it = callers_.find(sender);
    if (it == callers_.end())
        return;
    Caller& c = *it->second;
    if (gone) {
        caller_left(sender);
        return;
    }
    c.uid = uid;
    c.uid_known = true;
    std::vector<std::uint64_t> ids;
    for (const auto& [id, q] : c.queries)
        ids.push_back(id);
    for (std::uint64_t id : ids) {
        if (!uid)
            finish(sender, id, {AuthResult::Verdict::Denied, std::nullopt,
                                "the bus cannot say who the caller is (" + error + ")"});
        else if (*uid == 0)
            finish(sender, id, {AuthResult::Verdict::Allowed, uid, "root"});
        else
            ask_polkit(sender, id);
    }
}

// Takes a polkit slot for the check, or answers it LimitsExceeded when its uid may have none.
void Authorizer::ask_polkit(const std::string& sender, std::uint64_t id) {
    auto it = callers_.find(sender);
    if (it == callers_.end())
        return;
    uid_t uid = *it->second->uid;
    auto d = slots_.ask(uid);
    if (d.kind == PolkitSlots::Decision::Kind::Refuse) {
        finish(sender, id,
               {AuthResult::Verdict::Busy, uid,
                fmt::format("uid {} has {} calls waiting for polkit already (vfiod waits for {} "
                            "at most, shared between uids); try again",
                            uid, slots_.held(uid), PolkitSlots::kTotal)});
        return;
    }
    if (d.kind == PolkitSlots::Decision::Kind::Preempt)
        preempt(d.victim);
    slots_.take(uid);
    it->second->queries.at(id).at_polkit = true;
    call_polkit(sender, id, uid);
}

// All slots are taken and `victim` holds the most: its newest check gives way. Its caller is
// answered LimitsExceeded, as if it had come when that uid already held its share.
void Authorizer::preempt(uid_t victim) {
    const std::string* sender = nullptr;
    std::uint64_t newest = 0;
    for (const auto& [name, c] : callers_)
        if (c->uid == victim)
            for (const auto& [id, q] : c->queries)
                if (q.at_polkit && id > newest) {
                    sender = &name;
                    newest = id;
                }
    if (!sender)
        return;
    std::string name = *sender;  // finish() may free the caller, and the key with it
    callers_.at(name)->queries.at(newest).call.cancel();
    finish(name, newest,
           {AuthResult::Verdict::Busy, victim,
            fmt::format("uid {} has the most calls waiting for polkit while another uid waits; "
                        "try again",
                        victim)});
}

void Authorizer::call_polkit(const std::string& sender, std::uint64_t id, uid_t uid) {
    Subject subject{std::string("system-bus-name"),
                    std::map<std::string, sdbus::Variant>{{"name", sdbus::Variant(sender)}}};
    // Flags 0: sdbus-c++ 1.2 cannot read a call's ALLOW_INTERACTIVE_AUTHORIZATION flag, so there
    // is never a prompt; servers grant the action by rules files.
    try {
        callers_.at(sender)->queries.at(id).call =
            polkit_->callMethodAsync("CheckAuthorization")
                .onInterface(kPolkitInterface)
                .withTimeout(kPolkitTimeout)
                .withArguments(subject, std::string(kManageAction),
                               std::map<std::string, std::string>{}, uint32_t{0}, std::string())
                .uponReplyInvoke([this, sender, id, uid](const sdbus::Error* e, PolkitAnswer a) {
                    finish(sender, id, polkit_verdict(e, a, uid));
                });
    } catch (const sdbus::Error& e) {
        finish(sender, id, {AuthResult::Verdict::Denied, uid,
                            "cannot ask polkit (" + quoted(e) + "), so the call is denied"});
    }
}

void Authorizer::finish(const std::string& sender, std::uint64_t id, const AuthResult& r) {
    auto it = callers_.find(sender);
    if (it == callers_.end())
        return;
    auto q = it->second->queries.find(id);
    if (q == it->second->queries.end())
        return;
    Done done = std::move(q->second.done);
    if (q->second.at_polkit)
        slots_.give_back(*it->second->uid);
    it->second->queries.erase(q);
    drop_if_idle(sender);
    done(r);
}

void Authorizer::drop_if_idle(const std::string& sender) {
    auto it = callers_.find(sender);
    if (it == callers_.end() || !it->second->queries.empty())
        return;
    // Not destroyed here: this may run inside the uid call's own reply handler.
    graveyard_.push_back(std::move(it->second));
    callers_.erase(it);
}

void Authorizer::caller_left(const std::string& sender) {
    auto it = callers_.find(sender);
    if (it == callers_.end())
        return;
    // Its questions are withdrawn: a late answer is dropped by sd-bus, and no reply is sent to a
    // name that no longer exists. The match slot runs this very callback, so it is freed later.
    it->second->uid_call.cancel();
    for (auto& [id, q] : it->second->queries) {
        q.call.cancel();
        if (q.at_polkit)
            slots_.give_back(*it->second->uid);
    }
    spdlog::debug("{} left the bus with {} call(s) awaiting authorization; dropped", sender,
                  it->second->queries.size());
    it->second->queries.clear();
    graveyard_.push_back(std::move(it->second));
    callers_.erase(it);
}

}  // namespace vfiod
