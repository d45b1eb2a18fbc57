// Reading JSON that comes from outside the plugin (the API server, a file on disk) and writing
// it: nothing here throws or asserts on what was sent, and nesting is bounded before the parser
// recurses into it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vfiod::dra {

// j's member `key` when j is an object that has one that is not null; nullptr otherwise.
const nlohmann::json* field(const nlohmann::json* j, const char* key);
inline const nlohmann::json* field(const nlohmann::json& j, const char* key) {
    return field(&j, key);
}
// The string at j; "" when j is null or not a string.
std::string string_at(const nlohmann::json* j);

// Whether `s` nests objects and arrays deeper than `max` (nlohmann's parser recurses per level).
bool too_deep(const std::string& s, int max);
// `text` parsed; discarded (is_discarded()) when it is not JSON.
nlohmann::json parse_json(const std::string& text);
// Never throws: invalid UTF-8 is replaced.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// A required, non-empty string of at most 1 KiB at obj[key]; false and *err naming
// "<where>.<key>" otherwise.
bool required_string(const nlohmann::json& obj, const char* key, const std::string& where,
                     std::string* out, std::string* err);
// A list of at most `max` strings of at most 4 KiB at j[key], appended to *out; false and *err.
bool string_list(const nlohmann::json& j, const char* key, size_t max,
                 std::vector<std::string>* out, std::string* err);

}  // namespace vfiod::dra
