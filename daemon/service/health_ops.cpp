#include "service/health_ops.hpp"

#include "io/health_reader.hpp"

namespace vfiod {

std::optional<OpResult> HealthOp::prepare(ServiceParts& s) {
    // A published group's every function; of another group (a PCI mdev parent's), the parents.
    const bool published = s.host.group_plan(group_) && s.store.status(group_);
    for (const auto& a : s.host.members({group_})) {
        // Being written, or a write stuck in the kernel holds it: a read could block too (the
        // next trigger reads it).
        if (s.host.fenced(a))
            continue;
        if (published || s.store.is_mdev_parent(a))
            functions_.push_back(a);
    }
    if (functions_.empty())
        return OpResult{};
    return std::nullopt;
}

void HealthOp::run(ServiceParts& s) {
    for (const auto& a : functions_) {
        auto rel = released_.find(a);
        readings_[a] = read_health(s.fs, a, rel == released_.end() ? nullptr : &rel->second);
    }
}

OpResult HealthOp::complete(ServiceParts& s) {
    const auto now = HealthTracker::Clock::now();
    for (const auto& [a, reading] : readings_) {
        const FunctionHealth* was = s.health.find(a);
        auto rec = recovery_.find(a);
        FunctionHealth next =
            next_health(was ? std::optional(*was) : std::nullopt,
                        rec == recovery_.end() ? Recovery{} : rec->second, reading, why_);
        if (s.health.update(a, std::move(next), now))
            s.store.health_changed(a);
    }
    if (s.store.mode() == Mode::Enforce)
        s.health.save();
    return {};
}

}  // namespace vfiod
