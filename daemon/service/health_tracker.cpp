#include "service/health_tracker.hpp"

#include <charconv>
#include <cstring>
#include <sstream>

#include <spdlog/spdlog.h>

#include "core/strings.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

namespace {

constexpr const char kFile[] = "health";
constexpr const char kHeader[] = "vfiod-health 1";
// What a function reads before its first check.
constexpr const char kUnchecked[] = "unchecked: not read yet";
constexpr size_t kMaxRecord = 1 << 20;

std::string totals_text(const std::optional<AerTotals>& t) {
    if (!t)
        return "- - -";
    return std::to_string(t->correctable) + " " + std::to_string(t->nonfatal) + " " +
           std::to_string(t->fatal);
}

// Three fields from `fields[at]` on: "- - -" or three counts.
bool parse_totals(const std::vector<std::string_view>& f, size_t at, std::optional<AerTotals>* out) {
    if (f[at] == "-" && f[at + 1] == "-" && f[at + 2] == "-") {
        *out = std::nullopt;
        return true;
    }
    AerTotals t;
    uint64_t* counts[] = {&t.correctable, &t.nonfatal, &t.fatal};
    for (size_t i = 0; i < 3; ++i) {
        std::string_view s = f[at + i];
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *counts[i]);
        if (ec != std::errc() || p != s.data() + s.size() || s.empty())
            return false;
    }
    *out = t;
    return true;
}

}  // namespace

std::string health_record_line(const PciAddress& a, const FunctionHealth& h) {
    return a.str() + " " + to_string(h.health) + " " + totals_text(h.baseline) + " " +
           totals_text(h.seen) + " " + h.reason;
}

std::optional<std::pair<PciAddress, FunctionHealth>> parse_health_record_line(std::string_view l) {
    // Nine space-separated fields, the reason (which has spaces) the rest of the line.
    std::vector<std::string_view> f;
    size_t at = 0;
    while (f.size() < 8) {
        size_t sp = l.find(' ', at);
        if (sp == std::string_view::npos)
            return std::nullopt;
        f.push_back(l.substr(at, sp - at));
        at = sp + 1;
    }
    std::string_view reason = l.substr(at);
    auto a = PciAddress::parse(f[0]);
    auto health = health_from_string(f[1]);
    FunctionHealth h;
    if (!a || !health || !parse_totals(f, 2, &h.baseline) || !parse_totals(f, 5, &h.seen))
        return std::nullopt;
    // Our own text, one line of printable ASCII: anything else is not a record vfiod wrote.
    for (unsigned char c : reason)
        if (c < 0x20 || c > 0x7e)
            return std::nullopt;
    if ((*health == Health::Ok) != reason.empty() || reason.size() > 512)
        return std::nullopt;
    h.health = *health;
    h.reason = std::string(reason);
    return std::pair{*a, h};
}

void HealthTracker::load() {
    int err = 0;
    Fd dir = fs_.open_own_dir(dir_, false, &err);
    if (dir.get() < 0)
        return;  // no record yet (or nowhere to keep one): every function is measured afresh
    std::string why;
    auto text = HostFs::read_own(dir.get(), kFile, kMaxRecord, &why);
    if (!text) {
        if (!why.empty())
            spdlog::warn("{}/{}: {}; health is measured afresh", dir_, kFile, why);
        return;
    }
    std::istringstream in(*text);
    std::string line;
    if (!std::getline(in, line) || line != kHeader) {
        spdlog::warn("{}/{}: not a health record of this vfiod; health is measured afresh", dir_,
                     kFile);
        return;
    }
    size_t bad = 0;
    for (size_t n = 2; std::getline(in, line); ++n) {
        auto rec = parse_health_record_line(line);
        if (!rec || fns_.size() >= kMaxFunctions) {
            if (++bad <= 20)
                spdlog::warn("{}/{}:{}: not a health record line; ignored", dir_, kFile, n);
            continue;
        }
        Entry& e = fns_[rec->first];
        e.now = rec->second;
        // failed and degraded stand; the rest is measured again at the first check.
        if (e.now.health != Health::Failed && e.now.health != Health::Degraded) {
            e.now.health = Health::Unknown;
            e.now.reason = kUnchecked;
        } else {
            spdlog::warn("{}: health {} since the last run: {}", rec->first.str(),
                         to_string(e.now.health), e.now.reason);
        }
    }
    if (bad > 20)
        spdlog::warn("{}/{}: ... and {} more lines ignored", dir_, kFile, bad - 20);
}

void HealthTracker::save() {
    if (!dirty_)
        return;
    std::string text = std::string(kHeader) + "\n";
    for (const auto& [a, e] : fns_)
        text += health_record_line(a, e.now) + "\n";
    int err = 0;
    Fd dir = fs_.open_own_dir(dir_, true, &err);
    if (dir.get() >= 0)
        err = HostFs::replace_own(dir.get(), kFile, text, 0644);
    if (err) {
        spdlog::error("{}/{}: {}; a restart would lose the health states", dir_, kFile,
                      dir.get() < 0 ? fs_.own_dir_error(err) : std::strerror(err));
        return;
    }
    dirty_ = false;
}

const FunctionHealth* HealthTracker::find(const PciAddress& a) const {
    auto it = fns_.find(a);
    return it == fns_.end() ? nullptr : &it->second.now;
}

Health HealthTracker::health(const PciAddress& a) const {
    const FunctionHealth* h = find(a);
    return h ? h->health : Health::Unknown;
}

std::string HealthTracker::reason(const PciAddress& a) const {
    const FunctionHealth* h = find(a);
    return h ? h->reason : kUnchecked;
}

bool HealthTracker::update(const PciAddress& a, FunctionHealth next, Clock::time_point now) {
    auto [it, added] = fns_.try_emplace(a);
    Entry& e = it->second;
    if (!added && e.now == next && !e.held)
        return false;
    dirty_ = true;
    const bool count_only = !added && e.now.health == next.health &&
                            health_code(e.now.reason) == health_code(next.reason) &&
                            e.now.reason != next.reason;
    if (count_only && now < e.published + kCountInterval) {
        e.held = std::move(next.reason);
        held_.insert(a);
        next.reason = e.now.reason;
        e.now = std::move(next);
        return false;
    }
    const bool state_changed = added || e.now.health != next.health ||
                               health_code(e.now.reason) != health_code(next.reason);
    const bool changed = added || e.now.health != next.health || e.now.reason != next.reason;
    if (state_changed) {
        std::string line = a.str() + ": health " + to_string(next.health) +
                           (next.reason.empty() ? "" : ": " + next.reason);
        if (next.health == Health::Failed)
            spdlog::error("{}", line);
        else if (next.health == Health::Degraded)
            spdlog::warn("{}", line);
        else if (!added && (e.now.health == Health::Failed || e.now.health == Health::Degraded))
            spdlog::info("{}", line);  // cleared
        else
            spdlog::debug("{}", line);  // first read: the published property says it
    }
    e.now = std::move(next);
    e.held.reset();
    held_.erase(a);
    if (changed)
        e.published = now;
    return changed;
}

std::optional<HealthTracker::Clock::time_point> HealthTracker::due() const {
    std::optional<Clock::time_point> t;
    for (const auto& a : held_) {
        const Entry& e = fns_.at(a);
        if (!t || e.published + kCountInterval < *t)
            t = e.published + kCountInterval;
    }
    return t;
}

std::set<PciAddress> HealthTracker::flush(Clock::time_point now) {
    std::set<PciAddress> out;
    for (const auto& a : std::set<PciAddress>(held_)) {
        Entry& e = fns_.at(a);
        if (now < e.published + kCountInterval)
            continue;
        held_.erase(a);
        e.now.reason = std::move(*e.held);
        e.held.reset();
        e.published = now;
        out.insert(a);
    }
    return out;
}

void HealthTracker::forget(const PciAddress& a) {
    held_.erase(a);
    if (fns_.erase(a))
        dirty_ = true;
}

}  // namespace vfiod
