// How the executor's messages name a write and its result, shared by its group and PF halves
// (executor.cpp, executor_pf.cpp) so both read alike in logs. Text only: touches nothing.
#pragma once

#include <cstring>
#include <string>

#include "core/plan.hpp"
#include "core/strings.hpp"

namespace vfiod::write_text {

inline std::string error_text(int err) {
    return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

// A value as written: the bare newline that clears driver_override is shown escaped.
inline std::string shown(const std::string& value) {
    return value == "\n" ? "\\n" : printable(value);
}

inline std::string step_name(Write::Kind k) {
    switch (k) {
    case Write::Kind::Override: return "driver_override";
    case Write::Kind::Unbind: return "unbind";
    case Write::Kind::Probe: return "drivers_probe";
    case Write::Kind::SriovAutoprobe: return "sriov_drivers_autoprobe";
    case Write::Kind::SriovNumVfs: return "sriov_numvfs";
    }
    return "write";
}

// "<fn>: <step>: writing '<value>' to <path>: ", to which the caller adds what came of it.
inline std::string writing(const std::string& fn, const Write& w) {
    return fn + ": " + step_name(w.kind) + ": writing '" + shown(w.value) + "' to " + w.path() + ": ";
}

}  // namespace vfiod::write_text
