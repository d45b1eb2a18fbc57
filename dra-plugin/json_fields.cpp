#include "json_fields.hpp"

namespace vfiod::dra {

using nlohmann::json;

namespace {

constexpr size_t kMaxField = 1024;
constexpr size_t kMaxListString = 4096;

}  // namespace

const json* field(const json* j, const char* key) {
    if (!j || !j->is_object())
        return nullptr;
    auto it = j->find(key);
    return it == j->end() || it->is_null() ? nullptr : &*it;
}

std::string string_at(const json* j) { return j && j->is_string() ? j->get<std::string>() : ""; }

bool too_deep(const std::string& s, int max) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : s) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
            continue;
        }
        if (c == '"')
            in_string = true;
        else if (c == '{' || c == '[') {
            if (++depth > max)
                return true;
        } else if (c == '}' || c == ']')
            --depth;
    }
    return false;
}

json parse_json(const std::string& text) { return json::parse(text, nullptr, false); }

std::string dump_json(const json& j, int indent) {
    return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

bool required_string(const json& obj, const char* key, const std::string& where,
                     std::string* out, std::string* err) {
    const json* v = field(obj, key);
    if (!v || !v->is_string()) {
        *err = where + "." + key + " is " + (v ? "not a string" : "missing");
        return false;
    }
    const auto& s = v->get_ref<const std::string&>();
    if (s.empty() || s.size() > kMaxField) {
        *err = where + "." + key + (s.empty() ? " is empty" : " is too long");
        return false;
    }
    *out = s;
    return true;
}

bool string_list(const json& j, const char* key, size_t max, std::vector<std::string>* out,
                 std::string* err) {
    const json* v = field(j, key);
    if (!v || !v->is_array() || v->size() > max) {
        *err = std::string(key) + " is not a list of at most " + std::to_string(max);
        return false;
    }
    for (const auto& s : *v) {
        if (!s.is_string() || s.get_ref<const std::string&>().size() > kMaxListString) {
            *err = std::string(key) + " holds something other than a string";
            return false;
        }
        out->push_back(s.get<std::string>());
    }
    return true;
}

}  // namespace vfiod::dra
