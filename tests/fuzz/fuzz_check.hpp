// Shared by the fuzz targets: a property check that aborts (so libFuzzer keeps the input and the
// replay test fails) and the input as text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

// Unlike assert(), stays on in release builds: the properties are the point of the targets.
#define FUZZ_CHECK(cond)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
            std::abort();                                                                   \
        }                                                                                   \
    } while (0)

namespace vfiod::fuzz {

inline std::string_view text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// No byte below 0x20 and no DEL: messages go to the journal and D-Bus replies, where a raw
// newline would let input forge a log line.
inline bool printable(std::string_view s) {
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f)
            return false;
    return true;
}

}  // namespace vfiod::fuzz
