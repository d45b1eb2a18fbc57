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

class Authorizer {
public:
    using Done = std::function<void(const AuthResult&)>;

    // How long polkit may take before the caller is denied (sd-bus's own default call timeout).
    static constexpr std::chrono::seconds kPolkitTimeout{25};
    // Checks one caller (one unique name) may have in flight; more are answered LimitsExceeded
    // at once. The bus caps pending replies per connection too, but not the memory we keep.
    static constexpr std::size_t kMaxPendingPerCaller = 16;
    // Checks in flight over all callers.
    static constexpr std::size_t kMaxPending = 1024;

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
    void finish(const std::string& sender, std::uint64_t id, const AuthResult& r);
    void caller_left(const std::string& sender);
    void drop_if_idle(const std::string& sender);

    sdbus::IConnection& connection_;
    std::unique_ptr<sdbus::IProxy> bus_;
    std::unique_ptr<sdbus::IProxy> polkit_;
    std::map<std::string, std::unique_ptr<Caller>> callers_;
    std::vector<std::unique_ptr<Caller>> graveyard_;
    std::uint64_t next_id_ = 1;
};

}  // namespace vfiod
