// The host-wide tables that host-use findings are matched against (mount tables and swaps;
// routes, addresses and the netdev list), kept between reads while the kernel says they have not
// changed, so a udev burst does not re-read megabytes of mountinfo or a router's route table.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/pci_address.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

struct MountTables {
    std::map<std::pair<unsigned, unsigned>, std::string> by_devnum;  // first mount point
    std::map<std::string, std::string> by_source;
    std::set<std::string> swaps;
    // sys/power/resume: the device a hibernation image is resumed from (unset: "0:0" or absent).
    std::optional<std::pair<unsigned, unsigned>> resume;
};

struct NetTables {
    std::set<std::string> routed;     // interfaces a route goes through
    std::set<std::string> addressed;  // IPv4 or global IPv6 address (live host only)
    // sys/class/net: every netdev and the PCI function it sits under.
    std::vector<std::pair<std::string, PciAddress>> netdevs;
};

MountTables read_mount_tables(const HostFs& fs, std::vector<std::string>* warnings);
NetTables read_net_tables(const HostFs& fs, std::vector<std::string>* warnings);

// Whether a table may have changed since the last time it was asked (and consumes that news).
class TableWatch {
public:
    virtual ~TableWatch() = default;
    virtual bool mounts_changed() = 0;   // the host's mount table or swaps
    virtual bool network_changed() = 0;  // routes, addresses, links (added, gone, renamed, enslaved)
};

// The running kernel's own signals: /proc/1/mountinfo and /proc/swaps raise POLLPRI once per
// change, and rtnetlink sends a message for every link, address and route change. Nothing is
// registered with the event loop: the fds are asked with a zero-timeout poll(2) and a
// non-blocking drain when a table is needed, so a host whose routes churn never wakes vfiod, and
// a message lost to a full socket buffer (ENOBUFS) counts as a change. A source that cannot be
// opened (no /proc, AF_NETLINK refused) always answers "changed": that table is re-read every
// time, as without a watch, and *notes says so.
std::unique_ptr<TableWatch> watch_kernel_tables(std::vector<std::string>* notes);

class HostTables {
public:
    // watch: nullptr re-reads every table each time it is asked for (a captured tree has no kernel
    // to say what changed).
    explicit HostTables(std::unique_ptr<TableWatch> watch = nullptr);
    ~HostTables();
    HostTables(HostTables&&) noexcept;
    HostTables& operator=(HostTables&&) noexcept;

    const MountTables& mounts(const HostFs& fs, std::vector<std::string>* warnings);
    // nics: (address, devpath) of network functions whose netdevs must be in the list as sysfs
    // shows them now: a NIC just probed registers its netdev a moment before rtnetlink says so.
    // The tables are read again when one of their netdevs is missing from the list.
    const NetTables& network(const HostFs& fs, std::vector<std::string>* warnings,
                             const std::vector<std::pair<PciAddress, std::string>>& nics = {});

    // How often each table was read (the tests and the bench count re-reads).
    unsigned mount_reads() const { return mount_reads_; }
    unsigned network_reads() const { return network_reads_; }

private:
    std::unique_ptr<TableWatch> watch_;
    std::unique_ptr<MountTables> mounts_;
    std::unique_ptr<NetTables> network_;
    unsigned mount_reads_ = 0;
    unsigned network_reads_ = 0;
};

}  // namespace vfiod
