// The event loop's view of the host: reads pass through, except the attribute files of functions
// with a write in flight or stuck, which answer what they said last (or nothing). On Linux 6.1
// reading driver_override takes the device lock that a blocked unbind holds, and the reader
// would sleep uninterruptibly, beyond any watchdog's reach; the loop must never be that reader.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// What each function's attribute files said when last read: the fence's memory. It holds every
// attribute of every function the loop reads (about ten a function, thousands of functions), and
// thousands of functions say the same few things ("0x8086\n" under the same "/vendor"), so each
// text is kept once and a function holds the numbers of its texts; a path is kept as its tail
// after the function's directory, and that directory as its parent's text (which a PF's VFs
// share) and the function's address. Owns those texts only; knows nothing of the host.
class LastRead {
public:
    std::optional<std::string> find(const PciAddress& fn, std::string_view rel) const;
    // owner_end: where the owning function's address ends in rel (FencedHostFs::owner).
    void put(const PciAddress& fn, std::string_view rel, size_t owner_end, std::string_view value);
    void erase(const PciAddress& fn, std::string_view rel);

private:
    struct Text {
        std::string text;
        uint32_t refs = 0;  // records naming it; at 0 its number is free for another text
    };
    static constexpr uint32_t kNone = UINT32_MAX;
    struct Said {
        // The text of the first path read up to the function's address (that address spelled
        // as PciAddress::str() does), or kNone when it was spelled otherwise.
        uint32_t parent = kNone;
        std::vector<std::pair<uint32_t, uint32_t>> records;  // a key's text, its value's text
    };
    // A path as a key text: "T" and its tail after the function's directory (parent and
    // address), or "W" and the whole path.
    std::string key_of(const PciAddress& fn, const Said& said, std::string_view rel) const;
    std::optional<uint32_t> lookup(std::string_view text) const;
    uint32_t intern(std::string_view text);
    void release(uint32_t id);
    // The record of rel in said, or records.end().
    std::vector<std::pair<uint32_t, uint32_t>>::iterator record(const PciAddress& fn, Said& said,
                                                                std::string_view rel);

    std::map<PciAddress, Said> said_;
    std::vector<Text> texts_;
    std::vector<uint32_t> free_;                       // numbers in texts_ no record names
    std::map<std::string, uint32_t, std::less<>> index_;  // text -> its number
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
