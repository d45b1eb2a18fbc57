// Early binding from the initramfs (DESIGN §14), vfioctl's side: which mode the hook builds in,
// the record it leaves in /var/lib/vfiod/initramfs-<kernel>.json, and what plan and doctor say
// of the records against the configuration and the host as they are now.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/early.hpp"
#include "io/host_fs.hpp"

namespace vfiod::cli {

// Where records live, under the root.
inline constexpr const char* kInitramfsRecordDir = "var/lib/vfiod";

// What the hook put into one kernel's initramfs.
struct InitramfsRecord {
    std::string kernel;
    std::string built;              // UTC, "2026-12-05T22:50:00Z"
    std::string host_check_note;    // why the host-use check was not possible; "" when it ran
    std::string config_digest;      // early_config_digest() of the configuration it was built from
    std::vector<std::string> config_files;
    EarlySet set;
};

std::string record_json(const InitramfsRecord& r);
// nullopt with *err saying what is wrong (the record was hand-edited, cut short, or not ours).
std::optional<InitramfsRecord> parse_record(std::string_view text, std::string* err);

// The running kernel's release (uname -r), "" if uname fails.
std::string running_kernel();

// Whether a kernel version can name a record: 1..128 of [A-Za-z0-9._+~-], not "." or "..".
bool valid_kernel_version(std::string_view v);

// Why the host that runs the hook is not the one that boots the image, or "" for a live host:
// a chroot (/ is not PID 1's root), a container, or /proc or /sys not mounted. Only for root "/":
// a --root tree is read as the host it captures.
std::string image_build_reason(const std::string& root);

// The records under the root, by kernel version; unreadable or malformed ones as warnings
// ("var/lib/vfiod/initramfs-6.1.0.json: ...").
std::vector<InitramfsRecord> read_records(const HostFs& fs, std::vector<std::string>* warnings);

// One record judged against now: `now` is what a rebuild would carry (the record's own mode:
// the live host's plan, or the configuration alone for an image build).
struct RecordCheck {
    bool config_changed = false;  // the digest differs: built from another configuration
    bool differs = false;         // a rebuild would carry other functions
    std::string advice;           // "" when current; else what to run
};
RecordCheck check_record(const InitramfsRecord& r, const std::string& digest,
                         const EarlySet& now);

// What plan and doctor say of the records under fs's root: a line per record (what it carries,
// what it left out, whether a rebuild would differ and what to run), and for the live host a line
// when the running kernel has none although early entries exist. Nothing at all (shown false)
// without an early entry and a record that carries something. ok is false when a record is out
// of date.
struct InitramfsSummary {
    bool shown = false;
    bool ok = true;
    std::vector<std::string> lines;
};
InitramfsSummary summarize_initramfs(const HostFs& fs, const Config& config, const Plan& plan,
                                     std::vector<std::string>* warnings);

}  // namespace vfiod::cli
