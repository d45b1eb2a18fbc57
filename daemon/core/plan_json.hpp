// The plan as DESIGN §5 JSON: `vfioctl plan --json`, D-Bus Plan(), and (with a state in place of
// the action) `vfioctl status --json`.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "json.hpp"
#include "plan.hpp"

namespace vfiod {

std::string plan_to_json(const Plan& plan, bool pretty = true);

// Members a caller adds to the objects written here (vfioctl status: DESIGN §13's health, which
// only the daemon knows): `device` after each function's own members, `object` after the
// group's or the mdev's.
struct JsonExtras {
    std::function<void(JsonWriter&, const PlannedDevice&)> device;
    std::function<void(JsonWriter&)> object;
};

// One group object. With `state`, it is written as "state" in place of "action" and "writes" is
// left out (the status shape).
void write_group_json(JsonWriter& w, const GroupPlan& g,
                      const std::optional<std::string>& state = std::nullopt,
                      const JsonExtras& extras = {});

// The members every group object of DESIGN §5 opens with, in this order: "group", the decision
// under `status_key` ("action" in a plan, "state" in status and apply output), "reason" and
// "blockers". The plan, status and `vfioctl apply --json` shapes all start here.
void write_group_head(JsonWriter& w, const std::optional<unsigned>& group,
                      std::string_view status_key, std::string_view status, Reason reason,
                      const std::vector<PciAddress>& blockers);

// The "group" and "reason" members every group-shaped object carries (plan, status, apply,
// doctor): null for a function without an IOMMU group, null for Reason::None.
void write_group_key(JsonWriter& w, const std::optional<unsigned>& group);
void write_reason_key(JsonWriter& w, Reason r);

// One PF object of DESIGN §11's "pfs". With `state`, it is written as "state" in place of
// "action" and "writes" is left out (the status shape), as for groups.
void write_pf_json(JsonWriter& w, const PfPlan& pf,
                   const std::optional<std::string>& state = std::nullopt);

// One mdev object of DESIGN §12's "mdevs"; with `state`, the status shape as for groups.
void write_mdev_json(JsonWriter& w, const MdevPlan& m, const std::optional<std::string>& state,
                     const JsonExtras& extras = {});

std::string hex4(uint16_t v);    // "10de"
std::string hex6(uint32_t v);    // "030200"

}  // namespace vfiod
