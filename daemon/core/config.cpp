#include "config.hpp"

#include <cstdio>

namespace vfiod {

namespace {

// Exactly four hex digits, either case: lspci and KubeVirt examples print both.
bool parse_hex4(std::string_view s, uint16_t* out) {
    if (s.size() != 4)
        return false;
    unsigned v = 0;
    for (char c : s) {
        unsigned d;
        if (c >= '0' && c <= '9')
            d = static_cast<unsigned>(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = static_cast<unsigned>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = static_cast<unsigned>(c - 'A' + 10);
        else
            return false;
        v = v * 16 + d;
    }
    *out = static_cast<uint16_t>(v);
    return true;
}

bool same_entry_values(const DeviceEntry& a, const DeviceEntry& b) {
    return a.selector == b.selector && a.address == b.address &&
           a.resource_name == b.resource_name && a.driver == b.driver && a.early == b.early;
}

bool same_entry_values(const ProtectEntry& a, const ProtectEntry& b) {
    return a.selector == b.selector && a.address == b.address;
}

bool same_entry_values(const SriovEntry& a, const SriovEntry& b) {
    return a.selector == b.selector && a.address == b.address && a.num_vfs == b.num_vfs;
}

bool same_entry_values(const MdevEntry& a, const MdevEntry& b) {
    return a.parent == b.parent && a.selector == b.selector && a.type == b.type &&
           a.count == b.count && a.resource_name == b.resource_name;
}

template <typename T>
bool same_entries(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size())
        return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (!same_entry_values(a[i], b[i]))
            return false;
    return true;
}

}  // namespace

// The message leaves the input out on purpose: callers quote it the way their context needs
// (the loader escapes it for FILE:LINE:COLUMN lines).
std::optional<Selector> Selector::parse(std::string_view text, std::string* err) {
    auto fail = [err](const char* why) -> std::optional<Selector> {
        if (err)
            *err = std::string(why) + " (expected vvvv:dddd or vvvv:* in hex, e.g. 10de:2331)";
        return std::nullopt;
    };
    auto colon = text.find(':');
    if (colon == std::string_view::npos || text.find(':', colon + 1) != std::string_view::npos)
        return fail("not vendor:device");
    Selector s;
    if (!parse_hex4(text.substr(0, colon), &s.vendor))
        return fail("the vendor is not 4 hex digits");
    auto dev = text.substr(colon + 1);
    if (dev == "*")
        return s;
    uint16_t d;
    if (!parse_hex4(dev, &d))
        return fail("the device is not 4 hex digits or '*'");
    s.device = d;
    return s;
}

std::string Selector::str() const {
    char buf[16];
    if (device)
        std::snprintf(buf, sizeof buf, "%04x:%04x", vendor, *device);
    else
        std::snprintf(buf, sizeof buf, "%04x:*", vendor);
    return buf;
}

std::string Origin::str() const {
    return file + ':' + std::to_string(line) + ':' + std::to_string(column);
}

// Equality means "would behave the same": origins and file names are left out, so a reload that
// only moved lines or renamed a conf.d file is not a change.
bool Config::operator==(const Config& o) const {
    return mode == o.mode && write_timeout == o.write_timeout && companions == o.companions &&
           allow_boot_vga == o.allow_boot_vga && same_entries(devices, o.devices) &&
           same_entries(protects, o.protects) && same_entries(sriovs, o.sriovs) &&
           same_entries(mdevs, o.mdevs);
}

std::string mdev_type_problem(std::string_view type) {
    if (type.empty())
        return "the type is empty";
    if (type.size() > 255)
        return "the type has " + std::to_string(type.size()) + " bytes; at most 255 (a file name)";
    for (char c : type) {
        if (c == '/')
            return "a type is one directory name: no '/'";
        if (c <= ' ' || c > '~')
            return "a type is printable ASCII without spaces";
    }
    if (type.find("..") != std::string_view::npos)
        return "a type holds no \"..\"";
    if (type == ".")
        return "\".\" is no type";
    return "";
}

std::string mdev_parent_problem(std::string_view name) {
    if (name.empty())
        return "the parent is empty";
    if (name.size() > 255)
        return "the parent has " + std::to_string(name.size()) + " bytes; at most 255";
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '+' || c == '-'))
            return "a virtual parent's name is letters, digits, '.', '_', '+' and '-' (a PCI "
                   "parent is named by its address, e.g. 0000:3b:00.0)";
    if (name == "." || name.find("..") != std::string_view::npos)
        return "a parent's name holds no \"..\" and is not \".\"";
    return "";
}

const char* to_string(Mode m) {
    switch (m) {
    case Mode::Enforce: return "enforce";
    case Mode::Observe: return "observe";
    }
    return "?";
}

const char* to_string(CompanionPolicy c) {
    switch (c) {
    case CompanionPolicy::Bind: return "bind";
    case CompanionPolicy::Refuse: return "refuse";
    }
    return "?";
}

}  // namespace vfiod
