// Objects served by plain sd-bus from published records, as systemd serves its units: one
// fallback vtable per interface on a path prefix, a find callback that maps a path to its
// record, and a node enumerator that lists the paths. Per object there is only the record:
// sdbus-c++ keeps about 3.5 KiB for each object it exports (14 MiB at 4,000 objects). The sd_bus
// these need comes from dbus/raw_bus.hpp.
#pragma once

#include <systemd/sd-bus.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sdbus-c++/Types.h>

namespace vfiod {

namespace sd_bus_detail {

// A negative sd-bus result as sdbus-c++ reports one: a thrown sdbus::Error.
void check(int r, const char* what);
// Is `path` the prefix or one of its ancestors (so that the prefix's objects are below it)?
bool at_or_above(std::string_view path, std::string_view prefix);

template <typename T>
constexpr const char* kSignature = nullptr;
template <>
inline constexpr const char* kSignature<std::string> = "s";
template <>
inline constexpr const char* kSignature<sdbus::ObjectPath> = "o";
template <>
inline constexpr const char* kSignature<uint32_t> = "u";
template <>
inline constexpr const char* kSignature<int32_t> = "i";
template <>
inline constexpr const char* kSignature<std::vector<std::string>> = "as";
template <>
inline constexpr const char* kSignature<std::vector<sdbus::ObjectPath>> = "ao";

int append(sd_bus_message* m, const std::string& v);
int append(sd_bus_message* m, const sdbus::ObjectPath& v);
int append(sd_bus_message* m, uint32_t v);
int append(sd_bus_message* m, int32_t v);
template <typename T>
int append(sd_bus_message* m, const std::vector<T>& v) {
    int r = sd_bus_message_open_container(m, 'a', kSignature<T>);
    for (size_t i = 0; r >= 0 && i < v.size(); ++i)
        r = append(m, v[i]);
    return r < 0 ? r : sd_bus_message_close_container(m);
}

struct MessageUnref {
    void operator()(sd_bus_message* m) const { sd_bus_message_unref(m); }
};
struct SlotUnref {
    void operator()(sd_bus_slot* s) const { sd_bus_slot_unref(s); }
};
struct BusUnref {
    void operator()(sd_bus* b) const { sd_bus_unref(b); }
};

}  // namespace sd_bus_detail

// One read-only property of a record type Info: its getter for the vtable and the comparison
// that decides whether a PropertiesChanged names it, both made from one function of the record.
template <typename Info>
struct Property {
    const char* name;
    const char* signature;
    sd_bus_property_get_t get;
    bool (*differs)(const Info&, const Info&);
    bool constant;  // "const" in the XML: fixed for the object's life, never in a change
};

template <typename Info, auto value>
constexpr Property<Info> property(const char* name, bool constant = false) {
    using T = decltype(value(std::declval<const Info&>()));
    static_assert(sd_bus_detail::kSignature<T> != nullptr, "a property type without a signature");
    auto get = [](sd_bus*, const char*, const char*, const char*, sd_bus_message* reply,
                  void* found, sd_bus_error*) -> int {
        try {
            return sd_bus_detail::append(reply, value(*static_cast<const Info*>(found)));
        } catch (const std::bad_alloc&) {  // never through sd-bus's C frames
            return -ENOMEM;
        }
    };
    auto differs = [](const Info& a, const Info& b) { return value(a) != value(b); };
    return {name, sd_bus_detail::kSignature<T>, get, differs, constant};
}

// Where one kind of object lives: its interface, its path prefix, its key <-> last path element.
template <typename Key, typename Info>
struct ObjectKind {
    const char* interface;
    const char* prefix;
    std::string (*path)(const Key&);
    std::optional<Key> (*key)(std::string_view element);  // any spelling: path() must agree
    std::span<const Property<Info>> properties;
};

// The published objects of one kind: their records (what the getters read, and what the next
// publication is compared with), the vtable and the enumerator. Not thread-safe: use it, like
// the connection, from the thread that processes the bus.
template <typename Key, typename Info>
class ExportedSet {
public:
    ExportedSet(sd_bus* bus, const ObjectKind<Key, Info>& kind)
        : bus_(sd_bus_ref(bus)), kind_(kind) {
        vtable_.push_back(SD_BUS_VTABLE_START(0));
        for (const auto& p : kind.properties)
            vtable_.push_back(SD_BUS_PROPERTY(p.name, p.signature, p.get, 0,
                                              p.constant ? SD_BUS_VTABLE_PROPERTY_CONST
                                                         : SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE));
        vtable_.push_back(SD_BUS_VTABLE_END);
        sd_bus_slot* slot = nullptr;
        sd_bus_detail::check(sd_bus_add_fallback_vtable(bus, &slot, kind.prefix, kind.interface,
                                                        vtable_.data(), &ExportedSet::find, this),
                             "Failed to register a fallback vtable");
        vtable_slot_.reset(slot);
        sd_bus_detail::check(
            sd_bus_add_node_enumerator(bus, &slot, kind.prefix, &ExportedSet::enumerate, this),
            "Failed to register a node enumerator");
        enumerator_slot_.reset(slot);
    }
    ~ExportedSet() {
        // Also runs on shutdown after the bus is gone: what cannot be said is not said.
        for (const auto& [key, info] : published_)
            sd_bus_emit_interfaces_removed(bus_.get(), kind_.path(key).c_str(), kind_.interface,
                                           nullptr);
    }
    ExportedSet(const ExportedSet&) = delete;
    ExportedSet& operator=(const ExportedSet&) = delete;

    // A new object is announced with InterfacesAdded; a known one's PropertiesChanged names only
    // the properties that differ. A signal that cannot be sent throws (sdbus::Error) and leaves
    // the records as they were, so that a retry sends it again.
    void put(const Key& key, Info info) {
        std::string path = kind_.path(key);
        auto [it, added] = published_.try_emplace(key, std::move(info));
        if (added) {
            int r = sd_bus_emit_interfaces_added(bus_.get(), path.c_str(), kind_.interface,
                                                 nullptr);
            if (r < 0)
                published_.erase(it);
            sd_bus_detail::check(r, "Failed to emit InterfacesAdded signal");
            return;
        }
        std::vector<const char*> changed;
        for (const auto& p : kind_.properties)
            if (!p.constant && p.differs(it->second, info))
                changed.push_back(p.name);
        if (changed.empty())
            return;
        changed.push_back(nullptr);
        Info before = std::exchange(it->second, std::move(info));
        int r = sd_bus_emit_properties_changed_strv(bus_.get(), path.c_str(), kind_.interface,
                                                    const_cast<char**>(changed.data()));
        if (r < 0)
            it->second = std::move(before);
        sd_bus_detail::check(r, "Failed to emit PropertiesChanged signal");
    }

    // InterfacesRemoved; the object stays if it cannot be sent (the retry sends it again).
    void erase(const Key& key) {
        auto it = published_.find(key);
        if (it == published_.end())
            return;
        sd_bus_detail::check(sd_bus_emit_interfaces_removed(bus_.get(), kind_.path(key).c_str(),
                                                            kind_.interface, nullptr),
                             "Failed to emit InterfacesRemoved signal");
        published_.erase(it);
    }

private:
    // sd-bus asks for every path under the prefix, and the prefix itself: the record of a
    // published key spelled exactly as path() spells it; 0 makes the caller's UnknownObject.
    static int find(sd_bus*, const char* path, const char*, void* userdata, void** found,
                    sd_bus_error*) {
        auto* self = static_cast<ExportedSet*>(userdata);
        std::string_view p(path), prefix(self->kind_.prefix);
        if (p.size() <= prefix.size() + 1 || p.substr(0, prefix.size()) != prefix ||
            p[prefix.size()] != '/')
            return 0;
        try {
            auto key = self->kind_.key(p.substr(prefix.size() + 1));
            if (!key || self->kind_.path(*key) != p)
                return 0;
            auto it = self->published_.find(*key);
            if (it == self->published_.end())
                return 0;
            *found = &it->second;
            return 1;
        } catch (const std::bad_alloc&) {
            return -ENOMEM;
        }
    }

    // The paths, for GetManagedObjects, Introspect and `busctl tree`. sd-bus also asks with paths
    // below the prefix (an Introspect of one object asks for its children): it has none.
    static int enumerate(sd_bus*, const char* prefix, void* userdata, char*** nodes,
                         sd_bus_error*) {
        auto* self = static_cast<ExportedSet*>(userdata);
        size_t n = sd_bus_detail::at_or_above(prefix, self->kind_.prefix)
                       ? self->published_.size()
                       : 0;
        char** out = static_cast<char**>(calloc(n + 1, sizeof(char*)));
        if (!out)
            return -ENOMEM;
        *nodes = out;  // sd-bus frees it, whole or not
        try {
            for (auto it = self->published_.begin(); n > 0 && it != self->published_.end(); ++it)
                if (!(*out++ = strdup(self->kind_.path(it->first).c_str())))
                    return -ENOMEM;
        } catch (const std::bad_alloc&) {
            return -ENOMEM;
        }
        return 0;
    }

    std::unique_ptr<sd_bus, sd_bus_detail::BusUnref> bus_;
    const ObjectKind<Key, Info>& kind_;
    std::map<Key, Info> published_;
    std::vector<sd_bus_vtable> vtable_;
    // After vtable_: unregistered before it is freed.
    std::unique_ptr<sd_bus_slot, sd_bus_detail::SlotUnref> vtable_slot_;
    std::unique_ptr<sd_bus_slot, sd_bus_detail::SlotUnref> enumerator_slot_;
};

// Calls held back so that they never delay another (issue 23, finding 6). sd-bus handles a
// connection's messages strictly in order, and some reads cost in proportion to the whole
// inventory (GetManagedObjects at 4,000 objects: a 2 MB reply, 20 ms of CPU on a quiet machine,
// 100-200 ms on a busy one): 120 of them queued ahead of a Reload delayed it by 22.5 s. A bus
// filter, which sees each incoming message before any object does, holds such calls back; the
// event loop puts them back on the connection's read queue one at a time, when the bus has
// nothing else to dispatch. So any other call waits for at most one held call, and the held
// ones are served in the order they came.
class HeldCalls {
public:
    // Held calls at most (about 1 KiB each); past that a call to hold is answered
    // LimitsExceeded at once: the bus lets one uid have 256 connections of 128 calls each.
    static constexpr std::size_t kMax = 1024;
    using Predicate = bool (*)(sd_bus_message*);

    // Holds back the method calls `hold` selects, from now on, `max` at most.
    HeldCalls(sd_bus* bus, Predicate hold, std::size_t max = kMax);
    HeldCalls(const HeldCalls&) = delete;
    HeldCalls& operator=(const HeldCalls&) = delete;

    // Puts the oldest held call back on the read queue, to be dispatched (past the filter) by the
    // next sd_bus_process(), unless the connection still has messages to write. Returns whether
    // any call is still held after it.
    bool release_one();
    std::size_t held() const { return held_.size(); }

private:
    static int filter(sd_bus_message* m, void* userdata, sd_bus_error* error);

    std::unique_ptr<sd_bus, sd_bus_detail::BusUnref> bus_;
    Predicate hold_;
    std::size_t max_;
    std::deque<std::unique_ptr<sd_bus_message, sd_bus_detail::MessageUnref>> held_;
    // The call release_one() put back, which the filter lets through once. Only compared with,
    // never dereferenced: it may be freed before the filter sees it (a bus that closed).
    const sd_bus_message* released_ = nullptr;
    // After held_: the filter is gone before the calls it held are freed.
    std::unique_ptr<sd_bus_slot, sd_bus_detail::SlotUnref> filter_slot_;
};

}  // namespace vfiod
