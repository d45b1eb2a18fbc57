// The one adapter between sdbus-c++ and plain sd-bus: the sd_bus under an sdbus-c++ object's
// connection, for the objects vfiod serves on raw sd-bus vtables (sd_bus_objects.hpp) and for
// the bus filter that holds bulk reads back. Nothing else in vfiod reaches into sdbus-c++.
#pragma once

#include <systemd/sd-bus.h>

namespace sdbus {
class IObject;
}

namespace vfiod {

// Borrowed: valid while the object's connection lives; take a reference (sd_bus_ref) to keep it.
sd_bus* sd_bus_of(sdbus::IObject& object);

}  // namespace vfiod
