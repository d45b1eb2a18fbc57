// vfioctl status: the daemon's inventory over D-Bus, or with --offline the host read directly.
#include <cstdio>

#include "commands.hpp"
#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "dbus_client.hpp"
#include "host_plan.hpp"
#include "text.hpp"

namespace vfiod::cli {

namespace {

using client::DaemonView;

// "health" and, with `h`'s reason, "health_reason" as JSON: null where vfiod publishes no
// Health (an older vfiod).
void health_json(JsonWriter& w, const client::Health& h, bool with_reason = true) {
    auto member = [&](const char* key, const std::string& value) {
        w.key(key);
        if (h.state.empty())
            w.null();
        else
            w.value(value);
    };
    member("health", h.state);
    if (with_reason)
        member("health_reason", h.reason);
}

// DESIGN §13's members of the status shape: "health" and "health_reason" of each function and
// mdev, "health" of each group; left out offline, where no health is known.
JsonExtras health_members(const client::DaemonGroup& g) {
    JsonExtras x;
    x.device = [&g](JsonWriter& w, const PlannedDevice& d) {
        auto it = g.device_health.find(d.address);
        health_json(w, it == g.device_health.end() ? client::Health{} : it->second);
    };
    x.object = [&g](JsonWriter& w) { health_json(w, {g.health, ""}, false); };
    return x;
}

JsonExtras health_members(const client::Health& h) {
    JsonExtras x;
    x.object = [h](JsonWriter& w) { health_json(w, h); };
    return x;
}

// " failed (aer-fatal: recovery failed)" for a health an operator should look at, else "".
std::string troubled(const client::Health& h) {
    if (!client::health_troubled(h.state))
        return "";
    return " " + printable(h.state) + (h.reason.empty() ? "" : " (" + printable(h.reason) + ")");
}

// One group as render_group() has it, its heading with the group's health, and a line for
// each function whose health is degraded or failed.
void print_group(const client::DaemonGroup& g) {
    std::string state = g.state;
    if (client::health_troubled(g.health))
        state += ", health " + g.health;
    std::printf("\n%s", render_group(g.plan, false, state).c_str());
    for (const auto& d : g.plan.devices)
        if (auto h = g.device_health.find(d.address); h != g.device_health.end())
            if (std::string t = troubled(h->second); !t.empty())
                std::printf("  health of %s:%s\n", d.address.str().c_str(), t.c_str());
}

// One mdev's lines: what it is, its state, and what a consumer or an operator needs of it.
void print_mdev(const client::DaemonMdev& m) {
    const MdevPlan& p = m.plan;
    std::printf("\nmdev %s on %s, type %s", p.uuid.c_str(), printable(p.parent).c_str(),
                printable(p.type.empty() ? "?" : p.type).c_str());
    if (!p.type_name.empty() && p.type_name != p.type)
        std::printf(" (%s)", printable(p.type_name).c_str());
    std::printf(": %s", m.state.c_str());
    if (p.reason != Reason::None)
        std::printf(" %s", to_string(p.reason));
    for (const auto& d : p.details)  // a newer daemon's reason, as it came
        std::printf(" %s", printable(d).c_str());
    std::printf("\n");
    if (!m.vfio_path.empty())
        std::printf("  %s%s%s\n", m.vfio_path.c_str(), p.resource_name.empty() ? "" : ", ",
                    printable(p.resource_name).c_str());
    for (const auto& b : p.blockers)
        std::printf("  held by %s\n", printable(b).c_str());
    if (std::string t = troubled(m.health); !t.empty())
        std::printf("  health of its parent:%s\n", t.c_str());
}

// scope: what the offline reading checked of the host's use (host_use_scope); null for the daemon's.
int print(const DaemonView& view, bool json, const char* scope = nullptr) {
    const bool health = scope == nullptr;  // only vfiod knows it
    if (json) {
        JsonWriter w;
        w.begin_object();
        w.key("iommu").value(view.iommu);
        w.key("groups").begin_array();
        for (const auto& g : view.groups)
            write_group_json(w, g.plan, g.state, health ? health_members(g) : JsonExtras{});
        w.end_array();
        // DESIGN §11: only where PFs are published (offline: [[sriov]] entries configured), so
        // that other hosts' output stays byte for byte what it was.
        if (view.pfs) {
            w.key("pfs").begin_array();
            for (const auto& pf : *view.pfs)
                write_pf_json(w, pf.plan, pf.state);
            w.end_array();
        }
        if (view.mdevs) {  // DESIGN §12: likewise, only where [[mdev]] entries are
            w.key("mdevs").begin_array();
            for (const auto& m : *view.mdevs)
                write_mdev_json(w, m.plan, m.state,
                                health ? health_members(m.health) : JsonExtras{});
            w.end_array();
        }
        w.end_object();
        std::fputs(w.str().c_str(), stdout);
        return kExitOk;
    }
    if (!view.version.empty())
        std::printf("vfiod %s, mode %s, IOMMU %s\n", view.version.c_str(), view.mode.c_str(),
                    view.iommu ? "enabled" : "DISABLED");
    else
        std::printf("offline view (no daemon asked), IOMMU %s\n%s\n",
                    view.iommu ? "enabled" : "DISABLED", scope ? scope : "");
    if (view.groups.empty())
        std::printf("\nNo IOMMU group holds an allowlisted device.\n");
    for (const auto& g : view.groups)
        print_group(g);
    if (view.pfs)  // the counts now and wanted, under the PF's state
        for (const auto& pf : *view.pfs)
            std::printf("\n%s", render_pf(pf.plan, false, pf.state).c_str());
    if (view.mdevs)
        for (const auto& m : *view.mdevs)
            print_mdev(m);
    return kExitOk;
}

int offline(const Args& args) {
    std::optional<Config> config = checked_config(args, "no status was read");
    if (!config)
        return kExitUsage;
    KernelHostFs fs(args.root);
    const Plan plan = plan_host(fs, *config).plan;
    DaemonView view;
    view.iommu = plan.iommu;
    for (const auto& g : plan.groups) {  // what vfiod would publish; no health offline
        view.groups.emplace_back().plan = g;
        view.groups.back().state = to_string(planned_state(g.action));
    }
    if (plan.pfs) {
        view.pfs.emplace();
        for (const auto& pf : *plan.pfs) {
            PfState s = planned_state(pf.action);
            view.pfs->push_back({pf, to_string(s), s});
        }
    }
    if (plan.mdevs) {  // what vfiod would publish, in the plan's order
        view.mdevs.emplace();
        for (const auto& m : *plan.mdevs) {
            MdevState s = planned_state(m.action, m.reason);
            view.mdevs->push_back({m, to_string(s), "", -1, s, {}});
        }
    }
    return print(view, args.json, host_use_scope(fs));
}

}  // namespace

int run_status(const Args& args) {
    if (args.offline)
        return offline(args);
    DaemonView view;
    client::ClientResult r = client::fetch_view(&view);
    if (!r.ok()) {
        std::fprintf(stderr, "vfioctl: %s\n", r.message.c_str());
        return exit_code(r);
    }
    return print(view, args.json);
}

}  // namespace vfiod::cli
