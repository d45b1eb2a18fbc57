#include "device_health.hpp"

#include <algorithm>

#include "core/health.hpp"
#include "core/strings.hpp"

namespace vfiod::dra {

HealthReport kubelet_health(const client::Health& h) {
    // printable() counts the bytes it takes, and its escapes are longer than the bytes they
    // stand for: taken less until what it makes fits.
    auto said = [&](KubeletHealth k, std::string_view text) {
        size_t take = kMaxHealthMessage - 3;
        std::string m = printable(text, take);
        while (m.size() > kMaxHealthMessage) {
            take -= std::min(take, m.size() - kMaxHealthMessage);
            m = printable(text, take);
        }
        return HealthReport{k, std::move(m)};
    };
    if (h.state == "ok")
        return {KubeletHealth::Healthy, ""};
    if (h.state == "degraded")
        return said(KubeletHealth::Healthy, "degraded: " + h.reason);
    if (h.state == "failed")
        return said(KubeletHealth::Unhealthy, h.reason);
    if (h.state == "unknown")
        return said(KubeletHealth::Unknown, h.reason);
    if (h.state.empty())
        return said(KubeletHealth::Unknown, "vfiod publishes no health for it");
    return said(KubeletHealth::Unknown, "vfiod says \"" + h.state + "\": " + h.reason);
}

std::string taint_value(const client::Health& h) {
    if (!client::health_failed(h.state))
        return "";
    constexpr size_t kMaxLabelValue = 63;
    std::string v;
    for (char c : health_code(h.reason)) {
        if (v.size() == kMaxLabelValue)
            break;
        v += ascii_alnum(c) || c == '-' || c == '_' || c == '.' ? c : '-';
    }
    // A label value starts and ends with a letter or digit.
    while (!v.empty() && !ascii_alnum(v.back()))
        v.pop_back();
    size_t first = 0;
    while (first < v.size() && !ascii_alnum(v[first]))
        ++first;
    v.erase(0, first);
    return v.empty() ? "failed" : v;
}

}  // namespace vfiod::dra
