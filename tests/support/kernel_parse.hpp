// How the kernel's sysfs stores parse numbers and booleans (lib/kstrtox.c), for the fake
// kernel's models of them (fake_sriov, fake_mdev).
#pragma once

#include <cctype>
#include <optional>
#include <string>

namespace vfiod::test {

// c's value as a digit of base (at most 16), or nullopt.
inline std::optional<unsigned> kernel_digit(char c, unsigned base) {
    const std::string digits = "0123456789abcdef";
    auto at = digits.find(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return at < base ? std::optional<unsigned>(static_cast<unsigned>(at)) : std::nullopt;
}

// kstrtoul(buf, 0) and its narrower kin: an optional '+', then hex after "0x", octal after a
// leading "0", decimal otherwise, one trailing newline at most; nothing else, and nothing above
// max (nullopt for all of those).
inline std::optional<unsigned long long> kernel_strtoull(std::string s,
                                                         unsigned long long max) {
    if (!s.empty() && s.back() == '\n')
        s.pop_back();
    if (!s.empty() && s.front() == '+')
        s.erase(0, 1);
    unsigned base = 10;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && kernel_digit(s[2], 16)) {
        base = 16;
        s.erase(0, 2);
    } else if (s.size() > 1 && s[0] == '0') {
        base = 8;
    }
    if (s.empty())
        return std::nullopt;
    unsigned long long v = 0;
    for (char c : s) {
        auto d = kernel_digit(c, base);
        if (!d || v > (max - *d) / base)
            return std::nullopt;
        v = v * base + *d;
    }
    return v;
}

// kstrtobool: only the first character (two for "on"/"off") decides.
inline std::optional<bool> kernel_strtobool(const std::string& s) {
    switch (s.empty() ? '\0' : s[0]) {
    case 'y': case 'Y': case 't': case 'T': case '1':
        return true;
    case 'n': case 'N': case 'f': case 'F': case '0':
        return false;
    case 'o': case 'O':
        if (s.size() > 1 && (s[1] == 'n' || s[1] == 'N'))
            return true;
        if (s.size() > 1 && (s[1] == 'f' || s[1] == 'F'))
            return false;
        return std::nullopt;
    default:
        return std::nullopt;
    }
}

}  // namespace vfiod::test
