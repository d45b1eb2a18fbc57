#include "service/authorization.hpp"

#include <sdbus-c++/sdbus-c++.h>
#include <spdlog/spdlog.h>

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

}  // namespace

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
                              on_uid(sender, std::nullopt, e->getName() + ": " + e->getMessage(),
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

void Authorizer::ask_polkit(const std::string& sender, std::uint64_t id) {
    Caller& c = *callers_.at(sender);
    uid_t uid = *c.uid;
    Subject subject{std::string("system-bus-name"),
                    std::map<std::string, sdbus::Variant>{{"name", sdbus::Variant(sender)}}};
    // Flags 0: sdbus-c++ 1.2 cannot read a call's ALLOW_INTERACTIVE_AUTHORIZATION flag, so there
    // is never a prompt; servers grant the action by rules files.
    try {
        c.queries.at(id).call =
            polkit_->callMethodAsync("CheckAuthorization")
                .onInterface(kPolkitInterface)
                .withTimeout(kPolkitTimeout)
                .withArguments(subject, std::string(kManageAction),
                               std::map<std::string, std::string>{}, uint32_t{0}, std::string())
                .uponReplyInvoke([this, sender, id, uid](const sdbus::Error* e, PolkitAnswer a) {
                    using V = AuthResult::Verdict;
                    if (e && is_absent(e->getName()))
                        finish(sender, id,
                                  {V::Denied, uid, "polkit is not running, so only root may"});
                    else if (e)
                        finish(sender, id,
                                  {V::Denied, uid,
                                   "polkit failed (" + e->getName() + ": " + e->getMessage() +
                                       "), so the call is denied"});
                    else if (a.get<0>())
                        finish(sender, id, {V::Allowed, uid, "polkit grants " +
                                                                    std::string(kManageAction)});
                    else if (a.get<1>())
                        finish(sender, id,
                                  {V::Challenge, uid,
                                   "polkit grants " + std::string(kManageAction) +
                                       " only after authentication, and vfiod cannot prompt"});
                    else
                        finish(sender, id,
                                  {V::Denied, uid,
                                   "polkit does not grant " + std::string(kManageAction)});
                });
    } catch (const sdbus::Error& e) {
        finish(sender, id, {AuthResult::Verdict::Denied, uid,
                            "cannot ask polkit (" + e.getMessage() + "), so the call is denied"});
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
    for (auto& [id, q] : it->second->queries)
        q.call.cancel();
    spdlog::debug("{} left the bus with {} call(s) awaiting authorization; dropped", sender,
                  it->second->queries.size());
    it->second->queries.clear();
    graveyard_.push_back(std::move(it->second));
    callers_.erase(it);
}

}  // namespace vfiod
