#include "service/inventory.hpp"

#include "core/strings.hpp"

namespace vfiod {

Inventory publishable(Inventory inv) {
    inv.mode = utf8_safe(inv.mode);
    for (auto& [addr, d] : inv.devices) {
        d.driver = utf8_safe(d.driver);
        d.target = utf8_safe(d.target);
        d.original_driver = utf8_safe(d.original_driver);
        d.resource_name = utf8_safe(d.resource_name);
    }
    return inv;
}

}  // namespace vfiod
