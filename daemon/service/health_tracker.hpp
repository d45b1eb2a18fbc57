// The health of the functions vfiod watches (DESIGN §13): each one's state, the totals it is
// measured against, and their record in run/vfiod/health, which a daemon restart reads back.
// On the loop only: the checks (service/health_ops) read on workers and hand their findings
// here when they complete.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/health.hpp"
#include "core/pci_address.hpp"

namespace vfiod {

class HostFs;

class HealthTracker {
public:
    using Clock = std::chrono::steady_clock;
    // A reason whose count alone changed is published at most this often.
    static constexpr std::chrono::seconds kCountInterval{1};
    // At most this many functions are kept or read back (a host has far fewer).
    static constexpr size_t kMaxFunctions = 16384;

    HealthTracker(const HostFs& fs, std::string dir = "run/vfiod") : fs_(fs), dir_(std::move(dir)) {}

    // Reads the record at start: failed and degraded states and every baseline. A malformed
    // record or line is logged and skipped, never trusted.
    void load();
    // Writes the record when what it holds changed since the last save (enforce mode only: in
    // observe mode vfiod writes nothing, and a restart measures from its own first read).
    void save();

    // The state as published; nullopt for a function never checked and not in the record.
    const FunctionHealth* find(const PciAddress& a) const;
    // The published pair: ("unknown", "unchecked: not read yet") before the first check.
    Health health(const PciAddress& a) const;
    std::string reason(const PciAddress& a) const;

    // A check's finding. True when the published state or reason changed (logged, one line
    // per state change). A reason whose count alone moved within kCountInterval of the last
    // publication waits for flush().
    bool update(const PciAddress& a, FunctionHealth next, Clock::time_point now);
    // When the next held count is due.
    std::optional<Clock::time_point> due() const;
    // The held counts due by `now`, applied: their functions.
    std::set<PciAddress> flush(Clock::time_point now);
    // Functions gone from the host, or no longer watched.
    void forget(const PciAddress& a);

private:
    struct Entry {
        FunctionHealth now;
        std::optional<std::string> held;  // a newer reason, count alone changed
        Clock::time_point published{};
    };
    const HostFs& fs_;
    std::string dir_;
    std::map<PciAddress, Entry> fns_;
    std::set<PciAddress> held_;  // entries with a held count: due() and flush() walk these
    bool dirty_ = false;
};

// One line of the record and back (exposed for the tests): "ADDR STATE BC BN BF SC SN SF
// REASON", totals as "-" when unknown.
std::string health_record_line(const PciAddress& a, const FunctionHealth& h);
std::optional<std::pair<PciAddress, FunctionHealth>> parse_health_record_line(std::string_view l);

}  // namespace vfiod
