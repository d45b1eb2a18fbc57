// One instance per directory: vfiod-device-plugin per kubelet directory, vfiod-dra-plugin per
// state directory. A second instance would take over the first one's sockets (and fight it over
// the API server's objects), so it exits instead.
#pragma once

#include <string>

#include "infra/fd.hpp"

namespace vfiod {

// Opens `dir` and takes flock(LOCK_EX | LOCK_NB) on it, held as long as *lock is. False, after
// logging why (another `program` holds it, or the directory cannot be opened or locked).
bool lock_instance(const char* program, const std::string& dir, Fd* lock);

}  // namespace vfiod
