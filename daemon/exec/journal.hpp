// The executor's crash-safe record of what it is doing to each IOMMU group (DESIGN §4, §6): intent
// and every function's original driver before the first write, the outcome after. It lives in
// run/vfiod under the root, so it survives daemon restarts and, rightly, not reboots.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
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

// A PF's VF count change in flight (DESIGN §11): recorded before the first write, removed once
// the count is reached. Kept apart from JournalEntry: a PF is never bound, so it has none of a
// group's functions or drivers; its entry is named for its address, not a group.
struct PfJournalEntry {
    // Started: writes may have begun. Stuck: one blocked past write_timeout.
    enum class Phase { Started, Stuck };

    PciAddress pf;
    unsigned from = 0;  // sriov_numvfs before the change: where reconcile without an entry goes
    unsigned to = 0;    // the count the change was making
    Phase phase = Phase::Started;
};

const char* to_string(PfJournalEntry::Phase phase);

// A PF entry is a handful of short lines; anything bigger was not written by vfiod.
inline constexpr size_t kMaxPfEntryBytes = 4096;

// An mdev create or remove in flight (DESIGN §12): recorded before the write, removed when it
// ends, left `stuck` when it blocked. Named for the mdev's UUID. Start only reads and removes
// these (Service::settle_mdev_journal): the plan, from the host, decides every mdev write, so
// an entry, left over or planted, never makes vfiod write to an mdev.
struct MdevJournalEntry {
    using Phase = PfJournalEntry::Phase;  // Started: the write may have begun; Stuck: it blocked

    std::string uuid;    // canonical lower case
    std::string parent;  // its parent's name under sys/class/mdev_bus
    std::string type;    // a directory of the parent's mdev_supported_types
    bool create = true;  // false: a remove
    Phase phase = Phase::Started;
};

inline constexpr size_t kMaxMdevEntryBytes = 4096;

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
    // The sticky mark, kept in memory: read from the entries on first use, then kept by this
    // journal's own store(), remove() and clear_released(). So one Journal per root in a
    // process (the daemon's): a mark another process or Journal sets or clears later is seen
    // by a Journal made after it, as a restarted daemon sees it. Asking costs no file access,
    // which deciding thousands of groups would otherwise pay once each (issue 25).
    bool released(unsigned group) const;
    // Clears the sticky mark (Bind, or a reload that changes the group's entries). 0 or errno.
    int clear_released(unsigned group);

    // The relative path of a group's entry, for messages.
    std::string entry_path(unsigned group) const;
    // "journal <entry path>: <why>" for an errno from store() or remove(); EXDEV says the
    // directory leads out of the root.
    std::string describe_error(unsigned group, int err) const;

    // PF entries: the same directory, store and checks, named "pf-<address>" so that load_all()
    // never takes one for a group's. The same contracts as their group counterparts.
    std::optional<PfJournalEntry> load_pf(const PciAddress& pf, std::string* err = nullptr) const;
    std::vector<PfJournalEntry> load_all_pfs(std::vector<std::string>* errors = nullptr) const;
    int store_pf(const PfJournalEntry& entry);
    int remove_pf(const PciAddress& pf);
    std::string pf_entry_path(const PciAddress& pf) const;
    std::string describe_pf_error(const PciAddress& pf, int err) const;

    // Mdev entries: "mdev-<uuid>", the same store and checks; load_all_mdevs() takes only names
    // of a canonical UUID whose entry names that UUID.
    std::vector<MdevJournalEntry> load_all_mdevs(std::vector<std::string>* errors = nullptr) const;
    int store_mdev(const MdevJournalEntry& entry);
    int remove_mdev(const std::string& uuid);
    std::string mdev_entry_path(const std::string& uuid) const;

private:
    Fd open_dir(bool create, int* err) const;
    // The directory for loading: -1 when there is none yet (no entries, no error) or it cannot
    // be used (then *err says why).
    Fd open_for_load(std::string* err) const;
    // An entry's text, read with the bound max_bytes; nullopt (and *err, unless simply absent)
    // when it is missing, not a regular file, or too big.
    std::optional<std::string> read_entry(int dirfd, const std::string& name, size_t max_bytes,
                                          std::string* err) const;
    // read_entry() and parse, naming the entry in *err when either fails.
    template <typename Entry>
    std::optional<Entry> parse_at(int dirfd, const std::string& name, size_t max_bytes,
                                  std::optional<Entry> (*parse)(const std::string&, std::string*),
                                  std::string* err) const;
    // visit(dirfd, name, &err) for every name in the directory, "." and ".." left out; each
    // non-empty err, and the directory's own, is added to *errors.
    using NameVisitor = std::function<void(int dirfd, const std::string& name, std::string* err)>;
    void each_name(std::vector<std::string>* errors, const NameVisitor& visit) const;
    std::optional<JournalEntry> load_at(int dirfd, unsigned group, std::string* err) const;
    std::optional<PfJournalEntry> load_pf_at(int dirfd, const PciAddress& pf,
                                             std::string* err) const;
    // Atomically replaces (or removes) the entry `name`. 0 or errno.
    int store_text(const std::string& name, const std::string& text);
    int remove_name(const std::string& name);
    std::string why(int err) const;

    // Keeps the released marks up to date after a store or removal that took effect.
    void note_released(unsigned group, bool released);

    const HostFs& fs_;
    std::string dir_;
    // The groups whose entry says released; nullopt until first asked. The executor stores from
    // its workers while the loop asks: both under the lock.
    mutable std::mutex released_mu_;
    mutable std::optional<std::set<unsigned>> released_;
};

// The text form, exposed for tests: one "key value" line each, one "function" line per function.
std::string serialize(const JournalEntry& entry);
std::optional<JournalEntry> parse_journal(const std::string& text, std::string* err);
// The same for a PF entry: "pf", "from", "to" and "phase" lines, each exactly once.
std::string serialize(const PfJournalEntry& entry);
std::optional<PfJournalEntry> parse_pf_journal(const std::string& text, std::string* err);
// An mdev entry: "uuid", "parent", "type", "action" (create, remove) and "phase", each once.
std::string serialize(const MdevJournalEntry& entry);
std::optional<MdevJournalEntry> parse_mdev_journal(const std::string& text, std::string* err);

}  // namespace vfiod
