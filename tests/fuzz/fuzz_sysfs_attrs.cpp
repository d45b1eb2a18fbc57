// The sysfs attribute parsers ("0x10de" hex, "-1" decimal) against any bytes, with the
// strict numeric parsers checked against std::from_chars, which has the same grammar.
#include <charconv>
#include <optional>
#include <string>

#include "fuzz_check.hpp"
#include "io/proc_parsers.hpp"

using namespace vfiod;

namespace {

std::optional<long> reference_int(std::string_view s) {
    long v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty())
        return std::nullopt;
    return v;
}

std::optional<uint32_t> reference_hex(std::string_view s, unsigned max_digits) {
    if (max_digits > 8)
        max_digits = 8;
    if (s.size() < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return std::nullopt;
    auto digits = s.substr(2);
    if (digits.size() > max_digits)
        return std::nullopt;
    uint32_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 16);
    if (ec != std::errc() || end != digits.data() + digits.size())
        return std::nullopt;
    return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);

    FUZZ_CHECK(parse_int_attr(in) == reference_int(in));

    // The first byte picks max_digits (0..15: past 8 it must be capped), the rest is the text.
    if (size >= 1) {
        const unsigned max_digits = data[0] & 0x0f;
        const auto attr = in.substr(1);
        FUZZ_CHECK(parse_hex_attr(attr, max_digits) == reference_hex(attr, max_digits));
    }
    return 0;
}
