#include "strings.hpp"

#include <cstdio>

namespace vfiod {

size_t utf8_sequence(std::string_view s, size_t i) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = b(i);
    if (c < 0x80)
        return 1;
    // Lead bytes f5..ff start nothing: taking them as 3-byte leads let invalid UTF-8 through.
    size_t n = c >= 0xc2 && c <= 0xdf   ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 0;
    if (n == 0 || i + n > s.size())
        return 0;
    for (size_t k = 1; k < n; ++k)
        if ((b(i + k) & 0xc0) != 0x80)
            return 0;
    unsigned char c1 = b(i + 1);
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
        (c == 0xf4 && c1 >= 0x90))
        return 0;  // overlong, surrogate, or beyond U+10FFFF
    return n;
}

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_sequence(s, i);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

std::string utf8_safe(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t n = utf8_sequence(s, i);
        if (n == 0) {
            out += "\xef\xbf\xbd";  // U+FFFD
            ++i;
        } else {
            out.append(s.substr(i, n));
            i += n;
        }
    }
    return out;
}

namespace {

// The code point of a valid sequence of n bytes at p.
char32_t decode(std::string_view seq) {
    auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(seq[k])); };
    switch (seq.size()) {
    case 1: return b(0);
    case 2: return (b(0) & 0x1f) << 6 | (b(1) & 0x3f);
    case 3: return (b(0) & 0x0f) << 12 | (b(1) & 0x3f) << 6 | (b(2) & 0x3f);
    default: return (b(0) & 0x07) << 18 | (b(1) & 0x3f) << 12 | (b(2) & 0x3f) << 6 | (b(3) & 0x3f);
    }
}

// Characters that change how a terminal shows what follows: C1 controls (U+009B is CSI) and the
// bidirectional embeddings, overrides and isolates ("Trojan Source"), plus the line and
// paragraph separators.
bool invisible_control(char32_t cp) {
    return (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 || cp == 0x200e ||
           cp == 0x200f || cp == 0x061c;
}

}  // namespace

std::string printable(std::string_view s, size_t max) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        size_t n = utf8_sequence(s, i);
        if (i + (n ? n : 1) > max)
            break;
        char buf[16];
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (n == 0 || c < 0x20 || c == 0x7f) {
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
            ++i;
            continue;
        }
        if (n == 1 && (c == '"' || c == '\\')) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (char32_t cp = decode(s.substr(i, n)); n > 1 && invisible_control(cp)) {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
            out += buf;
        } else {
            out.append(s.substr(i, n));
        }
        i += n;
    }
    if (i < s.size())
        out += "...";
    return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += sep;
        out += p;
    }
    return out;
}

std::vector<std::string_view> path_components(std::string_view path) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < path.size()) {
        size_t j = path.find('/', i);
        if (j == std::string_view::npos)
            j = path.size();
        if (j > i)
            out.push_back(path.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

void BoundedWarnings::add(std::string msg) {
    if (!room()) {
        skip();
        return;
    }
    ++kept_;
    if (out_)
        out_->push_back(std::move(msg));
}

void BoundedWarnings::finish() {
    if (skipped_ && out_)
        out_->push_back("... and " + std::to_string(skipped_) + " more " + what_);
    skipped_ = 0;
}

}  // namespace vfiod
