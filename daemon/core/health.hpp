// Device health (DESIGN §13), pure: the states, what one check of a function read, and the rule
// that turns the last state, the recovery uevents since and that reading into the next state.
// Reading the files is io's (service/health_ops.cpp reads them on a worker); keeping the states
// and their record in /run/vfiod is the service's (service/health_tracker).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/pci_address.hpp"

namespace vfiod {

// Worse is greater: worst() is std::max.
enum class Health { Ok, Unknown, Degraded, Failed };

const char* to_string(Health h);
std::optional<Health> health_from_string(std::string_view s);
inline Health worst(Health a, Health b) { return a < b ? b : a; }

// The TOTAL_ERR_* lines of a function's aer_dev_correctable, aer_dev_nonfatal, aer_dev_fatal:
// counts since the kernel enumerated it.
struct AerTotals {
    uint64_t correctable = 0;
    uint64_t nonfatal = 0;
    uint64_t fatal = 0;

    bool operator==(const AerTotals&) const = default;
    // Any count above `base`'s.
    bool above(const AerTotals& base) const {
        return correctable > base.correctable || nonfatal > base.nonfatal || fatal > base.fatal;
    }
    // Any count below `base`'s: the function was enumerated again (a hot-plug, a reboot's
    // leftover record), so `base` belongs to another life of it.
    bool below(const AerTotals& base) const {
        return correctable < base.correctable || nonfatal < base.nonfatal || fatal < base.fatal;
    }
};

// The count of the line `TOTAL_ERR_<kind> N` in an aer_dev_* file's text; nullopt when there is
// no such line or its number is not one.
std::optional<uint64_t> aer_total(std::string_view text, std::string_view kind);

// The recovery uevents (ACTION=change, ERROR_EVENT=…) a function received since its last check.
// BEGIN_RECOVERY decides nothing: the kernel sends it before it knows the end.
struct Recovery {
    bool failed = false;     // FAILED_RECOVERY
    bool recovered = false;  // SUCCESSFUL_RECOVERY
    void merge(const Recovery& o) {
        failed = failed || o.failed;
        recovered = recovered || o.recovered;
    }
};

// What a uevent's ERROR_EVENT value says (null: the uevent has none; an unknown value: nothing).
Recovery recovery_of(const char* error_event);

// One check's reading of a function, made on a worker.
struct HealthReading {
    std::optional<AerTotals> totals;  // nullopt: no aer_dev_* files, or one unreadable
    std::string unreadable;           // why totals is nullopt when the files are there
    bool gone = false;                // its config space read all ones
    std::string quarantine;           // after a release: why no driver has it ("" none)
};

// Why a check runs: it decides whether the check may clear a state. Stronger is greater: two
// triggers waiting for one check make it the stronger kind.
enum class HealthCheck {
    Event,   // a udev event named the function (or a recovery uevent reached it), a release
    Start,   // the daemon starts: the record of run/vfiod stands
    Reload,  // clears failed/degraded when the function reads fine with no new errors
    Clear,   // an operator's Bind of the group: clears unless the function reads as broken
};

// What vfiod keeps of a function: its state and why, and the totals it measures against.
struct FunctionHealth {
    Health health = Health::Unknown;
    std::string reason;                 // "" for ok; "<code>: <text>" otherwise
    std::optional<AerTotals> baseline;  // the totals first read, or read when last cleared
    std::optional<AerTotals> seen;      // the totals at the last check

    bool operator==(const FunctionHealth&) const = default;
};

// The reason's code: the text before ": " (the whole reason when it has none).
std::string_view health_code(std::string_view reason);

// The next state of a function from its last one (`was`, nullopt for one never checked), the
// recovery uevents since and this check's reading. failed and degraded stand until a Clear,
// or a Reload that reads the function fine (not gone, no count above the last check's); unknown
// and ok follow the reading each time.
FunctionHealth next_health(const std::optional<FunctionHealth>& was, const Recovery& recovery,
                           const HealthReading& reading, HealthCheck why);

}  // namespace vfiod
