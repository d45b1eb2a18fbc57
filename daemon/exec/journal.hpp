// The executor's crash-safe record of what it is doing to each IOMMU group (DESIGN §4, §6): intent
// and every function's original driver before the first write, the outcome after. It lives in
// run/vfiod under the root, so it survives daemon restarts and, rightly, not reboots.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

struct JournalEntry {
    enum class Op { Bind, Release };
    // Started: writes may have begun, nothing is known to be consistent (reconcile decides).
    // Stuck: a write blocked; the named function was left as it was when it blocked.
    enum class Phase { Started, Done, RolledBack, Stuck };

    struct Function {
        PciAddress address;
        std::string original;         // host driver before vfiod first moved it, for Release
        std::string before;           // driver right before this operation; "" for none
        std::string before_override;  // driver_override right before it; "" for none
        std::string target;           // where this operation moves it; "" for "any host driver"
    };

    unsigned group = 0;
    Op op = Op::Bind;
    Phase phase = Phase::Started;
    // Sticky (DESIGN §6): the operator gave this group back; only Bind or a config change
    // that touches the group clears it.
    bool released = false;
    std::vector<Function> functions;

    // The driver each function had before vfiod first moved it, for Release.
    std::map<PciAddress, std::string> originals() const;
};

const char* to_string(JournalEntry::Op op);
const char* to_string(JournalEntry::Phase phase);

// What an entry may hold, so a damaged or planted file costs bounded memory and time: no more
// functions than an IOMMU group of one PCI bus can have (vfiod records no bridges), and no more
// bytes than that many lines with long escaped driver_override values take.
inline constexpr size_t kMaxEntryFunctions = 256;
inline constexpr size_t kMaxEntryBytes = 1 << 20;

class Journal {
public:
    // Every access, reads, writes, renames, removals and fsyncs, goes through one directory fd
    // from fs.open_own_dir(): resolved inside the root like every read of the host, and refused
    // (EXDEV) when a symlink on the way leads out of it (DESIGN §2).
    explicit Journal(const HostFs& fs, std::string dir = "run/vfiod");

    // nullopt when the group has no entry; *err says why an existing entry (or the directory)
    // could not be used: not a regular file, a symlink, too big, not parseable.
    std::optional<JournalEntry> load(unsigned group, std::string* err = nullptr) const;
    // Every readable entry, by group; unreadable ones are named in *errors and skipped.
    std::vector<JournalEntry> load_all(std::vector<std::string>* errors = nullptr) const;

    // Atomically replaces the group's entry (temp file, fsync, rename, fsync dir). 0 or errno.
    int store(const JournalEntry& entry);
    int remove(unsigned group);

    // Each function's driver before vfiod first moved it, from the group's entry; empty when
    // there is none (or it cannot be read).
    std::map<PciAddress, std::string> originals(unsigned group) const;
    bool released(unsigned group) const;
    // Clears the sticky mark (Bind, or a reload that changes the group's entries). 0 or errno.
    int clear_released(unsigned group);

    // The relative path of a group's entry, for messages.
    std::string entry_path(unsigned group) const;
    // "journal <entry path>: <why>" for an errno from store() or remove(); EXDEV says the
    // directory leads out of the root.
    std::string describe_error(unsigned group, int err) const;

private:
    Fd open_dir(bool create, int* err) const;
    std::optional<JournalEntry> load_at(int dirfd, unsigned group, std::string* err) const;
    std::string why(int err) const;

    const HostFs& fs_;
    std::string dir_;
};

// The text form, exposed for tests: one "key value" line each, one "function" line per function.
std::string serialize(const JournalEntry& entry);
std::optional<JournalEntry> parse_journal(const std::string& text, std::string* err);

}  // namespace vfiod
