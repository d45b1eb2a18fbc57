// vfioctl doctor: explain, per allowlisted function, [[sriov]] PF and [[mdev]] pair, whether it is
// usable for pass-through now, what stands in the way, and what KubeVirt's device manager will
// count; with --kubevirt-cr, whether the KubeVirt CR lets vfiod's mdevs be. Reads only; the
// diagnosis is doctor.cpp's, the printing is here.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "core/json.hpp"
#include "core/plan_json.hpp"
#include "core/strings.hpp"
#include "dbus_client.hpp"
#include "doctor.hpp"
#include "host_plan.hpp"
#include "initramfs.hpp"

namespace vfiod::cli {

namespace {

void optional_value(JsonWriter& w, bool present, const std::string& v) {
    if (present)
        w.value(v);
    else
        w.null();
}

// DESIGN §13's health as vfiod publishes it, and what to do; null where it was not read.
void write_health_json(JsonWriter& w, const client::Health& h, const std::string& fix) {
    w.key("health");
    optional_value(w, !h.state.empty(), h.state);
    w.key("health_reason");
    optional_value(w, !h.state.empty(), h.reason);
    w.key("health_fix");
    optional_value(w, !fix.empty(), fix);
}

void write_pfs_json(JsonWriter& w, const std::vector<PfFinding>& pfs) {
    w.key("pfs").begin_array();
    for (const auto& p : pfs) {
        w.begin_object();
        w.key("address").value(p.pf->address.str());
        w.key("driver");
        optional_value(w, p.fn && !p.fn->driver.empty(), p.fn ? p.fn->driver : "");
        w.key("num_vfs").value(static_cast<int64_t>(p.pf->num_vfs));
        w.key("wanted_vfs").value(static_cast<int64_t>(p.pf->wanted_vfs));
        w.key("action").value(to_string(p.pf->action));
        write_reason_key(w, p.pf->reason);
        w.key("fix");
        optional_value(w, !p.fix.empty(), p.fix);
        w.end_object();
    }
    w.end_array();
}

void write_mdevs_json(JsonWriter& w, const std::vector<MdevFinding>& mdevs) {
    w.key("mdevs").begin_array();
    for (const auto& m : mdevs) {
        w.begin_object();
        w.key("parent").value(m.parent);
        w.key("type").value(m.type);
        w.key("type_name").value(m.type_name);
        w.key("resource_name");
        optional_value(w, !m.resource_name.empty(), m.resource_name);
        w.key("wanted").value(static_cast<int64_t>(m.wanted));
        w.key("ready").value(static_cast<int64_t>(m.ready));
        w.key("to_create").value(static_cast<int64_t>(m.to_create));
        write_reason_key(w, m.reason);
        w.key("fix");
        optional_value(w, !m.fix.empty(), m.fix);
        write_health_json(w, m.health, m.health_fix);
        w.end_object();
    }
    w.end_array();
    w.key("mdev_note").value(kKubevirtMdevNote);
}

void print_json(const Diagnosis& dx) {
    JsonWriter w;
    w.begin_object();
    w.key("healthy").value(dx.healthy);
    w.key("checks").begin_array();
    for (const auto& c : dx.checks)
        w.begin_object().key("name").value(c.name).key("ok").value(c.ok).key("detail").value(
            c.detail).end_object();
    w.end_array();
    w.key("devices").begin_array();
    for (const auto& f : dx.findings) {
        w.begin_object();
        w.key("address").value(f.d->address.str());
        write_group_key(w, f.g->group);
        w.key("driver");
        optional_value(w, !f.d->driver.empty(), f.d->driver);
        w.key("action").value(to_string(f.g->action));
        write_reason_key(w, f.g->reason);
        w.key("resource_name");
        optional_value(w, f.d->resource_name.has_value(), f.d->resource_name.value_or(""));
        w.key("kubevirt_counts").value(f.fn && kubevirt_counts(*f.fn));
        write_health_json(w, f.health, f.health_fix);
        w.end_object();
    }
    w.end_array();
    if (dx.pfs)  // only with [[sriov]] entries: other hosts' output is as it was
        write_pfs_json(w, *dx.pfs);
    if (dx.mdevs)  // only with [[mdev]] entries, likewise
        write_mdevs_json(w, *dx.mdevs);
    w.end_object();
    std::fputs(w.str().c_str(), stdout);
}

void print_decision(const Finding& f) {
    switch (f.g->action) {
    case Action::Bound:
        std::printf("  ready: the whole group is on its target drivers\n");
        break;
    case Action::Bind:
        std::printf("  vfiod will bind the group (%zu writes; vfioctl plan shows them)\n",
                    f.g->writes().size());
        break;
    case Action::Refuse:
        std::printf("  vfiod refuses the group: %s\n", to_string(f.g->reason));
        for (const auto& why : f.g->details)
            std::printf("    %s\n", why.c_str());
        if (auto a = advice(f.g->reason, f.d->address); !a.empty())
            std::printf("  fix: %s\n", a.c_str());
        break;
    case Action::Release:
    case Action::Released:
        break;  // release plans come from plan_release(), never from make_plan()
    }
}

// A health as vfiod publishes it (DESIGN §13; `whose`: "" for the device's own, "parent " for
// an mdev pair's), a failed group-mate's, and what to do: a fix for a failure, else a note.
void print_health(const char* whose, const client::Health& h,
                  const std::optional<PciAddress>& failed_mate, const std::string& fix) {
    if (!h.state.empty())
        std::printf("  %shealth: %s%s\n", whose, printable(h.state).c_str(),
                    h.reason.empty() ? "" : (" (" + printable(h.reason) + ")").c_str());
    if (failed_mate)
        std::printf("  health: %s of its IOMMU group failed, so the kubelet plugins list this "
                    "function Unhealthy too\n", failed_mate->str().c_str());
    if (!fix.empty())
        std::printf("  %s: %s\n", client::health_failed(h.state) || failed_mate ? "fix" : "note",
                    fix.c_str());
}

void print_finding(const Finding& f) {
    const PlannedDevice& d = *f.d;
    std::printf("\n%s  %s  %s\n", d.address.str().c_str(),
                d.resource_name.value_or("(no resource_name)").c_str(),
                f.g->group ? ("IOMMU group " + std::to_string(*f.g->group)).c_str()
                           : "no IOMMU group");
    std::printf("  driver: %s; target: %s\n",
                d.driver.empty() ? "(none)" : printable(d.driver).c_str(),
                d.target.value_or("-").c_str());
    print_decision(f);
    print_health("", f.health, f.failed_mate, f.health_fix);
    if (f.fn && kubevirt_counts(*f.fn))
        std::printf("  KubeVirt: counted (device ID = IOMMU group %u)\n", *f.fn->iommu_group);
    else if (d.target && *d.target != "vfio-pci")
        std::printf("  KubeVirt: NOT counted: its device manager only counts functions bound "
                    "to vfio-pci itself, not to the variant driver %s\n",
                    d.target->c_str());
    else
        std::printf("  KubeVirt: NOT counted now (driver is %s; virt-handler logs \"Skipping "
                    "non-vfio-pci device\")%s\n",
                    d.driver.empty() ? "none" : printable(d.driver).c_str(),
                    f.g->action == Action::Bind ? "; counted once vfiod has bound it" : "");
    if (!d.resource_name)
        std::printf("  note: no resource_name: KubeVirt's pciHostDevices needs one to expose "
                    "it\n");
}

// One PF: its counts, what vfiod does about them, and what stands in the way.
void print_pf(const PfFinding& p) {
    const PfPlan& pf = *p.pf;
    std::printf("\nSR-IOV PF %s  driver: %s\n", pf.address.str().c_str(),
                p.fn && !p.fn->driver.empty() ? printable(p.fn->driver).c_str() : "(none)");
    std::printf("  VFs: %u now, %u wanted, %u at most (sriov_totalvfs)\n", pf.num_vfs,
                pf.wanted_vfs, pf.total_vfs);
    switch (pf.action) {
    case PfAction::Ready:
        std::printf("  ready: it has the VFs its [[sriov]] entry wants\n");
        break;
    case PfAction::Create:
        if (p.driverless)
            std::printf("  vfiod cannot make its VFs yet: the PF has no driver, so "
                        "sriov_numvfs answers ENOENT (the daemon shows it failed)\n");
        else
            std::printf("  vfiod will set its VF count (%zu writes; vfioctl plan shows them)\n",
                        pf.writes.size());
        break;
    case PfAction::Refuse:
        std::printf("  vfiod refuses to change its VF count: %s\n", to_string(pf.reason));
        for (const auto& why : pf.details)
            std::printf("    %s\n", printable(why).c_str());
        break;
    }
    if (!p.fix.empty())
        std::printf("  fix: %s\n", p.fix.c_str());
}

// One (parent, type) pair: its counts, and what stands in the way of the rest.
void print_mdev(const MdevFinding& m) {
    std::printf("\nmdev parent %s  type %s", printable(m.parent).c_str(),
                printable(m.type).c_str());
    if (m.type_name != m.type)
        std::printf(" (%s)", printable(m.type_name).c_str());
    std::printf("  %s\n", m.resource_name.empty() ? "(no entry)" : m.resource_name.c_str());
    std::printf("  mdevs: %u wanted, %u ready, %u to create\n", m.wanted, m.ready, m.to_create);
    if (m.ready == m.wanted && m.reason == Reason::None)
        std::printf("  ready: it has the mdevs its [[mdev]] entry wants\n");
    else if (m.to_create > 0)
        std::printf("  vfiod will create %u (vfioctl plan shows them)\n", m.to_create);
    if (m.reason != Reason::None) {
        std::printf("  %s: %s\n",
                    m.reason == Reason::InUseMdev ? "vfiod cannot remove its own mdev"
                                                  : "vfiod refuses the pair",
                    to_string(m.reason));
        for (const auto& why : m.details)
            std::printf("    %s\n", printable(why, 4096).c_str());
    }
    if (!m.fix.empty())  // it names the parent's types, as sysfs spells them
        std::printf("  fix: %s\n", printable(m.fix, 4096).c_str());
    print_health("parent ", m.health, std::nullopt, m.health_fix);
}

// vfiod's health of each function (DESIGN §13): only the daemon watches it, so it is read from
// the daemon on the live host, never for a --root tree (another host's, where the scope line
// already says what a tree cannot show). A note when the live host's was not read, else "".
std::string read_health(const Args& args, DaemonHealth* health) {
    if (args.root != "/")
        return "";
    client::DaemonView view;
    client::ClientResult r = client::fetch_view(&view);
    if (r.code == client::ClientResult::Code::Unavailable)
        return "device health not read: vfiod is not running";
    if (!r.ok())
        return "device health not read: " + r.message;
    for (const auto& g : view.groups)
        for (const auto& [address, h] : g.device_health)
            if (!h.state.empty())
                health->functions.emplace(address, h);
    for (const auto& m : view.mdevs.value_or(std::vector<client::DaemonMdev>{}))
        if (!m.health.state.empty())
            health->mdev_parents.emplace(m.plan.parent, m.health);
    const bool published = !health->functions.empty() || !health->mdev_parents.empty();
    return !published && (!view.groups.empty() || view.mdevs)
               ? "device health not read: this vfiod does not publish it"
               : "";
}

void print_text(const Diagnosis& dx, bool allowlist, const char* scope, const std::string& note) {
    for (const auto& c : dx.checks) {
        std::string detail = c.detail;  // a line each, under the first
        for (size_t nl = 0; (nl = detail.find('\n', nl)) != std::string::npos; nl += 19)
            detail.insert(nl + 1, 18, ' ');
        std::printf("%s %-10s %s\n", c.ok ? "[ok]  " : "[FAIL]", c.name.c_str(), detail.c_str());
    }
    std::printf("%s\n", scope);
    if (!note.empty())
        std::printf("%s\n", note.c_str());
    if (dx.findings.empty() && allowlist)
        std::printf("\nNo PCI function on this host matches the allowlist.\n");
    for (const auto& f : dx.findings)
        print_finding(f);
    for (const auto& p : dx.pfs.value_or(std::vector<PfFinding>{}))
        print_pf(p);
    for (const auto& m : dx.mdevs.value_or(std::vector<MdevFinding>{}))
        print_mdev(m);
    if (dx.mdevs)
        std::printf("\nnote: %s\n", kKubevirtMdevNote);
    if (!dx.per_resource.empty()) {
        std::printf("\nWhat KubeVirt will count (node allocatable):\n");
        for (const auto& [res, c] : dx.per_resource)
            std::printf("  %-40s %d now, %d once vfiod has bound what it can\n", res.c_str(),
                        c.first, c.second);
    }
    std::printf("\n%s\n", dx.healthy ? "Healthy: every allowlisted device is ready for pass-through."
                                     : "Not every allowlisted device is ready (see above).");
}

}  // namespace

int run_doctor(const Args& args) {
    std::optional<Config> config = checked_config(args, "fix it first (vfioctl check-config)");
    if (!config)
        return kExitUsage;
    // The CR first: bad input is an error before the host is read.
    std::optional<KubevirtMdevConfig> cr;
    if (args.kubevirt_cr) {
        std::string error;
        if (!(cr = read_kubevirt_cr(*args.kubevirt_cr, &error))) {
            std::fprintf(stderr, "vfioctl: %s\n", printable(error, 4096).c_str());
            return kExitUsage;
        }
    }
    KernelHostFs fs(args.root);
    HostPlan hp = plan_host(fs, *config);
    DaemonHealth health;
    const std::string health_note = read_health(args, &health);
    Diagnosis dx =
        diagnose(fs, hp.snapshot.topology, *config, hp.plan, hp.snapshot.mdevs, health);
    if (cr) {
        dx.checks.push_back(kubevirt_cr_check(*cr, dx.mdevs));
        dx.healthy = dx.healthy && dx.checks.back().ok;
    }
    // DESIGN §14: an initramfs out of date with the configuration binds the wrong set at boot.
    std::vector<std::string> warnings;
    InitramfsSummary early = summarize_initramfs(fs, *config, hp.plan, &warnings);
    print_lines(warnings, "warning: ");
    if (early.shown) {
        std::string detail;
        for (const auto& line : early.lines)
            detail += (detail.empty() ? "" : "\n") + line;
        dx.checks.push_back({"initramfs", early.ok, detail.empty() ? "no record" : detail});
        dx.healthy = dx.healthy && early.ok;
    }
    if (args.json)
        print_json(dx);
    else
        print_text(dx, !config->devices.empty(), host_use_scope(fs), health_note);
    return dx.healthy ? kExitOk : kExitFailed;
}

}  // namespace vfiod::cli
