#include "claims.hpp"

#include <algorithm>

#include "core/strings.hpp"

namespace vfiod::dra {

std::string ClaimRef::str() const {
    return printable(namespace_) + "/" + printable(name) + " (" + printable(uid) + ")";
}

std::string CallLimit::over() const {
    if (cancelled && cancelled())
        return "the kubelet cancelled the call";
    if (std::chrono::steady_clock::now() >= deadline)
        return "the kubelet's call is past its deadline";
    return "";
}

std::chrono::milliseconds CallLimit::left(std::chrono::milliseconds cap) const {
    auto now = std::chrono::steady_clock::now();
    if (deadline - now >= cap)  // also when there is no deadline (max)
        return cap;
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                    std::chrono::milliseconds::zero());
}

}  // namespace vfiod::dra
