#include "group_reservations.hpp"

#include <iterator>
#include <utility>

#include <spdlog/spdlog.h>

namespace vfiod::dra {

std::string GroupReservations::reserve(const ClaimRef& claim, const std::vector<Want>& wants) {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& w : wants) {
        auto it = holders_.find(w.group);
        if (it != holders_.end() && it->second.uid != claim.uid)
            return "device " + w.device + " (" + w.address + ") is in IOMMU group " +
                   std::to_string(w.group) + ", whose function " + it->second.address +
                   " is prepared for claim " + it->second.who +
                   "; a group is never split between claims";
    }
    for (const auto& w : wants)
        holders_.try_emplace(w.group, Holder{claim.uid, claim.str(), w.address});
    return "";
}

void GroupReservations::release(const std::string& uid) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = holders_.begin(); it != holders_.end();)
        it = it->second.uid == uid ? holders_.erase(it) : std::next(it);
}

void GroupReservations::add(Holders* holders, const ClaimRef& claim, unsigned group,
                            const std::string& address) {
    auto [it, fresh] = holders->try_emplace(group, Holder{claim.uid, claim.str(), address});
    if (!fresh && it->second.uid != claim.uid)
        spdlog::warn("checkpoints of claims {} and {} both hold IOMMU group {}", it->second.who,
                     claim.str(), group);
}

void GroupReservations::restore(Holders holders) {
    std::lock_guard<std::mutex> l(mu_);
    holders_ = std::move(holders);
}

}  // namespace vfiod::dra
