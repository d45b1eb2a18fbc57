#include "proc_parsers.hpp"

#include <limits>

namespace vfiod {

namespace {

// Calls f(line) for each '\n'-separated line (the last one may lack its newline).
template <typename F>
void for_each_line(std::string_view text, F&& f) {
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find('\n', i);
        if (j == std::string_view::npos)
            j = text.size();
        f(text.substr(i, j - i));
        i = j + 1;
    }
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Whitespace-separated fields; procfs pads columns with runs of spaces or tabs.
std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && is_space(line[i]))
            ++i;
        size_t start = i;
        while (i < line.size() && !is_space(line[i]))
            ++i;
        if (i > start)
            out.push_back(line.substr(start, i - start));
    }
    return out;
}

bool is_octal(char c) { return c >= '0' && c <= '7'; }

// The kernel writes ' ', '\t', '\n' and '\\' in paths as "\ooo" (seq_file mangle_path).
std::string unescape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size() && is_octal(s[i + 1]) && is_octal(s[i + 2]) &&
            is_octal(s[i + 3])) {
            int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
            if (v <= 0xff) {
                out += static_cast<char>(v);
                i += 3;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

// Bare hex (procfs route columns): 1..max_digits digits, no prefix.
std::optional<uint32_t> parse_hex_field(std::string_view s, size_t max_digits) {
    if (s.empty() || s.size() > max_digits)
        return std::nullopt;
    uint32_t v = 0;
    for (char c : s) {
        int d = hex_digit(c);
        if (d < 0)
            return std::nullopt;
        v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
}

std::optional<unsigned> parse_unsigned(std::string_view s) {
    if (s.empty() || s.size() > 9)  // device numbers are at most 20 bits
        return std::nullopt;
    unsigned v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return std::nullopt;
        v = v * 10 + static_cast<unsigned>(c - '0');
    }
    return v;
}

constexpr uint32_t kRtfUp = 0x0001;

}  // namespace

std::vector<MountInfoEntry> parse_mountinfo(std::string_view text) {
    std::vector<MountInfoEntry> out;
    for_each_line(text, [&](std::string_view line) {
        // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS
        auto f = fields(line);
        if (f.size() < 6)
            return;
        size_t dash = 6;
        while (dash < f.size() && f[dash] != "-")
            ++dash;
        auto colon = f[2].find(':');
        if (colon == std::string_view::npos)
            return;
        auto maj = parse_unsigned(f[2].substr(0, colon));
        auto min = parse_unsigned(f[2].substr(colon + 1));
        if (!maj || !min)
            return;
        MountInfoEntry e;
        e.major = *maj;
        e.minor = *min;
        e.mount_point = unescape(f[4]);
        if (dash + 2 < f.size())
            e.source = unescape(f[dash + 2]);
        out.push_back(std::move(e));
    });
    return out;
}

std::vector<MountEntry> parse_mounts(std::string_view text) {
    std::vector<MountEntry> out;
    for_each_line(text, [&](std::string_view line) {
        auto f = fields(line);
        if (f.size() < 2)
            return;
        out.push_back({unescape(f[0]), unescape(f[1])});
    });
    return out;
}

std::vector<std::string> parse_swaps(std::string_view text) {
    std::vector<std::string> out;
    bool first = true;
    for_each_line(text, [&](std::string_view line) {
        auto f = fields(line);
        bool header = first && !f.empty() && f[0] == "Filename";
        first = false;
        if (f.empty() || header)
            return;
        out.push_back(unescape(f[0]));
    });
    return out;
}

std::set<std::string> parse_route_ifaces(std::string_view text) {
    std::set<std::string> out;
    for_each_line(text, [&](std::string_view line) {
        // Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT
        auto f = fields(line);
        if (f.size() < 4)
            return;
        auto flags = parse_hex_field(f[3], 8);  // the header's "Flags" fails here too
        if (flags && (*flags & kRtfUp))
            out.emplace(f[0]);
    });
    return out;
}

std::set<std::string> parse_ipv6_route_ifaces(std::string_view text) {
    std::set<std::string> out;
    for_each_line(text, [&](std::string_view line) {
        // DEST DEST_PLEN SRC SRC_PLEN NEXT_HOP METRIC REFCNT USE FLAGS IFACE
        auto f = fields(line);
        if (f.size() < 10 || f[0].size() != 32 || f[9] == "lo")
            return;
        auto b0 = parse_hex_field(f[0].substr(0, 2), 2);
        auto b1 = parse_hex_field(f[0].substr(2, 2), 2);
        if (!b0 || !b1 || !parse_hex_field(f[1], 2))
            return;
        bool link_local = *b0 == 0xfe && (*b1 & 0xc0) == 0x80;
        bool multicast = *b0 == 0xff;
        if (!link_local && !multicast)
            out.emplace(f[9]);
    });
    return out;
}

std::optional<std::string> line_value(std::string_view text, std::string_view key) {
    std::optional<std::string> out;
    for_each_line(text, [&](std::string_view line) {
        if (out || line.substr(0, key.size()) != key)
            return;
        line.remove_prefix(key.size());
        while (!line.empty() && is_space(line.front()))
            line.remove_prefix(1);
        while (!line.empty() && is_space(line.back()))
            line.remove_suffix(1);
        out = std::string(line);
    });
    return out;
}

std::optional<unsigned> char_major(std::string_view text, std::string_view name) {
    std::optional<unsigned> out;
    bool in_char = false;
    for_each_line(text, [&](std::string_view line) {
        if (line == "Character devices:" || line == "Block devices:") {
            in_char = line.front() == 'C';
            return;
        }
        auto f = fields(line);
        if (in_char && !out && f.size() == 2 && f[1] == name)
            out = parse_unsigned(f[0]);
    });
    return out;
}

std::optional<uint32_t> parse_hex_attr(std::string_view text, unsigned max_digits) {
    if (max_digits > 8)
        max_digits = 8;
    if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X'))
        return std::nullopt;
    return parse_hex_field(text.substr(2), max_digits);
}

std::optional<long> parse_int_attr(std::string_view text) {
    bool neg = !text.empty() && text.front() == '-';
    if (neg)
        text.remove_prefix(1);
    if (text.empty())
        return std::nullopt;
    // Accumulate negatively so LONG_MIN is representable without overflow.
    long v = 0;
    constexpr long lo = std::numeric_limits<long>::min();
    for (char c : text) {
        if (c < '0' || c > '9')
            return std::nullopt;
        long d = c - '0';
        if (v < (lo + d) / 10)
            return std::nullopt;
        v = v * 10 - d;
    }
    if (!neg) {
        if (v == lo)
            return std::nullopt;
        v = -v;
    }
    return v;
}

std::optional<std::pair<unsigned, unsigned>> parse_devnum(std::string_view s) {
    auto colon = s.find(':');
    if (colon == std::string_view::npos)
        return std::nullopt;
    auto maj = parse_int_attr(s.substr(0, colon));
    auto min = parse_int_attr(s.substr(colon + 1));
    if (!maj || !min || *maj < 0 || *min < 0 || *maj > 0xfffff || *min > 0xfffff)
        return std::nullopt;
    return std::make_pair(static_cast<unsigned>(*maj), static_cast<unsigned>(*min));
}

}  // namespace vfiod
