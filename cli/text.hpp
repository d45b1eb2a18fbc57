// Human-readable rendering shared by the verbs: PCI class names, the per-group view and the
// per-PF view.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/plan.hpp"

namespace vfiod::cli {

// "VGA controller", "NVMe controller", … from the 24-bit class code.
std::string class_name(uint32_t class_code);

// One group as an operator reads it: heading with the decision (or `state`), one line per
// function (address, ids, class, driver -> target, role, resource), why it was refused, and
// with `with_writes` the exact writes.
std::string render_group(const GroupPlan& g, bool with_writes,
                         const std::optional<std::string>& state = std::nullopt);

// One SR-IOV PF of an [[sriov]] entry the same way (DESIGN §11): heading with the decision (or
// `state`) and the counts (now, wanted, at most), why it was refused, and the writes.
std::string render_pf(const PfPlan& pf, bool with_writes,
                      const std::optional<std::string>& state = std::nullopt);

}  // namespace vfiod::cli
