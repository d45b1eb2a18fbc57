#include "core/health.hpp"

#include <charconv>

namespace vfiod {

const char* to_string(Health h) {
    switch (h) {
    case Health::Ok: return "ok";
    case Health::Unknown: return "unknown";
    case Health::Degraded: return "degraded";
    case Health::Failed: return "failed";
    }
    return "unknown";
}

std::optional<Health> health_from_string(std::string_view s) {
    for (Health h : {Health::Ok, Health::Unknown, Health::Degraded, Health::Failed})
        if (s == to_string(h))
            return h;
    return std::nullopt;
}

std::optional<uint64_t> aer_total(std::string_view text, std::string_view kind) {
    const std::string key = "TOTAL_ERR_" + std::string(kind) + " ";
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        std::string_view line = text.substr(at, end == std::string_view::npos ? end : end - at);
        at = end == std::string_view::npos ? text.size() : end + 1;
        if (line.substr(0, key.size()) != key)
            continue;
        std::string_view digits = line.substr(key.size());
        uint64_t n = 0;
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (ec != std::errc() || p != digits.data() + digits.size() || digits.empty())
            return std::nullopt;
        return n;
    }
    return std::nullopt;
}

Recovery recovery_of(const char* error_event) {
    Recovery r;
    if (!error_event)
        return r;
    const std::string_view v = error_event;
    r.failed = v == "FAILED_RECOVERY";
    r.recovered = v == "SUCCESSFUL_RECOVERY";
    return r;
}

std::string_view health_code(std::string_view reason) {
    return reason.substr(0, reason.find(": "));
}

namespace {

// The worst signal of this check alone, and why; ties keep the first (the order below).
struct Candidate {
    Health health = Health::Ok;
    std::string reason;
    void take(Health h, std::string why) {
        if (h > health) {
            health = h;
            reason = std::move(why);
        }
    }
};

Candidate signals(const Recovery& recovery, const HealthReading& r,
                  const std::optional<AerTotals>& baseline) {
    Candidate c;
    if (recovery.failed)
        c.take(Health::Failed, "aer-fatal: recovery failed");
    if (r.gone)
        c.take(Health::Failed, "gone: config space reads all ones");
    if (!r.quarantine.empty())
        c.take(Health::Failed, "quarantine: " + r.quarantine);
    if (recovery.recovered)
        c.take(Health::Degraded, "aer-recovered: an uncorrectable error, recovered by the kernel");
    if (r.totals && baseline) {
        uint64_t uncor = (r.totals->nonfatal - baseline->nonfatal) +
                         (r.totals->fatal - baseline->fatal);
        uint64_t cor = r.totals->correctable - baseline->correctable;
        if (uncor)
            c.take(Health::Degraded, "aer-uncorrectable: " + std::to_string(uncor) +
                                         " since start");
        if (cor)
            c.take(Health::Degraded, "aer-correctable: " + std::to_string(cor) + " since start");
    }
    if (!r.totals)
        c.take(Health::Unknown, r.unreadable.empty()
                                    ? "no-aer: the function has no AER capability"
                                    : "unreadable: " + r.unreadable);
    return c;
}

bool sticky(Health h) { return h == Health::Failed || h == Health::Degraded; }

}  // namespace

FunctionHealth next_health(const std::optional<FunctionHealth>& was, const Recovery& recovery,
                           const HealthReading& r, HealthCheck why) {
    FunctionHealth h = was.value_or(FunctionHealth{});
    if (r.totals) {
        // Counts below what was kept: the kernel enumerated the function again, and the kept
        // totals were another life's.
        if (h.baseline && r.totals->below(*h.baseline))
            h.baseline = r.totals;
        if (h.seen && r.totals->below(*h.seen))
            h.seen = r.totals;
    }
    const bool new_errors = r.totals && h.seen && r.totals->above(*h.seen);
    const bool reads_fine = !r.gone && r.quarantine.empty() && !recovery.failed;
    if (sticky(h.health) && reads_fine &&
        (why == HealthCheck::Clear || (why == HealthCheck::Reload && !new_errors))) {
        h.health = Health::Ok;
        h.reason.clear();
        h.baseline = r.totals;
    }
    if (!h.baseline)
        h.baseline = r.totals;
    Candidate c = signals(recovery, r, h.baseline);
    if (!sticky(h.health) || c.health > h.health) {
        h.health = c.health;
        h.reason = std::move(c.reason);
    } else if (c.health == h.health && health_code(c.reason) == health_code(h.reason)) {
        h.reason = std::move(c.reason);  // the same finding, its count moved on
    }
    if (r.totals)
        h.seen = r.totals;
    return h;
}

}  // namespace vfiod
