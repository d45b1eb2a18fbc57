#include "core/plan_text.hpp"

#include "core/strings.hpp"

namespace vfiod {

std::string addresses(const std::vector<PciAddress>& list) {
    std::vector<std::string> s;
    for (const auto& a : list)
        s.push_back(a.str());
    return join(s);
}

std::string describe_devices(const GroupPlan& gp, bool moves) {
    std::vector<std::string> s;
    for (const auto& d : gp.devices) {
        std::string from = d.driver.empty() ? "(none)" : printable(d.driver);
        if (!moves || !d.target || *d.target == d.driver)
            s.push_back(d.address.str() + " " + from);
        else
            s.push_back(d.address.str() + " " + from + "→" + *d.target);
    }
    return join(s);
}

}  // namespace vfiod
