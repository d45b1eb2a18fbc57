#include "toml_prescan.hpp"

#include <algorithm>

namespace vfiod {

namespace {

// toml++ 3.3 parses a dotted key (`a.b.c = 1`, `[a.b.c]`, `[[a.b.c]]`) recursively, a few stack
// frames a component: 40,000 components, far under the size cap, overflow the stack and kill
// vfioctl and vfiod alike. No config needs more than three, so a key with more components than
// this is refused before toml++ sees the document.
constexpr unsigned kMaxKeyComponents = 64;
// Inline tables and arrays recurse too, and the two multiply: toml++'s own limit of 256 levels,
// each keyed with 64 components, needs 1-2 MB of stack. No config nests more than a few levels.
constexpr unsigned kMaxBrackets = 16;

}  // namespace

std::optional<DeepSpot> find_deep_key(std::string_view t) {
    TextPosition pos{1, 1}, run_start{1, 1};
    size_t i = 0, run = 0, brackets = 0;
    bool dot = false;  // the run ends in '.', waiting for its next component
    auto advance = [&](size_t n) {
        for (size_t end = std::min(t.size(), i + n); i < end; ++i) {
            unsigned char c = static_cast<unsigned char>(t[i]);
            if (c == '\n') {
                ++pos.line;
                pos.column = 1;
            } else if ((c & 0xc0) != 0x80) {
                ++pos.column;
            }
        }
    };
    auto component = [&](TextPosition start) -> bool {
        if (!dot) {
            run = 0;
            run_start = start;
        }
        dot = false;
        return ++run > kMaxKeyComponents;
    };
    auto too_many_components = [&] {
        return DeepSpot{run_start,
                        "more than " + std::to_string(kMaxKeyComponents) + " dotted components"};
    };
    auto bare = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-';
    };
    while (i < t.size()) {
        const char c = t[i];
        const TextPosition start = pos;
        if (c == ' ' || c == '\t') {
            advance(1);
        } else if (c == '.') {
            if (run == 0 || dot)
                run = 0;
            dot = run > 0;
            advance(1);
        } else if (c == '#') {
            advance(t.find('\n', i) == std::string_view::npos ? t.size() : t.find('\n', i) - i);
            run = 0, dot = false;
        } else if (c == '"' || c == '\'') {
            const std::string triple(3, c);
            const bool multi = t.substr(i, 3) == triple;
            const std::string close = multi ? triple : std::string(1, c);
            advance(close.size());
            while (i < t.size() && t.substr(i, close.size()) != close) {
                if (c == '"' && t[i] == '\\')
                    advance(2);  // basic strings: an escaped quote does not end them
                else if (!multi && t[i] == '\n')
                    break;  // unterminated: toml++ reports it
                else
                    advance(1);
            }
            // A multi-line string may end in up to two quotes of its own before the delimiter.
            while (multi && t.substr(i, 4) == std::string(4, c))
                advance(1);
            advance(close.size());
            if (component(start))
                return too_many_components();
        } else if (bare(c)) {
            while (i < t.size() && bare(t[i]))
                advance(1);
            if (component(start))
                return too_many_components();
        } else {
            if ((c == '[' || c == '{') && ++brackets > kMaxBrackets)
                return DeepSpot{start, "more than " + std::to_string(kMaxBrackets) +
                                           " levels of nested tables and arrays"};
            if ((c == ']' || c == '}') && brackets > 0)
                --brackets;
            run = 0, dot = false;
            advance(1);
        }
    }
    return std::nullopt;
}

}  // namespace vfiod
