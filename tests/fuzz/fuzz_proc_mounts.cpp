// proc/self/mountinfo, proc/mounts and proc/swaps decide which disks are in use (DESIGN §4,
// in-use-storage): any bytes must parse without a crash, one entry at most per line.
#include <algorithm>

#include "fuzz_check.hpp"
#include "io/proc_parsers.hpp"

using namespace vfiod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto in = vfiod::fuzz::text(data, size);
    const size_t lines = static_cast<size_t>(std::count(in.begin(), in.end(), '\n')) + 1;

    auto info = parse_mountinfo(in);
    FUZZ_CHECK(info.size() <= lines);
    for (const auto& e : info) {
        // Unescaping only shrinks ("\040" is one byte), so nothing can grow past its line.
        FUZZ_CHECK(e.mount_point.size() <= size && e.source.size() <= size);
        FUZZ_CHECK(!e.mount_point.empty());
    }

    auto mounts = parse_mounts(in);
    FUZZ_CHECK(mounts.size() <= lines);
    for (const auto& m : mounts)
        FUZZ_CHECK(!m.source.empty() && !m.mount_point.empty());

    auto swaps = parse_swaps(in);
    FUZZ_CHECK(swaps.size() <= lines);
    for (const auto& s : swaps)
        FUZZ_CHECK(!s.empty());
    return 0;
}
