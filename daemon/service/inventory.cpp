#include "service/inventory.hpp"

#include "core/strings.hpp"

namespace vfiod {

DeviceInfo publishable(DeviceInfo d) {
    d.driver = utf8_safe(d.driver);
    for (auto* s : {&d.target, &d.resource_name})
        if (*s)
            **s = utf8_safe(**s);
    d.original_driver = utf8_safe(d.original_driver);
    return d;
}

Inventory publishable(Inventory inv) {
    inv.mode = utf8_safe(inv.mode);
    for (auto& [addr, d] : inv.devices)
        d = publishable(std::move(d));
    return inv;
}

}  // namespace vfiod
