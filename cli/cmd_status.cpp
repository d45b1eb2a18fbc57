// vfioctl status: the daemon's inventory over D-Bus, or with --offline the host read directly.
#include <cstdio>

#include "commands.hpp"
#include "core/plan_json.hpp"
#include "dbus_client.hpp"
#include "host_plan.hpp"
#include "text.hpp"

namespace vfiod::cli {

namespace {

using client::DaemonView;

// scope: what the offline reading checked of the host's use (host_use_scope); null for the daemon's.
int print(const DaemonView& view, bool json, const char* scope = nullptr) {
    if (json) {
        JsonWriter w;
        w.begin_object();
        w.key("iommu").value(view.iommu);
        w.key("groups").begin_array();
        for (const auto& g : view.groups)
            write_group_json(w, g.plan, g.state);
        w.end_array();
        // DESIGN §11: only where PFs are published (offline: [[sriov]] entries configured), so
        // that other hosts' output stays byte for byte what it was.
        if (view.pfs) {
            w.key("pfs").begin_array();
            for (const auto& pf : *view.pfs)
                write_pf_json(w, pf.plan, pf.state);
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
        std::printf("\n%s", render_group(g.plan, false, g.state).c_str());
    if (view.pfs)  // the counts now and wanted, under the PF's state
        for (const auto& pf : *view.pfs)
            std::printf("\n%s", render_pf(pf.plan, false, pf.state).c_str());
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
    for (const auto& g : plan.groups)
        view.groups.push_back({g, to_string(planned_state(g.action)), {}, {}});  // what vfiod would publish
    if (plan.pfs) {
        view.pfs.emplace();
        for (const auto& pf : *plan.pfs) {
            PfState s = planned_state(pf.action);
            view.pfs->push_back({pf, to_string(s), s});
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
