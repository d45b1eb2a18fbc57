// A look at a TOML document before the TOML parser sees it: whether it nests deeper than the
// parser's recursion can survive (io/config_schema refuses such a file with this position). Pure:
// text in, position out; it knows no TOML library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vfiod {

// 1-based, as the config messages print them (FILE:LINE:COLUMN); a column counts characters.
struct TextPosition {
    uint32_t line = 1;
    uint32_t column = 1;
};

struct DeepSpot {
    TextPosition where;
    std::string why;
};

// Where the first dotted key with more than kMaxKeyComponents components starts, or the bracket
// that opens level kMaxBrackets + 1. A small lexer that knows just enough TOML — comments and
// the four string forms — to tell the dots between key components and the brackets of tables
// and arrays from those inside strings and comments. It errs only towards counting: floats
// ("1.5") and values give runs of two at most.
std::optional<DeepSpot> find_deep_key(std::string_view t);

}  // namespace vfiod
