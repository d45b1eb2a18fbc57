// A small streaming JSON writer: vfiod only ever emits JSON (plan, status), so no parser and no
// document model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vfiod {

class JsonWriter {
public:
    explicit JsonWriter(bool pretty = true) : pretty_(pretty) {}

    JsonWriter& begin_object();
    JsonWriter& end_object();
    JsonWriter& begin_array();
    JsonWriter& end_array();
    JsonWriter& key(std::string_view k);
    JsonWriter& value(std::string_view s);
    JsonWriter& value(const char* s) { return value(std::string_view(s)); }
    JsonWriter& value(bool b);
    JsonWriter& value(int64_t n);
    JsonWriter& null();

    // The text so far (complete once every object/array is closed), with a final newline when
    // pretty.
    std::string str() const { return pretty_ ? out_ + "\n" : out_; }

private:
    void separate();
    void open(char c);
    void close(char c);

    std::string out_;
    std::vector<bool> has_items_;  // per open container
    bool after_key_ = false;
    bool pretty_;
};

// s as a JSON string literal, quotes included. Invalid UTF-8 becomes U+FFFD so the output is
// always valid JSON whatever bytes sysfs handed us.
std::string json_quote(std::string_view s);

}  // namespace vfiod
