#include "service/sd_bus_objects.hpp"

#include <sdbus-c++/sdbus-c++.h>

namespace vfiod {

namespace {

// A Message keeps its sd_bus_message in the protected member `msg_`. A pointer to that member,
// formed in a derived class, reads it from any Message: plain C++, no cast and no assumption
// about the layout. An sdbus-c++ that renames or retypes the member fails to compile here rather
// than misbehave.
struct RawMessage : sdbus::Message {
    static sd_bus_message* of(const sdbus::Message& m) {
        return static_cast<sd_bus_message*>(m.*(&RawMessage::msg_));
    }
};

}  // namespace

sd_bus* sd_bus_of(sdbus::IObject& object) {
    // Made only to be asked for its bus, never sent.
    auto signal = object.createSignal("org.freedesktop.DBus.Peer", "Unsent");
    return sd_bus_message_get_bus(RawMessage::of(signal));
}

namespace sd_bus_detail {

void check(int r, const char* what) {
    if (r < 0)
        throw sdbus::createError(-r, what);
}

bool at_or_above(std::string_view path, std::string_view prefix) {
    if (path == "/" || path == prefix)
        return true;
    return prefix.size() > path.size() && prefix.substr(0, path.size()) == path &&
           prefix[path.size()] == '/';
}

int append(sd_bus_message* m, const std::string& v) {
    return sd_bus_message_append_basic(m, 's', v.c_str());
}
int append(sd_bus_message* m, const sdbus::ObjectPath& v) {
    return sd_bus_message_append_basic(m, 'o', v.c_str());
}
int append(sd_bus_message* m, uint32_t v) { return sd_bus_message_append_basic(m, 'u', &v); }
int append(sd_bus_message* m, int32_t v) { return sd_bus_message_append_basic(m, 'i', &v); }

}  // namespace sd_bus_detail

}  // namespace vfiod
