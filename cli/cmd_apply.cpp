// vfioctl apply: executes the plan once without the daemon, through the same planner and
// executor (journal included), and reports each group's outcome.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <set>

#include "commands.hpp"
#include "core/json.hpp"
#include "core/plan_json.hpp"
#include "core/pci_paths.hpp"
#include "dbus_client.hpp"
#include "exec/executor.hpp"
#include "exec/journal.hpp"
#include "io/claims.hpp"
#include "host_plan.hpp"
#include "text.hpp"

extern char** environ;

namespace vfiod::cli {

namespace {

// The unit pulls vfio-pci in (Wants=modprobe@vfio_pci.service); without the daemon, apply loads
// the target drivers itself, only on the live host and only those a bind needs.
void load_missing_drivers(const HostFs& fs, const Plan& plan) {
    std::set<std::string> missing;
    for (const auto& g : plan.groups)
        if (g.action == Action::Bind)
            for (const auto& d : g.devices)
                if (d.target && !d.writes.empty() &&
                    !fs.exists(pci_paths::driver(*d.target)))
                    missing.insert(*d.target);
    for (const auto& driver : missing) {
        std::fprintf(stderr, "vfioctl: loading %s: modprobe %s\n", driver.c_str(), driver.c_str());
        const char* argv[] = {"modprobe", driver.c_str(), nullptr};
        pid_t pid;
        if (posix_spawnp(&pid, "modprobe", nullptr, nullptr, const_cast<char* const*>(argv),
                         environ) != 0) {
            std::fprintf(stderr, "vfioctl: warning: cannot run modprobe\n");
            continue;
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            std::fprintf(stderr, "vfioctl: warning: modprobe %s failed\n", driver.c_str());
    }
}

struct Result {
    const GroupPlan* plan;  // null for a reconcile report
    GroupOutcome outcome;
};

void write_json(const std::vector<Result>& results) {
    JsonWriter j;
    j.begin_object().key("groups").begin_array();
    for (const auto& r : results) {
        const GroupOutcome& o = r.outcome;
        j.begin_object();
        write_group_head(j, o.group, "state", to_string(o.state), o.reason, o.blockers);
        j.key("message").value(o.message);
        j.end_object();
    }
    j.end_array().end_object();
    std::fputs(j.str().c_str(), stdout);
}

// Why apply may not run on the live host (an exit status, after saying so), or nullopt.
std::optional<int> live_host_refusal(const Args& args) {
    if (args.root != "/")
        return std::nullopt;
    if (::geteuid() != 0) {
        std::fprintf(stderr, "vfioctl: apply rebinds drivers on this host and must run as root "
                             "(to try it on a test tree, use --root DIR)\n");
        return kExitDenied;
    }
    // Two writers on one group would race each other's journal and verification.
    if (client::daemon_running()) {
        std::fprintf(stderr, "vfioctl: vfiod is running and manages these groups: use 'vfioctl "
                             "bind ADDR' (or 'systemctl stop vfiod' first); nothing was done\n");
        return kExitFailed;
    }
    return std::nullopt;
}

void write_text(const std::vector<Result>& results, bool nothing_planned) {
    for (const auto& r : results) {
        const GroupOutcome& o = r.outcome;
        if (r.plan) {
            std::printf("%s", render_group(*r.plan, false, to_string(o.state)).c_str());
        } else {
            std::printf("journal: group %s: %s\n", o.group ? std::to_string(*o.group).c_str() : "?",
                        to_string(o.state));
        }
        if (o.reason != Reason::None && o.state != Outcome::Refused)
            std::printf("  reason: %s\n", to_string(o.reason));
        // A refused group's plan already said why; a refused journal entry says it here.
        if (!o.message.empty() && (o.state != Outcome::Refused || !r.plan))
            std::printf("  %s\n", o.message.c_str());
        if (o.state == Outcome::Stuck)
            std::printf("  A kernel write is blocked; see README \"When a group is stuck\".\n");
        std::printf("\n");
    }
    if (nothing_planned)
        std::printf("Nothing to do: no PCI function on this host matches the allowlist.\n");
}

}  // namespace

int run_apply(const Args& args) {
    if (auto refused = live_host_refusal(args))
        return *refused;
    std::optional<Config> checked = checked_config(args, "nothing was done");
    if (!checked)
        return kExitUsage;
    const Config& config = *checked;
    if (config.mode == Mode::Observe) {
        std::fprintf(stderr, "vfioctl: the configuration sets mode = \"observe\": nothing is "
                             "written (see vfioctl plan)\n");
        return kExitFailed;
    }

    KernelHostFs fs(args.root);
    Journal journal(fs);
    Executor exec(fs, &journal, std::chrono::seconds(config.write_timeout));
    std::vector<Result> results;
    // Finish what a crashed daemon or apply left half done before planning anew, where the host
    // and the config's rules still agree with the journal (the daemon's very check).
    for (auto& o : exec.reconcile(config))
        results.push_back({nullptr, std::move(o)});

    if (fs.live()) {
        Snapshot before = read_snapshot(fs);
        load_missing_drivers(fs, make_plan(before.topology, before.use, config));
    }
    HostPlan hp = plan_host(fs, config);
    const Plan& plan = hp.plan;

    bool all_bound = true;
    std::vector<GroupPlan> decided(plan.groups.begin(), plan.groups.end());  // results point here
    for (auto& g : decided) {
        // A group the plan would bind, refused now for a claim, did not end bound: exit 1.
        const bool planned = g.action != Action::Refuse;
        // Exclusive claims only now, just before writing: the probe is itself a claim.
        refuse_if_claimed(fs, &g);
        // Automatic: an operator's Release stays until an explicit Bind (DESIGN §6).
        GroupOutcome o = exec.apply(g, Trigger::Automatic);
        if (planned && o.state != Outcome::Bound && o.state != Outcome::Released)
            all_bound = false;
        results.push_back({&g, std::move(o)});
    }

    if (args.json)
        write_json(results);
    else
        write_text(results, plan.groups.empty());
    return all_bound ? kExitOk : kExitFailed;
}

}  // namespace vfiod::cli
