// The event loop's view of the host: reads pass through, except the attribute files of functions
// with a write in flight or stuck, which answer what they said last (or nothing). On Linux 6.1
// reading driver_override takes the device lock that a blocked unbind holds, and the reader
// would sleep uninterruptibly, beyond any watchdog's reach; the loop must never be that reader.
#pragma once

#include <map>
#include <set>
#include <string>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// What each function's attribute files said when last read: the fence's memory. It holds every
// attribute of every function the loop reads (about ten a function, thousands of functions), so
// it is kept small: one entry a function, whose paths are stored as their tails after the
// function's directory (which they share) in one string of records, not one map node a path.
// Owns those texts only; knows nothing of the host.
class LastRead {
public:
    // owner_end: where the owning function's address ends in rel (FencedHostFs::owner).
    std::optional<std::string> find(const PciAddress& fn, std::string_view rel) const;
    void put(const PciAddress& fn, std::string_view rel, size_t owner_end, std::string_view value);
    void erase(const PciAddress& fn, std::string_view rel);

private:
    struct Said {
        std::string dir;      // the first path read, up to the function's address
        std::string records;  // per path: kind, key length, key, value length, value
    };
    // Where rel's record starts in said.records (npos when absent), and its length.
    static std::pair<size_t, size_t> locate(const Said& said, std::string_view rel);

    std::map<PciAddress, Said> said_;
};

// Holds the host it wraps and implements every method of HostFs itself (final, and checked by a
// static_assert in the .cpp): a method added to HostFs does not compile here until the fence
// decides what it does, so no read can slip past it to the real tree.
class FencedHostFs final : public HostFs {
public:
    explicit FencedHostFs(HostFs& host);

    void fence(const PciAddress& fn) { fenced_.insert(fn); }
    void unfence(const PciAddress& fn) { fenced_.erase(fn); }
    const std::set<PciAddress>& fenced() const { return fenced_; }

    // The function an attribute path belongs to: its last component that is a PCI address
    // ("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor" -> 0000:01:00.0).
    static std::optional<PciAddress> owner(std::string_view rel, size_t* end = nullptr);

    const std::string& root() const override;
    std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                    std::string* why = nullptr,
                                    const Dir* in = nullptr) const override;
    // Config files pass through; a fenced function's file is not read at all (EBUSY): no
    // reader asks for one whole, and the last value is kept only for read().
    WholeFile read_whole(std::string_view rel, size_t max_bytes) const override;
    // Opening a directory, symlinks, listings, lookups, stats and the O_EXCL probe take no
    // device lock: they pass through to the wrapped host.
    Dir open_dir(std::string_view rel) const override;
    std::optional<std::string> readlink(std::string_view rel,
                                        const Dir* in = nullptr) const override;
    std::vector<std::string> list(std::string_view rel, int* err = nullptr) const override;
    bool exists(std::string_view rel, const Dir* in = nullptr) const override;
    std::optional<std::string> resolve(std::string_view rel) const override;
    bool leads_somewhere(std::string_view rel) const override;
    std::optional<std::pair<unsigned, unsigned>> char_device(std::string_view rel) const override;
    std::optional<unsigned long> inode(std::string_view rel) const override;
    int probe_exclusive(std::string_view rel) const override;
    std::vector<Link> links(std::string_view rel,
                            std::string_view stat_prefix = {}) const override;
    Fd open_own_dir(std::string_view rel, bool create, int* err) const override;
    // The loop writes nothing through this view.
    int write(std::string_view rel, std::string_view value) override;

private:
    HostFs& host_;
    std::set<PciAddress> fenced_;
    // What each function attribute said when last read (bounded by the host's attributes).
    mutable LastRead last_;
};

}  // namespace vfiod
