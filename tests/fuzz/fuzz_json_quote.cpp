// json_quote carries sysfs and config strings into plan/status JSON: for any bytes its output
// must be one valid JSON string (RFC 8259, checked by the small validator below rather than by
// the code under test), and valid UTF-8 must survive unchanged.
#include <optional>
#include <string>

#include "core/json.hpp"
#include "fuzz_check.hpp"

namespace {

// Appends code point cp as UTF-8.
void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | cp >> 6);
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | cp >> 12);
        out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | cp >> 18);
        out += static_cast<char>(0x80 | (cp >> 12 & 0x3f));
        out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

// Decodes one UTF-8 scalar value at s[*i] by its definition (shortest form, no surrogates,
// at most U+10FFFF).
std::optional<uint32_t> next_utf8(std::string_view s, size_t* i) {
    auto c = static_cast<unsigned char>(s[*i]);
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || *i + n > s.size())
        return std::nullopt;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t k = 1; k < n; ++k) {
        auto b = static_cast<unsigned char>(s[*i + k]);
        if ((b & 0xc0) != 0x80)
            return std::nullopt;
        cp = cp << 6 | (b & 0x3f);
    }
    static const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return std::nullopt;
    *i += n;
    return cp;
}

bool valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();)
        if (!next_utf8(s, &i))
            return false;
    return true;
}

int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The string a JSON string literal denotes, or nullopt when `lit` is not exactly one.
std::optional<std::string> decode_json_string(std::string_view lit) {
    if (lit.size() < 2 || lit.front() != '"' || lit.back() != '"')
        return std::nullopt;
    std::string out;
    size_t i = 1;
    const size_t end = lit.size() - 1;
    while (i < end) {
        auto c = static_cast<unsigned char>(lit[i]);
        if (c == '"' || c < 0x20)
            return std::nullopt;
        if (c != '\\') {
            size_t start = i;
            if (!next_utf8(lit.substr(0, end), &i))
                return std::nullopt;
            out.append(lit.substr(start, i - start));
            continue;
        }
        if (++i >= end)
            return std::nullopt;
        switch (lit[i++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
            if (i + 4 > end)
                return std::nullopt;
            uint32_t cp = 0;
            for (int k = 0; k < 4; ++k) {
                int d = hex(lit[i++]);
                if (d < 0)
                    return std::nullopt;
                cp = cp << 4 | static_cast<uint32_t>(d);
            }
            // A lone surrogate is legal JSON grammar but not a string anyone can use; json_quote
            // has no reason to emit one.
            if (cp >= 0xd800 && cp <= 0xdfff)
                return std::nullopt;
            put_utf8(out, cp);
            break;
        }
        default: return std::nullopt;
        }
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    const std::string q = vfiod::json_quote(in);
    auto decoded = decode_json_string(q);
    FUZZ_CHECK(decoded.has_value());
    FUZZ_CHECK(valid_utf8(*decoded));
    if (valid_utf8(in))
        FUZZ_CHECK(*decoded == in);
    else
        FUZZ_CHECK(decoded->find("\xef\xbf\xbd") != std::string::npos);  // U+FFFD marks the loss

    // The same text as a key and a value of a compact document.
    vfiod::JsonWriter w(false);
    w.begin_object().key(in).value(in).end_object();
    FUZZ_CHECK(w.str() == "{" + q + ":" + q + "}");
    return 0;
}
