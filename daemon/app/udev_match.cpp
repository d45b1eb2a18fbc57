#include "app/udev_match.hpp"

#include <cstdio>

#include "core/plan.hpp"
#include "io/config_loader.hpp"
#include "io/host_fs.hpp"
#include "io/topology_reader.hpp"

namespace vfiod {

std::string udev_match(const HostFs& fs, const Config& config, const PciAddress& address) {
    // The daemon's reader and rule: a function the daemon would skip as unreadable, or plan
    // under another entry, gets no early binding either.
    auto fn = read_function(fs, address, nullptr);
    if (!fn || fn->is_bridge() || protected_by(config, *fn))
        return "";
    const DeviceEntry* e = governing_entry(config, *fn);
    if (!e)
        return "";
    std::string out = "VFIOD_ALLOWLISTED=1\n";
    // Only in enforce mode: observe mode promises never to write, and so does its rule.
    if (e->early && config.mode == Mode::Enforce)
        out += "VFIOD_EARLY_DRIVER=" + e->driver + "\n";
    return out;
}

int run_udev_match(const std::string& root, const std::string& address) {
    auto addr = PciAddress::parse(address);
    if (!addr)
        return 0;
    KernelHostFs fs(root);
    ConfigResult r = load_config(fs, std::nullopt);
    if (!r.config)
        return 0;
    std::fputs(udev_match(fs, *r.config, *addr).c_str(), stdout);
    return 0;
}

}  // namespace vfiod
