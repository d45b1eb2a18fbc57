#include "service/inventory.hpp"

#include "core/strings.hpp"

namespace vfiod {

DeviceInfo publishable(DeviceInfo d) {
    d.driver = utf8_safe(d.driver);
    for (auto* s : {&d.target, &d.resource_name})
        if (*s)
            **s = utf8_safe(**s);
    d.original_driver = utf8_safe(d.original_driver);
    d.health_reason = utf8_safe(d.health_reason);
    return d;
}

MdevInfo publishable(MdevInfo m) {
    // The parent's and the type's names are sysfs directory names, the type's name a file's
    // content, a blocker a process's comm: all bytes from the host.
    for (auto* s : {&m.parent, &m.type, &m.type_name, &m.resource_name, &m.health_reason})
        *s = utf8_safe(*s);
    for (auto& b : m.blockers)
        b = utf8_safe(b);
    return m;
}

Inventory publishable(Inventory inv) {
    inv.mode = utf8_safe(inv.mode);
    for (auto& [addr, d] : inv.devices)
        d = publishable(std::move(d));
    for (auto& [uuid, m] : inv.mdevs)
        m = publishable(std::move(m));
    return inv;
}

}  // namespace vfiod
