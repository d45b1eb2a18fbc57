// Journal lines about denied and failed D-Bus calls, rate-limited per caller uid, so no local user
// can fill the journal by calling in a loop: a few lines per interval, then one "suppressed K".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vfiod {

// The bookkeeping, without logging or a clock of its own (unit-tested with fake time).
class RateLimiter {
public:
    using Clock = std::chrono::steady_clock;
    struct Suppressed {
        std::int64_t key;
        std::uint64_t count;
    };

    // `burst` lines per key per `interval`; at most `max_keys` keys are tracked, beyond that
    // all further keys share one bucket, so the memory is bounded whoever calls.
    RateLimiter(std::size_t burst, Clock::duration interval, std::size_t max_keys);

    static constexpr std::int64_t kOverflowKey = -2;

    // True when a line for `key` may be written at `now`; otherwise it is counted as suppressed.
    bool admit(std::int64_t key, Clock::time_point now);
    // Ends the windows that are over by `now`, forgetting their keys; returns those that
    // suppressed lines, for one summary line each.
    std::vector<Suppressed> expire(Clock::time_point now);
    // When the next window ends (nothing to do before), or nullopt when no key is tracked.
    std::optional<Clock::time_point> next_deadline() const;
    std::size_t keys() const { return windows_.size(); }

private:
    struct Window {
        Clock::time_point end;
        std::size_t lines = 0;
        std::uint64_t suppressed = 0;
    };
    std::size_t burst_;
    Clock::duration interval_;
    std::size_t max_keys_;
    std::map<std::int64_t, Window> windows_;
};

// The daemon's log of denied and failed calls, keyed by the caller's uid.
class CallLog {
public:
    static constexpr std::size_t kBurst = 5;
    static constexpr std::chrono::seconds kInterval{10};
    static constexpr std::size_t kMaxCallers = 256;

    CallLog();

    // One warning line about a call from `uid` (nullopt: the bus could not say), unless that
    // uid has used up its lines for this interval.
    void note(std::optional<uid_t> uid, const std::string& line);
    // Writes the "suppressed" summaries of windows that ended; called by the event loop.
    void flush();
    std::optional<RateLimiter::Clock::time_point> next_deadline() const;

private:
    RateLimiter limiter_;
};

}  // namespace vfiod
