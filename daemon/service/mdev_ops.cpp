#include "service/mdev_ops.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "io/mdev_reader.hpp"
#include "io/proc_fds.hpp"
#include "io/vfio_use.hpp"

namespace vfiod {

std::optional<OpResult> MdevOp::prepare(ServiceParts& s) {
    plan_.clear();
    if (s.mdev_writer.stuck_names().count(parent_))
        return OpResult::error(OpResult::Code::Refused,
                               std::string(to_string(Reason::Stuck)) + ": " + parent_ +
                                   ": an earlier mdev write on it is still blocked");
    const HostFs& fs = s.host.view();  // never s.fs: a parent's write may be blocked
    MdevHost host = read_mdev_host(fs, nullptr);
    auto all = plan_mdevs(host, s.host.snapshot().topology, {}, s.host.config());
    // Who holds mdevs open matters only to the pair's removes: proc/*/fd is walked for those.
    if (std::ranges::any_of(all.value_or(std::vector<MdevPlan>{}), [&](const MdevPlan& p) {
            return p.parent == parent_ && p.type == type_ && p.action == MdevAction::Remove;
        })) {
        HostUse use;
        read_mdev_use(fs, host, scan_open_nodes(fs), &use);
        all = plan_mdevs(host, s.host.snapshot().topology, use, s.host.config());
    }
    bool writes = false;
    for (auto& p : all.value_or(std::vector<MdevPlan>{}))
        if (p.parent == parent_ && p.type == type_ && p.action != MdevAction::Foreign) {
            writes = writes || !p.writes().empty();
            plan_.push_back(std::move(p));
        }
    if (writes && mode_ == Mode::Enforce)
        return std::nullopt;
    for (const MdevPlan& p : plan_)
        if (p.action == MdevAction::Refuse) {
            std::string why = std::string(to_string(p.reason)) + ": " + p.uuid + ": " +
                              (p.details.empty() ? "" : p.details.front());
            spdlog::warn("mdevs {} on {}: refused: {}", type_, parent_, why);
            return OpResult::error(OpResult::Code::Refused, std::move(why));
        }
    return OpResult{};
}

std::set<std::string> MdevOp::fenced_mdevs() const {
    std::set<std::string> names{parent_};
    for (const MdevPlan& p : plan_)
        if (p.action == MdevAction::Remove)
            names.insert(p.uuid);
    return names;
}

void MdevOp::run(ServiceParts& s) { results_ = s.mdev_writer.apply(plan_); }

OpResult MdevOp::complete(ServiceParts&) {
    OpResult out;
    for (const MdevResult& r : results_) {
        const char* did = r.action == MdevAction::Create ? "created" : "removed";
        if (r.reason == Reason::None) {
            spdlog::info("mdev {} ({} on {}): {}", r.uuid, type_, parent_, did);
            continue;
        }
        spdlog::warn("mdev {} ({} on {}): not {}: {}: {}", r.uuid, type_, parent_, did,
                     to_string(r.reason), r.message);
        if (out.ok())
            out = OpResult::error(OpResult::Code::Failed, std::string(to_string(r.reason)) +
                                                              ": " + r.uuid + ": " + r.message);
    }
    return out;
}

}  // namespace vfiod
