// The event loop's view of the host: reads pass through, except the files of functions with a
// write in flight or stuck, which are refused without asking the host. On Linux 6.1 reading
// driver_override takes the device lock that a blocked unbind holds, and the reader would sleep
// uninterruptibly, beyond any watchdog's reach; the loop must never be that reader. What such a
// function said last is the host model's to keep (its record in the snapshot), not the view's.
// Mediated devices (DESIGN §12) are fenced by name: an mdev parent with a write in flight or
// stuck, and an mdev whose remove is, so a loop read of a type's available_instances never
// waits behind a remove that waits in the kernel for its VM.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

// Holds the host it wraps and implements every method of HostFs itself (final, and checked by a
// static_assert in the .cpp): a method added to HostFs does not compile here until the fence
// decides what it does, so no read can slip past it to the real tree.
class FencedHostFs final : public HostFs {
public:
    explicit FencedHostFs(HostFs& host);

    void fence(const PciAddress& fn) { fenced_.insert(fn); }
    void unfence(const PciAddress& fn) { fenced_.erase(fn); }
    const std::set<PciAddress>& fenced() const { return fenced_; }
    // The mdev names fenced now (parents under sys/class/mdev_bus, mdev UUIDs): a file below
    // a fenced parent's mdev_supported_types, or below a fenced UUID's directory, is refused
    // as a fenced function's is. A PCI parent's other files pass (its own fence is by address).
    void fence_mdev_names(const std::set<std::string>& names) {
        fenced_names_ = {names.begin(), names.end()};
    }
    const std::set<std::string, std::less<>>& fenced_mdev_names() const { return fenced_names_; }

    const std::string& root() const override;
    // A fenced function's file answers nothing, as a file that is not there does; its record
    // says what it held (HostModel). A file is the function's whose address is the path's last
    // ("sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/vendor": 0000:01:00.0's).
    std::optional<std::string> read(std::string_view rel, size_t max_bytes = 65536,
                                    std::string* why = nullptr,
                                    const Dir* in = nullptr) const override;
    // Config files pass through; a fenced function's file is refused (EBUSY).
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
    bool refused(std::string_view rel) const;
    bool refused_mdev(std::string_view rel) const;

    HostFs& host_;
    std::set<PciAddress> fenced_;
    std::set<std::string, std::less<>> fenced_names_;
};

}  // namespace vfiod
