#include "plan_json.hpp"

#include <cstdio>

namespace vfiod {

std::string hex4(uint16_t v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04x", v);
    return buf;
}

std::string hex6(uint32_t v) {
    char buf[12];
    std::snprintf(buf, sizeof buf, "%06x", v & 0xffffff);
    return buf;
}

namespace {

void optional_string(JsonWriter& w, const std::optional<std::string>& s) {
    if (s)
        w.value(*s);
    else
        w.null();
}

void write_writes(JsonWriter& w, const std::vector<Write>& writes) {
    w.key("writes").begin_array();
    for (const auto& wr : writes) {
        w.begin_object();
        w.key("path").value(wr.path());
        w.key("value").value(wr.value);
        w.end_object();
    }
    w.end_array();
}

}  // namespace

void write_group_key(JsonWriter& w, const std::optional<unsigned>& group) {
    w.key("group");
    if (group)
        w.value(static_cast<int64_t>(*group));
    else
        w.null();
}

void write_reason_key(JsonWriter& w, Reason r) {
    w.key("reason");
    if (r == Reason::None)
        w.null();
    else
        w.value(to_string(r));
}

void write_group_head(JsonWriter& w, const std::optional<unsigned>& group,
                      std::string_view status_key, std::string_view status, Reason reason,
                      const std::vector<PciAddress>& blockers) {
    write_group_key(w, group);
    w.key(status_key).value(status);
    write_reason_key(w, reason);
    w.key("blockers").begin_array();
    for (const auto& b : blockers)
        w.value(b.str());
    w.end_array();
}

void write_group_json(JsonWriter& w, const GroupPlan& g, const std::optional<std::string>& state,
                      const JsonExtras& extras) {
    w.begin_object();
    if (state)
        write_group_head(w, g.group, "state", *state, g.reason, g.blockers);
    else
        write_group_head(w, g.group, "action", to_string(g.action), g.reason, g.blockers);
    w.key("devices").begin_array();
    for (const auto& d : g.devices) {
        w.begin_object();
        w.key("address").value(d.address.str());
        w.key("vendor").value(hex4(d.vendor));
        w.key("device").value(hex4(d.device));
        w.key("class").value(hex6(d.class_code));
        w.key("driver");
        optional_string(w, d.driver.empty() ? std::nullopt : std::optional(d.driver));
        w.key("target");
        optional_string(w, d.target);
        w.key("role").value(to_string(d.role));
        w.key("resource_name");
        optional_string(w, d.resource_name);
        if (extras.device)
            extras.device(w, d);
        w.end_object();
    }
    w.end_array();
    if (!state)
        write_writes(w, g.writes());
    if (extras.object)
        extras.object(w);
    w.end_object();
}

void write_pf_json(JsonWriter& w, const PfPlan& pf, const std::optional<std::string>& state) {
    w.begin_object();
    w.key("address").value(pf.address.str());
    w.key("total_vfs").value(static_cast<int64_t>(pf.total_vfs));
    w.key("num_vfs").value(static_cast<int64_t>(pf.num_vfs));
    w.key("wanted_vfs").value(static_cast<int64_t>(pf.wanted_vfs));
    w.key(state ? "state" : "action").value(state ? std::string_view(*state) : to_string(pf.action));
    write_reason_key(w, pf.reason);
    w.key("blockers").begin_array();
    for (const auto& b : pf.blockers)
        w.value(b.str());
    w.end_array();
    if (!state)
        write_writes(w, pf.writes);
    w.end_object();
}

void write_mdev_json(JsonWriter& w, const MdevPlan& m, const std::optional<std::string>& state,
                     const JsonExtras& extras) {
    w.begin_object();
    w.key("uuid").value(m.uuid);
    w.key("parent").value(m.parent);
    w.key("type").value(m.type);
    w.key("type_name").value(m.type_name);
    w.key("resource_name");
    optional_string(w, m.resource_name.empty() ? std::nullopt : std::optional(m.resource_name));
    write_group_key(w, m.group);
    w.key(state ? "state" : "action")
        .value(state ? std::string_view(*state) : std::string_view(to_string(m.action)));
    write_reason_key(w, m.reason);
    w.key("blockers").begin_array();
    for (const auto& b : m.blockers)
        w.value(b);
    w.end_array();
    if (!state) {
        w.key("writes").begin_array();
        for (const auto& wr : m.writes()) {
            w.begin_object();
            w.key("path").value(wr.path);
            w.key("value").value(wr.value);
            w.end_object();
        }
        w.end_array();
    }
    if (extras.object)
        extras.object(w);
    w.end_object();
}

std::string plan_to_json(const Plan& plan, bool pretty) {
    JsonWriter w(pretty);
    w.begin_object();
    w.key("iommu").value(plan.iommu);
    w.key("groups").begin_array();
    for (const auto& g : plan.groups)
        write_group_json(w, g);
    w.end_array();
    if (plan.pfs) {
        w.key("pfs").begin_array();
        for (const auto& pf : *plan.pfs)
            write_pf_json(w, pf);
        w.end_array();
    }
    if (plan.mdevs) {
        w.key("mdevs").begin_array();
        for (const auto& m : *plan.mdevs)
            write_mdev_json(w, m, std::nullopt);
        w.end_array();
    }
    w.end_object();
    return w.str();
}

}  // namespace vfiod
