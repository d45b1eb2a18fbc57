#include "service/udev_match.hpp"

#include <cstdio>

#include "io/config_loader.hpp"
#include "io/sysfs.hpp"

namespace vfiod {

namespace {

std::optional<uint16_t> read_id(const Sysfs& fs, const std::string& dir, const char* attr) {
    auto text = fs.read(dir + attr);
    if (!text || text->size() != 6 || text->compare(0, 2, "0x") != 0)
        return std::nullopt;
    unsigned v = 0;
    if (std::sscanf(text->c_str() + 2, "%4x", &v) != 1)
        return std::nullopt;
    return static_cast<uint16_t>(v);
}

}  // namespace

std::string udev_match(const Sysfs& fs, const Config& config, const PciAddress& address) {
    std::string dir = "sys/bus/pci/devices/" + address.str() + "/";
    auto vendor = read_id(fs, dir, "vendor");
    auto device = read_id(fs, dir, "device");
    if (!vendor || !device)
        return "";
    for (const auto& p : config.protects)
        if (p.matches(address, *vendor, *device))
            return "";
    for (const auto& e : config.devices) {
        if (!e.matches(address, *vendor, *device))
            continue;
        std::string out = "VFIOD_ALLOWLISTED=1\n";
        // Only in enforce mode: observe mode promises never to write, and so does its rule.
        if (e.early && config.mode == Mode::Enforce)
            out += "VFIOD_EARLY_DRIVER=" + e.driver + "\n";
        return out;
    }
    return "";
}

int run_udev_match(const std::string& root, const std::string& address) {
    auto addr = PciAddress::parse(address);
    if (!addr)
        return 0;
    ConfigResult r = load_config(root, std::nullopt);
    if (!r.config)
        return 0;
    Sysfs fs(root);
    std::fputs(udev_match(fs, *r.config, *addr).c_str(), stdout);
    return 0;
}

}  // namespace vfiod
