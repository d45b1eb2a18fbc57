#include "pci_address.hpp"

#include <cstdio>

#include "strings.hpp"

namespace vfiod {

namespace {

// Lower-case hex only: the kernel never prints upper case, and accepting it would let two
// spellings name one device.
bool parse_hex(std::string_view s, uint64_t max, uint64_t* out) {
    if (s.empty() || s.size() > 8)
        return false;
    uint64_t v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return false;
        v = v * 16 + static_cast<uint64_t>(d);
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

bool fail(std::string* err, std::string_view text, const char* why) {
    if (err) {
        *err = "invalid PCI address '" + printable(text) + "': " + why +
               " (expected DDDD:BB:SS.F in lower-case hex, e.g. 0000:01:00.0)";
    }
    return false;
}

}  // namespace

std::optional<PciAddress> PciAddress::parse(std::string_view text, std::string* err) {
    auto c1 = text.find(':');
    auto c2 = c1 == std::string_view::npos ? c1 : text.find(':', c1 + 1);
    auto dot = c2 == std::string_view::npos ? c2 : text.find('.', c2 + 1);
    if (dot == std::string_view::npos) {
        fail(err, text, "wrong shape");
        return std::nullopt;
    }
    uint64_t d, b, s, f;
    if (!parse_hex(text.substr(0, c1), 0xffffffff, &d) ||
        !parse_hex(text.substr(c1 + 1, c2 - c1 - 1), 0xff, &b) ||
        !parse_hex(text.substr(c2 + 1, dot - c2 - 1), 0x1f, &s) ||
        !parse_hex(text.substr(dot + 1), 7, &f)) {
        fail(err, text, "a field is not lower-case hex or is out of range (bus <= ff, slot <= 1f, function <= 7)");
        return std::nullopt;
    }
    PciAddress a{static_cast<uint32_t>(d), static_cast<uint8_t>(b), static_cast<uint8_t>(s),
                 static_cast<uint8_t>(f)};
    if (a.str() != text) {
        fail(err, text, "not in canonical form");
        return std::nullopt;
    }
    return a;
}

std::string PciAddress::str() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, slot, function);
    return buf;
}

std::string PciAddress::object_path_element() const {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x_%02x_%02x_%x", domain, bus, slot, function);
    return buf;
}

}  // namespace vfiod
