#include "dbus/call_log.hpp"

#include <spdlog/spdlog.h>

namespace vfiod {

RateLimiter::RateLimiter(std::size_t burst, Clock::duration interval, std::size_t max_keys)
    : burst_(burst), interval_(interval), max_keys_(max_keys) {}

bool RateLimiter::admit(std::int64_t key, Clock::time_point now) {
    auto it = windows_.find(key);
    if (it != windows_.end() && it->second.end <= now && it->second.suppressed == 0) {
        windows_.erase(it);  // an idle window: start afresh (one with a count waits for expire())
        it = windows_.end();
    }
    if (it == windows_.end()) {
        if (windows_.size() >= max_keys_)
            key = kOverflowKey;
        it = windows_.try_emplace(key, Window{now + interval_}).first;
    }
    Window& w = it->second;
    if (w.lines < burst_) {
        ++w.lines;
        return true;
    }
    ++w.suppressed;
    return false;
}

std::vector<RateLimiter::Suppressed> RateLimiter::expire(Clock::time_point now) {
    std::vector<Suppressed> out;
    for (auto it = windows_.begin(); it != windows_.end();) {
        if (it->second.end > now) {
            ++it;
            continue;
        }
        if (it->second.suppressed)
            out.push_back({it->first, it->second.suppressed});
        it = windows_.erase(it);
    }
    return out;
}

std::optional<RateLimiter::Clock::time_point> RateLimiter::next_deadline() const {
    std::optional<Clock::time_point> next;
    for (const auto& [key, w] : windows_)
        if (!next || w.end < *next)
            next = w.end;
    return next;
}

namespace {

std::string who(std::int64_t key) {
    if (key == RateLimiter::kOverflowKey)
        return "other uids";
    if (key < 0)
        return "callers not yet identified";
    return "uid " + std::to_string(key);
}

}  // namespace

CallLog::CallLog() : limiter_(kBurst, kInterval, kMaxCallers) {}

void CallLog::note(std::optional<uid_t> uid, const std::string& line) {
    std::int64_t key = uid ? static_cast<std::int64_t>(*uid) : -1;
    auto now = RateLimiter::Clock::now();
    // Windows that ended are summed up first, so a summary precedes the next window's lines.
    flush();
    if (limiter_.admit(key, now))
        spdlog::warn("{}", line);
}

void CallLog::flush() {
    for (const auto& s : limiter_.expire(RateLimiter::Clock::now()))
        spdlog::warn("{}: {} more denied or failed call(s) in the last {} s not logged",
                     who(s.key), s.count, kInterval.count());
}

std::optional<RateLimiter::Clock::time_point> CallLog::next_deadline() const {
    return limiter_.next_deadline();
}

}  // namespace vfiod
