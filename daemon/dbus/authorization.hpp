// Who may change things over D-Bus (DESIGN §6): root, and anyone polkit grants org.vfiod1.manage,
// asked asynchronously so a slow polkit delays only the caller it is asked about.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sdbus {
class IConnection;
class IProxy;
}  // namespace sdbus

namespace vfiod {

inline constexpr const char* kManageAction = "org.vfiod1.manage";

struct AuthResult {
    enum class Verdict {
        Allowed,
        Denied,     // AccessDenied
        Challenge,  // polkit would grant it after a password: InteractiveAuthorizationRequired
        Busy,       // too many checks in flight for this caller: LimitsExceeded
    };
    Verdict verdict = Verdict::Denied;
    std::optional<uid_t> uid;  // as the bus driver reports it; nullopt when it could not say
    std::string why;           // for the log and the error message

    bool allowed() const { return verdict == Verdict::Allowed; }
    // The D-Bus error name a refusal answers with.
    const char* error_name() const;
};

// Who holds the CheckAuthorization calls vfiod has in flight. The bus lets one connection wait
// for at most 128 replies (dbus-daemon's max_replies_per_connection, the system bus default);
// past that a call fails at once. So there are fewer slots than that, shared per uid, not per
// caller: a uid opens as many connections as it likes, and each is a caller of its own.
// Bookkeeping only; the Authorizer asks, and answers the calls.
class PolkitSlots {
public:
    // Below the bus's 128, with room for vfiod's other calls.
    static constexpr std::size_t kTotal = 96;
    // One uid's share: a uid holding it is answered LimitsExceeded at once.
    static constexpr std::size_t kShare = 16;

    struct Decision {
        enum class Kind {
            Take,     // a free slot
            Preempt,  // all taken: `victim` holds the most, and gives its newest check up
            Refuse,   // the uid holds its share, or no uid holds more than it does + 1
        };
        Kind kind;
        uid_t victim = 0;
    };
    // What a check for `uid` may have. A uid holding no slot is refused only when kTotal uids
    // hold one each.
    Decision ask(uid_t uid) const;
    void take(uid_t uid);
    void give_back(uid_t uid);
    std::size_t held(uid_t uid) const;
    std::size_t total() const { return total_; }

private:
    std::map<uid_t, std::size_t> held_;  // uids holding at least one
    std::size_t total_ = 0;
};

class Authorizer {
public:
    using Done = std::function<void(const AuthResult&)>;

    // How long polkit may take before the caller is denied (sd-bus's own default call timeout).
    static constexpr std::chrono::seconds kPolkitTimeout{25};
    // Checks one caller (one unique name) may have in flight, and all callers together,
    // whether at polkit or still waiting for the bus to name the caller's uid; more are
    // answered LimitsExceeded at once. They bound the memory kept; PolkitSlots bounds what is
    // asked of polkit.
    static constexpr std::size_t kMaxPendingPerCaller = 16;
    static constexpr std::size_t kMaxPending = 1024;
    // How much of a failing polkit's error vfiod quotes (its reply and log line): polkit's
    // message is polkit's to choose, 100,000 characters of it as well.
    static constexpr std::size_t kQuotedError = 200;

    explicit Authorizer(sdbus::IConnection& connection);
    ~Authorizer();
    Authorizer(const Authorizer&) = delete;
    Authorizer& operator=(const Authorizer&) = delete;

    // Decides whether `sender` (a unique bus name) may perform org.vfiod1.manage and calls
    // `done` once with the answer, from the event loop: at once when the answer is known,
    // later when the bus or polkit must be asked. A caller that leaves the bus before the
    // answer is forgotten: `done` is never called for it and nothing of it is kept.
    void check(const std::string& sender, Done done);

    // Checks in flight and callers with state (the hygiene tests read these through the log).
    std::size_t pending() const;
    std::size_t callers() const { return callers_.size(); }

    // Frees what callbacks could not free while they ran (match slots of callers that left).
    // Called by the event loop between dispatches.
    void tidy();

private:
    struct Query;
    struct Caller;

    Caller* add_caller(const std::string& sender);
    void on_uid(const std::string& sender, std::optional<uid_t> uid, const std::string& error,
                bool gone);
    void ask_polkit(const std::string& sender, std::uint64_t id);
    void call_polkit(const std::string& sender, std::uint64_t id, uid_t uid);
    void preempt(uid_t victim);
    void finish(const std::string& sender, std::uint64_t id, const AuthResult& r);
    void caller_left(const std::string& sender);
    void drop_if_idle(const std::string& sender);

    sdbus::IConnection& connection_;
    std::unique_ptr<sdbus::IProxy> bus_;
    std::unique_ptr<sdbus::IProxy> polkit_;
    std::map<std::string, std::unique_ptr<Caller>> callers_;
    PolkitSlots slots_;
    std::vector<std::unique_ptr<Caller>> graveyard_;
    std::uint64_t next_id_ = 1;
};

}  // namespace vfiod
