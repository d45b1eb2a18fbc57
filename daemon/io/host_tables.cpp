#include "io/host_tables.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "core/strings.hpp"
#include "infra/fd.hpp"
#include "io/host_use.hpp"
#include "io/netns_use.hpp"
#include "io/proc_parsers.hpp"

namespace vfiod {

namespace {

// Mount tables on container hosts run to megabytes; reading them short would miss mounts.
constexpr size_t kProcMax = 64u << 20;

// A host file the findings depend on; anything there that is not a regular file is refused by
// the access layer and said here, since what it would have told is then unknown.
std::optional<std::string> read_host_file(const HostFs& fs, const std::string& rel,
                                          std::vector<std::string>* warnings) {
    std::string refused;
    auto text = fs.read(rel, kProcMax, &refused);
    if (!refused.empty() && warnings)
        warnings->push_back("not reading " + printable(rel, 256) + ": it is " + refused);
    return text;
}

// PID 1's table, not our own: the unit runs in a private mount namespace (PrivateMounts=,
// ProtectSystem=) that only shows the host's mounts while propagation works, and a host whose /
// is not shared would leave an unmounted disk listed and a new mount unseen. A captured tree
// without proc/1 falls back to the reader's own table (DESIGN §2).
std::optional<std::string> host_table(const HostFs& fs, const std::string& pid1_file,
                                      const std::string& fallback,
                                      std::vector<std::string>* warnings) {
    if (auto text = read_host_file(fs, pid1_file, warnings))
        return text;
    return read_host_file(fs, fallback, warnings);
}

// Interfaces with an IPv4 or a global IPv6 address, from the running kernel.
std::set<std::string> live_addressed_ifaces() {
    std::set<std::string> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0)
        return out;
    for (ifaddrs* a = list; a; a = a->ifa_next) {
        if (!a->ifa_addr || !a->ifa_name)
            continue;
        if (a->ifa_addr->sa_family == AF_INET) {
            out.insert(a->ifa_name);
        } else if (a->ifa_addr->sa_family == AF_INET6) {
            auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
            if (!IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
                out.insert(a->ifa_name);
        }
    }
    freeifaddrs(list);
    return out;
}

// True unless fd is open and poll(2) says no POLLPRI since it was last asked: the kernel's
// mounts_poll() and swaps_poll() report a change once, to each open file.
bool signalled(const Fd& fd) {
    if (fd.get() < 0)
        return true;
    pollfd p{fd.get(), POLLPRI, 0};
    int n;
    do
        n = ::poll(&p, 1, 0);
    while (n < 0 && errno == EINTR);
    return n != 0;
}

// True unless the socket is open and holds nothing: every queued message is read and dropped
// (only that something changed matters), ENOBUFS means some were lost.
bool drained_any(const Fd& fd) {
    if (fd.get() < 0)
        return true;
    bool any = false;
    char buf[4096];
    // Bounded: on a host whose routes change faster than this reads, the next ask says "changed"
    // again, which is the truth.
    for (int i = 0; i < 1024; ++i) {
        ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
        if (n >= 0) {
            any = true;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return any;
        if (errno != ENOBUFS)
            return true;
        any = true;
    }
    return true;
}

Fd open_watched(const char* first, const char* fallback) {
    Fd fd(::open(first, O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0 && fallback)
        fd.reset(::open(fallback, O_RDONLY | O_CLOEXEC));
    return fd;
}

Fd open_rtnetlink() {
    Fd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE));
    if (fd.get() < 0)
        return fd;
    // Small on purpose: the messages are dropped unread, and overflowing is itself the news.
    int size = 16384;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    sockaddr_nl sa{};
    sa.nl_family = AF_NETLINK;
    sa.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE |
                   RTMGRP_IPV6_ROUTE;
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
        fd.reset();
    return fd;
}

class KernelTableWatch : public TableWatch {
public:
    explicit KernelTableWatch(std::vector<std::string>* notes)
        : mountinfo_(open_watched("/proc/1/mountinfo", "/proc/self/mountinfo")),
          swaps_(open_watched("/proc/swaps", nullptr)),
          rtnl_(open_rtnetlink()) {
        if (mountinfo_.get() < 0 || swaps_.get() < 0)
            notes->push_back("cannot watch the mount table or swaps: they are read on every event");
        if (rtnl_.get() < 0)
            notes->push_back("cannot listen to rtnetlink: routes, addresses and netdevs are read "
                             "on every event");
    }

    bool mounts_changed() override {
        // Both asked: each poll consumes its own news.
        bool mounts = signalled(mountinfo_);
        bool swaps = signalled(swaps_);
        return mounts || swaps;
    }
    bool network_changed() override { return drained_any(rtnl_); }

private:
    Fd mountinfo_, swaps_, rtnl_;
};

}  // namespace

MountTables read_mount_tables(const HostFs& fs, std::vector<std::string>* warnings) {
    MountTables t;
    if (auto text = host_table(fs, "proc/1/mountinfo", "proc/self/mountinfo", warnings))
        for (auto& m : parse_mountinfo(*text))
            t.by_devnum.emplace(std::make_pair(m.major, m.minor), std::move(m.mount_point));
    if (auto text = host_table(fs, "proc/1/mounts", "proc/mounts", warnings))
        for (auto& m : parse_mounts(*text))
            t.by_source.emplace(std::move(m.source), std::move(m.mount_point));
    if (auto text = read_host_file(fs, "proc/swaps", warnings))
        for (auto& s : parse_swaps(*text))
            t.swaps.insert(std::move(s));
    if (auto text = fs.read("sys/power/resume", 64))
        if (auto devnum = parse_devnum(*text); devnum && *devnum != std::make_pair(0u, 0u))
            t.resume = devnum;
    return t;
}

NetTables read_net_tables(const HostFs& fs, std::vector<std::string>* warnings) {
    NetTables t;
    if (auto text = read_host_file(fs, "proc/net/route", warnings))
        t.routed = parse_route_ifaces(*text);
    if (auto text = read_host_file(fs, "proc/net/ipv6_route", warnings))
        t.routed.merge(parse_ipv6_route_ifaces(*text));
    // Addresses are only meaningful for the kernel we run on, never for a captured tree.
    if (fs.live())
        t.addressed = live_addressed_ifaces();
    for (const auto& name : fs.list("sys/class/net"))
        if (auto dir = fs.resolve("sys/class/net/" + name))
            if (auto owner = nearest_function(*dir))
                t.netdevs.emplace_back(name, *owner);
    return t;
}

std::unique_ptr<TableWatch> watch_kernel_tables(std::vector<std::string>* notes) {
    return std::make_unique<KernelTableWatch>(notes);
}

HostTables::HostTables(std::unique_ptr<TableWatch> watch) : watch_(std::move(watch)) {}
HostTables::~HostTables() = default;
HostTables::HostTables(HostTables&&) noexcept = default;
HostTables& HostTables::operator=(HostTables&&) noexcept = default;

const MountTables& HostTables::mounts(const HostFs& fs, std::vector<std::string>* warnings) {
    // Asked before reading: a change during the read is news the next time.
    bool changed = !watch_ || watch_->mounts_changed();
    if (changed || !mounts_) {
        mounts_ = std::make_unique<MountTables>(read_mount_tables(fs, warnings));
        ++mount_reads_;
    }
    return *mounts_;
}

const NetTables& HostTables::network(const HostFs& fs, std::vector<std::string>* warnings,
                                     const std::vector<std::pair<PciAddress, std::string>>& nics) {
    bool changed = !watch_ || watch_->network_changed();
    if (!changed && network_) {
        std::set<std::pair<std::string, PciAddress>> listed(network_->netdevs.begin(),
                                                            network_->netdevs.end());
        for (const auto& [addr, devpath] : nics)
            for (const auto& dir : net_dirs(fs, devpath))
                for (const auto& name : fs.list(dir))
                    changed = changed || !listed.count({name, addr});
    }
    if (changed || !network_) {
        network_ = std::make_unique<NetTables>(read_net_tables(fs, warnings));
        ++network_reads_;
    }
    return *network_;
}

}  // namespace vfiod
