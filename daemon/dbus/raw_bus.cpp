// Why this file exists, and why it reads a protected member (issue 21, item 3).
//
// sdbus-c++ 1.2 (Debian 12) has no public way to get the sd_bus* under a connection, nor to make
// a connection over an sd_bus* of our own; the API that is missing is
// `sdbus::createBusConnection(sd_bus*)`, added in sdbus-c++ 1.4. vfiod needs the sd_bus for its
// Group and Device objects, served as systemd serves its units (one fallback vtable and one node
// enumerator per interface, sd_bus_objects.hpp), and for HeldCalls' bus filter.
//
// Option (b), every object served one way, was measured instead (bench/README.md, "One way to
// serve the objects?"). All on sdbus-c++: vfiod's RSS at READY=1 on the 2,048-function tree
// (4,055 objects) is 30.6-30.9 MiB against 14.8-14.9 MiB with the raw vtables, about 3.9 KiB per
// object, and the goal is 16 MiB. All on plain sd-bus: the Manager is one object (4 KiB), and
// the connection, the loop and the polkit proxy stay sdbus-c++'s, so the read would remain.
// So option (a): the read stays, here alone. Once sdbus-c++ 1.4 is the floor, vfiod should open
// its own sd_bus, hand it to createBusConnection() and delete this file.
#include "dbus/raw_bus.hpp"

#include <type_traits>

#include <sdbus-c++/sdbus-c++.h>

namespace vfiod {

namespace {

// A Message keeps its sd_bus_message in the protected member `msg_`. A pointer to that member,
// formed in a derived class, reads it from any Message: plain C++, no cast of the object and no
// assumption about the layout.
struct RawMessage : sdbus::Message {
    // What this relies on, checked when it is compiled: an sdbus-c++ that renames `msg_`, makes it
    // private or changes its type fails to build here rather than misbehave.
    static_assert(std::is_same_v<decltype(&RawMessage::msg_), void* sdbus::Message::*>,
                  "sdbus::Message::msg_ is no longer the protected void* this adapter reads: "
                  "see the comment at the top of dbus/raw_bus.cpp");

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

}  // namespace vfiod
