#include "dbus/sd_bus_objects.hpp"

#include <sdbus-c++/sdbus-c++.h>

namespace vfiod {

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

HeldCalls::HeldCalls(sd_bus* bus, Predicate hold, std::size_t max)
    : bus_(sd_bus_ref(bus)), hold_(hold), max_(max) {
    sd_bus_slot* slot = nullptr;
    sd_bus_detail::check(sd_bus_add_filter(bus, &slot, &HeldCalls::filter, this),
                         "Failed to add a bus filter");
    filter_slot_.reset(slot);
}

int HeldCalls::filter(sd_bus_message* m, void* userdata, sd_bus_error* error) {
    auto* self = static_cast<HeldCalls*>(userdata);
    if (m == self->released_) {
        self->released_ = nullptr;
        return 0;  // its turn: on to the objects
    }
    if (!sd_bus_message_is_method_call(m, nullptr, nullptr) || !self->hold_(m))
        return 0;
    if (self->held_.size() >= self->max_)
        return sd_bus_error_setf(error, SD_BUS_ERROR_LIMITS_EXCEEDED,
                                 "%zu calls like this one are waiting already; try again",
                                 self->held_.size());
    try {
        self->held_.emplace_back().reset(sd_bus_message_ref(m));  // no reference if it throws
    } catch (const std::bad_alloc&) {  // never through sd-bus's C frames
        return -ENOMEM;
    }
    return 1;  // taken: sd-bus looks no further
}

bool HeldCalls::release_one() {
    if (held_.empty())
        return false;
    // One bulk reply at a time in the connection's write queue. The bus stops reading from
    // vfiod while 127 MiB of its messages wait for slow readers (max_incoming_bytes); the held
    // reads then wait here as call messages, not as 2 MB replies in vfiod's memory. The loop
    // polls for POLLOUT while the queue is not empty, so it comes back once it has drained.
    std::uint64_t queued = 0;
    if (sd_bus_get_n_queued_write(bus_.get(), &queued) >= 0 && queued > 0)
        return true;
    auto m = std::move(held_.front());
    held_.pop_front();
    // Fails only when the bus is closing, and the loop ends then anyway: the call is dropped.
    if (sd_bus_enqueue_for_read(bus_.get(), m.get()) >= 0)
        released_ = m.get();
    return !held_.empty();
}

}  // namespace vfiod
