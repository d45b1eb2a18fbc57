// Small string helpers shared by the engine, the daemon and vfioctl.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace vfiod {

// s made safe to put in a log line, an error message or a terminal: control characters (C0, DEL
// and the C1 range, whose CSI is a terminal escape of its own), bidirectional overrides, bytes
// that are not UTF-8, '"' and '\' are escaped ("\x1b", "\xff", "\u202e", "\""); valid UTF-8
// text stays as it is. The result is cut to at most `max` input bytes, never inside a character
// ("..." marks the cut). Every human-facing string that comes from the host or a user — sysfs
// names and link targets, mount points, netdev names, config keys, D-Bus arguments — goes
// through here, so it can never forge a line or a screen of its own.
std::string printable(std::string_view s, size_t max = 64);

// Length of the valid UTF-8 sequence starting at s[i] (1 for ASCII), or 0 when the bytes there
// are not UTF-8 (overlong, surrogate, beyond U+10FFFF, truncated, stray continuation byte).
size_t utf8_sequence(std::string_view s, size_t i);
bool valid_utf8(std::string_view s);
// s with every byte that is not part of valid UTF-8 replaced by U+FFFD, as json_quote does. D-Bus
// refuses a message whose string is not UTF-8, so everything vfiod publishes passes through here.
std::string utf8_safe(std::string_view s);

std::string join(const std::vector<std::string>& parts, std::string_view sep = ", ");

// A letter or digit of ASCII, whatever locale the process runs in.
inline bool ascii_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The non-empty '/'-separated components of a path ("a//b/" -> {"a", "b"}).
std::vector<std::string_view> path_components(std::string_view path);

// Appends warnings of one kind to `out`, keeping the first `max` and counting the rest, so a
// hostile host (100,000 junk entries) or config (4,000 overlapping entries) cannot flood the log:
// finish() (or the destructor) adds one "... and K more <what>" line for what was left out
// (what: "junk sys/bus/pci/devices entries skipped").
class BoundedWarnings {
public:
    BoundedWarnings(std::vector<std::string>* out, std::string what, size_t max = 20)
        : out_(out), what_(std::move(what)), max_(max) {}
    ~BoundedWarnings() { finish(); }
    BoundedWarnings(const BoundedWarnings&) = delete;
    BoundedWarnings& operator=(const BoundedWarnings&) = delete;

    // True while a message would still be kept: callers can skip building one that would not.
    bool room() const { return kept_ < max_; }
    void add(std::string msg);
    // Counts one warning without building its text (room() was false).
    void skip() { ++skipped_; }
    void finish();

private:
    std::vector<std::string>* out_;
    std::string what_;
    size_t max_;
    size_t kept_ = 0;
    size_t skipped_ = 0;
};

}  // namespace vfiod
