// The calling thread's CPU time, which the benches report beside wall time: on this shared,
// loaded build machine it is the steadier of the two.
#pragma once

#include <time.h>

namespace vfiod::bench {

inline double thread_cpu_ms() {
    timespec ts;
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

}  // namespace vfiod::bench
