#include "service/inventory.hpp"

#include "core/strings.hpp"

namespace vfiod {

DeviceInfo publishable(DeviceInfo d) {
    d.driver = utf8_safe(d.driver);
    d.target = utf8_safe(d.target);
    d.original_driver = utf8_safe(d.original_driver);
    d.resource_name = utf8_safe(d.resource_name);
    return d;
}

Inventory publishable(Inventory inv) {
    inv.mode = utf8_safe(inv.mode);
    for (auto& [addr, d] : inv.devices)
        d = publishable(std::move(d));
    return inv;
}

}  // namespace vfiod
