// io/host_tables' watch of the running kernel, driven by the kernel's real signals: the binary
// re-runs its tests as pid 1 of private mount, network and pid namespaces (root only; exit 77
// otherwise), with a fresh /proc, so /proc/1/mountinfo is the test's own mount table and the
// rtnetlink socket hears only the test's own netns. Every mount is made after / was made
// MS_PRIVATE, and every link lives in the private netns: the host sees nothing.
//
// What it holds: a mount, unmount, link, address or route change is seen at the next decision;
// with no change, no table is read again; a change made while the tables are being read is seen
// at the decision after; an overflowed netlink socket (ENOBUFS) re-reads the tables; and a
// broken host (5,000 mounts, mount points with blanks, newlines, backslashes and invalid UTF-8,
// a flood of netlink messages, poll/recv failing with EINTR or ENOBUFS) costs bounded time.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "io/host_fs.hpp"
#include "io/host_tables.hpp"

// Failure injection for the watch's poll(2) and recv(2): this executable's definitions take
// precedence over libc's for the engine linked into it; each counter fails that many calls.
namespace inject {
std::atomic<int> poll_eintr{0};
std::atomic<int> recv_errno{0};  // the errno the next recv_fails calls fail with
std::atomic<int> recv_fails{0};
}  // namespace inject

namespace {
template <typename F>
F real(const char* name) {
    return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
bool take(std::atomic<int>& n) {
    int v = n.load();
    while (v > 0)
        if (n.compare_exchange_weak(v, v - 1))
            return true;
    return false;
}
}  // namespace

extern "C" int poll(struct pollfd* fds, nfds_t n, int timeout) {
    if (take(inject::poll_eintr)) {
        errno = EINTR;
        return -1;
    }
    static auto fn = real<int (*)(pollfd*, nfds_t, int)>("poll");
    return fn(fds, n, timeout);
}
extern "C" int __poll_chk(struct pollfd* fds, nfds_t n, int timeout, size_t) {
    return poll(fds, n, timeout);
}
extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
    if (take(inject::recv_fails)) {
        errno = inject::recv_errno.load();
        return -1;
    }
    static auto fn = real<ssize_t (*)(int, void*, size_t, int)>("recv");
    return fn(fd, buf, len, flags);
}
extern "C" ssize_t __recv_chk(int fd, void* buf, size_t len, size_t, int flags) {
    return recv(fd, buf, len, flags);
}

namespace vfiod::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Runs `ip -batch -` on the lines given (one process for a whole burst).
void ip(const std::string& lines) {
    FILE* p = ::popen("ip -batch - >/dev/null", "w");
    ASSERT_NE(p, nullptr);
    ::fputs(lines.c_str(), p);
    ASSERT_EQ(::pclose(p), 0) << lines;
}

std::pair<unsigned, unsigned> devnum(const std::string& path) {
    struct stat st{};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return {major(st.st_dev), minor(st.st_dev)};
}

void make_dir(const std::string& path) {
    ASSERT_TRUE(::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) << path << ": " << errno;
}

void mount_tmpfs(const std::string& source, const std::string& path) {
    make_dir(path);
    ASSERT_EQ(::mount(source.c_str(), path.c_str(), "tmpfs", 0, "size=64k"), 0)
        << path << ": " << std::strerror(errno);
}

// A HostFs that runs `during` once, right after the read or list of `rel`: a change made while
// the tables are being read.
class MidReadFs : public KernelHostFs {
public:
    MidReadFs() : KernelHostFs("/") {}
    std::string rel;
    std::function<void()> during;

    std::optional<std::string> read(std::string_view r, size_t max, std::string* why,
                                    const Dir* in) const override {
        auto out = KernelHostFs::read(r, max, why, in);
        fire(r);
        return out;
    }
    std::vector<std::string> list(std::string_view r, int* err) const override {
        auto out = KernelHostFs::list(r, err);
        fire(r);
        return out;
    }

private:
    void fire(std::string_view r) const {
        if (during && r == rel)
            std::exchange(const_cast<MidReadFs*>(this)->during, nullptr)();
    }
};

class LiveTables : public ::testing::Test {
protected:
    void SetUp() override {
        tables_ = HostTables(watch_kernel_tables(&notes_));
        ASSERT_TRUE(notes_.empty()) << notes_.front();
    }
    const MountTables& mounts() { return tables_.mounts(fs_, &warnings_); }
    const NetTables& network() { return tables_.network(fs_, &warnings_); }

    KernelHostFs fs_{"/"};
    std::vector<std::string> notes_, warnings_;
    HostTables tables_;
};

TEST_F(LiveTables, MountAndUnmountAreSeenAtTheNextDecisionAndNothingElseRereads) {
    mounts();
    unsigned reads = tables_.mount_reads();
    mounts();
    mounts();
    EXPECT_EQ(tables_.mount_reads(), reads) << "no change, yet the mount table was read again";

    mount_tmpfs("vfiod-live-a", "/tmp/a");
    const MountTables& t = mounts();
    EXPECT_EQ(tables_.mount_reads(), reads + 1);
    auto dev = devnum("/tmp/a");
    ASSERT_TRUE(t.by_devnum.count(dev)) << "the new tmpfs is not in the table";
    EXPECT_EQ(t.by_devnum.at(dev), "/tmp/a");
    ASSERT_TRUE(t.by_source.count("vfiod-live-a"));
    EXPECT_EQ(t.by_source.at("vfiod-live-a"), "/tmp/a");
    mounts();
    EXPECT_EQ(tables_.mount_reads(), reads + 1);

    ASSERT_EQ(::umount("/tmp/a"), 0);
    const MountTables& u = mounts();
    EXPECT_EQ(tables_.mount_reads(), reads + 2);
    EXPECT_FALSE(u.by_devnum.count(dev));
    EXPECT_FALSE(u.by_source.count("vfiod-live-a"));
    mounts();
    EXPECT_EQ(tables_.mount_reads(), reads + 2);
}

TEST_F(LiveTables, AMountDuringTheReadIsSeenAtTheDecisionAfter) {
    MidReadFs fs;
    fs.rel = "proc/1/mountinfo";
    fs.during = [] { mount_tmpfs("vfiod-live-mid", "/tmp/mid"); };
    EXPECT_FALSE(tables_.mounts(fs, &warnings_).by_devnum.count(devnum("/tmp/mid")))
        << "mounted after the read: the test did not test the race";
    EXPECT_TRUE(tables_.mounts(fs, &warnings_).by_devnum.count(devnum("/tmp/mid")))
        << "a mount made while the table was read is lost until the next change";
    ASSERT_EQ(::umount("/tmp/mid"), 0);
}

TEST_F(LiveTables, LinksAddressesAndRoutesAreSeenAtTheNextDecisionAndNothingElseRereads) {
    network();
    unsigned reads = tables_.network_reads();
    network();
    EXPECT_EQ(tables_.network_reads(), reads) << "no change, yet the network tables were read";

    ip("link add vt0 type veth peer name vt1\n");
    network();
    EXPECT_EQ(tables_.network_reads(), reads + 1) << "a new link was not news";
    network();
    EXPECT_EQ(tables_.network_reads(), reads + 1);

    ip("address add 10.77.0.1/24 dev vt0\n");
    EXPECT_TRUE(network().addressed.count("vt0"));
    EXPECT_EQ(tables_.network_reads(), reads + 2);

    ip("route add 10.78.0.0/16 dev lo\n");
    EXPECT_TRUE(network().routed.count("lo"));
    EXPECT_EQ(tables_.network_reads(), reads + 3);
    network();
    EXPECT_EQ(tables_.network_reads(), reads + 3);

    ip("route del 10.78.0.0/16 dev lo\n");
    EXPECT_FALSE(network().routed.count("lo"));
    ip("link set vt0 name vt0r\n");
    auto& renamed = network().addressed;
    EXPECT_TRUE(renamed.count("vt0r"));
    EXPECT_FALSE(renamed.count("vt0"));
    ip("link del vt0r\n");
    EXPECT_FALSE(network().addressed.count("vt0r"));
}

TEST_F(LiveTables, ALinkRenamedDuringTheReadIsSeenAtTheDecisionAfter) {
    ip("link add vm0 type veth peer name vm1\naddress add 10.79.0.1/24 dev vm0\n");
    MidReadFs fs;
    fs.rel = "sys/class/net";
    fs.during = [] { ip("link set vm0 name vm0r\n"); };
    // Addresses are asked before the netdevs are listed: this reading has the old name.
    EXPECT_TRUE(tables_.network(fs, &warnings_).addressed.count("vm0"));
    auto& after = tables_.network(fs, &warnings_).addressed;
    EXPECT_TRUE(after.count("vm0r")) << "a rename during the read is lost until the next change";
    EXPECT_FALSE(after.count("vm0"));
    ip("link del vm0r\n");
}

// A witness socket as small as the watch's: proves the burst really overflowed such a socket.
int small_rtnl_socket() {
    int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    int size = 16384;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    sockaddr_nl sa{};
    sa.nl_family = AF_NETLINK;
    sa.nl_groups = RTMGRP_IPV4_IFADDR;
    EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa), 0);
    return fd;
}

bool overflowed(int fd) {
    char buf[8192];
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
            return errno == ENOBUFS;
    }
}

TEST_F(LiveTables, AnOverflowedNetlinkSocketRereadsTheTables) {
    ip("link add vo0 type veth peer name vo1\n");
    EXPECT_FALSE(network().addressed.count("vo0"));
    unsigned reads = tables_.network_reads();

    int witness = small_rtnl_socket();
    std::string burst;
    for (int i = 1; i <= 250; ++i)
        burst += "address add 10.80.0." + std::to_string(i) + "/32 dev vo0\n";
    ip(burst);
    EXPECT_TRUE(overflowed(witness)) << "the burst did not overflow a 16 KiB socket";
    ::close(witness);

    EXPECT_TRUE(network().addressed.count("vo0")) << "an overflowed socket lost the change";
    EXPECT_EQ(tables_.network_reads(), reads + 1);
    network();
    EXPECT_EQ(tables_.network_reads(), reads + 1) << "the overflow is news once, not forever";
    ip("link del vo0\n");
}

// ENOBUFS with nothing queued (the messages were dropped, none is left to read) is a change;
// EINTR is asked again and is not one; any other error is a change.
TEST_F(LiveTables, PollAndRecvErrorsAreChangesOrRetriedNeverNoChange) {
    mounts();
    network();
    unsigned m = tables_.mount_reads(), n = tables_.network_reads();

    inject::poll_eintr = 1;
    mounts();
    EXPECT_EQ(inject::poll_eintr.load(), 0) << "the injection did not reach the watch's poll";
    EXPECT_EQ(tables_.mount_reads(), m) << "an interrupted poll counted as a change";

    inject::poll_eintr = 1;
    mount_tmpfs("vfiod-live-intr", "/tmp/intr");
    EXPECT_TRUE(mounts().by_source.count("vfiod-live-intr")) << "an interrupted poll lost a change";
    EXPECT_EQ(tables_.mount_reads(), m + 1);
    ASSERT_EQ(::umount("/tmp/intr"), 0);
    mounts();
    m = tables_.mount_reads();

    inject::recv_errno = EINTR;
    inject::recv_fails = 3;
    network();
    EXPECT_EQ(inject::recv_fails.load(), 0) << "the injection did not reach the watch's recv";
    EXPECT_EQ(tables_.network_reads(), n) << "an interrupted recv counted as a change";

    for (int err : {ENOBUFS, ENOMEM, EBADF}) {
        inject::recv_errno = err;
        inject::recv_fails = 1;
        network();
        EXPECT_EQ(tables_.network_reads(), ++n) << "recv failing with " << std::strerror(err)
                                                << " was taken for no change";
        network();
        EXPECT_EQ(tables_.network_reads(), n);
    }
    // A recv that is interrupted for ever: the drain gives up and says "changed".
    inject::recv_errno = EINTR;
    inject::recv_fails = 1 << 20;
    auto t0 = Clock::now();
    network();
    int left = inject::recv_fails.exchange(0);
    EXPECT_EQ(tables_.network_reads(), ++n);
    EXPECT_GT(left, 0) << "the drain is not bounded";
    EXPECT_LT(ms_since(t0), 1000.0);
    EXPECT_EQ(tables_.mount_reads(), m);
}

// Mount points as a hostile host writes them: blanks, a newline, a backslash that looks like an
// escape, invalid UTF-8, and a source with a blank. The tables hold the kernel's bytes.
TEST_F(LiveTables, MountPointsWithEscapesAndInvalidUtf8AreReadAsTheKernelHasThem) {
    const std::string base = "/tmp/odd";
    make_dir(base);
    const std::vector<std::string> names = {
        "a b", "tab\there", "new\nline", "back\\040slash", "\xff\xfe bad", "trail\\", "x\\0"};
    for (const auto& n : names)
        mount_tmpfs("vfiod odd " + n, base + "/" + n);
    const MountTables& t = mounts();
    for (const auto& n : names) {
        auto dev = devnum(base + "/" + n);
        ASSERT_TRUE(t.by_devnum.count(dev)) << n;
        EXPECT_EQ(t.by_devnum.at(dev), base + "/" + n);
        ASSERT_TRUE(t.by_source.count("vfiod odd " + n)) << n;
        EXPECT_EQ(t.by_source.at("vfiod odd " + n), base + "/" + n);
    }
    for (const auto& n : names)
        ASSERT_EQ(::umount((base + "/" + n).c_str()), 0) << n;
}

// The process's high-water mark of resident memory.
long peak_rss_kib() {
    rusage ru{};
    ::getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

// A container host's megabytes of mountinfo: read once per change, in bounded time, and not
// again while nothing changes. VFIOD_LIVE_MOUNTS=N measures N mounts instead (linear: 20,000
// mounts, 1.5 MB, read in about 50 ms; the kernel takes seconds to make them).
TEST_F(LiveTables, FiveThousandMountsAreReadOncePerChangeInBoundedTime) {
    const char* n = std::getenv("VFIOD_LIVE_MOUNTS");
    const int kMounts = n ? std::atoi(n) : 5000;
    mount_tmpfs("vfiod-many", "/tmp/many");
    make_dir("/tmp/many/src");
    for (int i = 0; i < kMounts; ++i) {
        std::string p = "/tmp/many/m" + std::to_string(i);
        make_dir(p);
        ASSERT_EQ(::mount("/tmp/many/src", p.c_str(), nullptr, MS_BIND, nullptr), 0) << p;
    }
    std::ifstream info("/proc/1/mountinfo", std::ios::binary);
    size_t bytes = std::string(std::istreambuf_iterator<char>(info), {}).size();
    ASSERT_GT(bytes, kMounts * 60u);

    long rss0 = peak_rss_kib();
    auto t0 = Clock::now();
    const MountTables& t = mounts();
    double first = ms_since(t0);
    EXPECT_EQ(t.by_devnum.at(devnum("/tmp/many/m" + std::to_string(kMounts - 1))), "/tmp/many") << "first mount point";
    t0 = Clock::now();
    for (int i = 0; i < 100; ++i)
        mounts();
    double kept = ms_since(t0) / 100;
    long grown = peak_rss_kib() - rss0;
    std::printf("# %d mounts, mountinfo %zu bytes: read %.1f ms, kept %.3f ms, peak RSS +%ld KiB\n",
                kMounts, bytes, first, kept, grown);
    EXPECT_LT(first, 2000.0);
    EXPECT_LT(kept, 1.0) << "an unchanged table of 5,000 mounts costs a decision its size";
    EXPECT_LT(grown, 64 * 1024);

    ASSERT_EQ(::umount2("/tmp/many", MNT_DETACH), 0);
    EXPECT_FALSE(mounts().by_source.count("vfiod-many"));
}

// A peer flooding rtnetlink while decisions are made: each decision drains a bounded number of
// messages, so it answers in bounded time and re-reads (the truth: things keep changing).
TEST_F(LiveTables, ANetlinkFloodCostsEachDecisionBoundedTime) {
    ip("link add vf0 type veth peer name vf1\n");
    network();
    std::atomic<bool> stop{false};
    std::thread flood([&] {
        std::string on, off;
        for (int i = 1; i <= 200; ++i) {
            on += "address add 10.81.0." + std::to_string(i) + "/32 dev vf0\n";
            off += "address del 10.81.0." + std::to_string(i) + "/32 dev vf0\n";
        }
        while (!stop) {
            ip(on);
            ip(off);
        }
    });
    double worst = 0;
    unsigned reads = tables_.network_reads();
    auto end = Clock::now() + 1s;
    int asks = 0;
    while (Clock::now() < end) {
        auto t0 = Clock::now();
        network();
        worst = std::max(worst, ms_since(t0));
        ++asks;
        std::this_thread::sleep_for(10ms);
    }
    stop = true;
    flood.join();
    std::printf("# flood: %d decisions, %u re-reads, worst %.1f ms\n", asks,
                tables_.network_reads() - reads, worst);
    EXPECT_GT(tables_.network_reads(), reads);
    EXPECT_LT(worst, 500.0);
    ip("link del vf0\n");
}

}  // namespace
}  // namespace vfiod::test

// Runs the tests as pid 1 of private mount, network and pid namespaces, with a fresh /proc and
// a tmpfs on /tmp; exit 77 (meson's skip) without root or namespaces.
int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    if (::geteuid() != 0) {
        std::puts("SKIP: needs root (private mount and network namespaces)");
        return 77;
    }
    if (::system("command -v ip >/dev/null") != 0) {
        std::puts("SKIP: ip (iproute2) not installed");
        return 77;
    }
    // LeakSanitizer's exit-time scan in this parent reads /proc/self and clones a tracer task,
    // so the parent must stay where it was in both respects (CI's sanitizer run died with
    // "LeakSanitizer has encountered a fatal error" after every test had passed):
    // - only the child enters the new mount and network namespaces, so the child's fresh /proc
    //   is not the parent's too (there the parent has no pid and /proc/self leads nowhere);
    // - after the fork, the parent's children go back to its own pid namespace: the new one
    //   dies with its pid 1, and cloning into a dead pid namespace fails (ENOMEM).
    int own_pid_ns = ::open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (own_pid_ns < 0 || ::unshare(CLONE_NEWPID) != 0) {
        std::printf("SKIP: unshare(pid): %s\n", std::strerror(errno));
        return 77;
    }
    pid_t child = ::fork();
    if (child < 0) {
        std::perror("fork");
        return 1;
    }
    if (child > 0 && ::setns(own_pid_ns, CLONE_NEWPID) != 0) {
        std::perror("setns(own pid namespace)");
        return 1;
    }
    ::close(own_pid_ns);
    if (child == 0) {
        if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0) {
            std::printf("SKIP: unshare(mount, net): %s\n", std::strerror(errno));
            ::_exit(77);
        }
        // Nothing is mounted before propagation to the host is cut. A container may refuse a
        // fresh /proc (its own is partly masked): then there is nothing this test can watch.
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
            std::printf("SKIP: making / private: %s\n", std::strerror(errno));
            ::_exit(77);
        }
        if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0 ||
            ::mount("vfiod-live-tmp", "/tmp", "tmpfs", 0, "size=16m") != 0) {
            std::printf("SKIP: mounting a fresh /proc or /tmp: %s\n", std::strerror(errno));
            ::_exit(77);
        }
        // IPv6 would add link-local addresses and routes on its own timers, news the test did
        // not make; this netns's own setting.
        std::ofstream("/proc/sys/net/ipv6/conf/default/disable_ipv6") << "1\n";
        std::ofstream("/proc/sys/net/ipv6/conf/all/disable_ipv6") << "1\n";
        if (::system("ip link set lo up") != 0)
            ::_exit(1);
        // exit(), not _exit(): LeakSanitizer checks the process that ran the tests.
        std::exit(RUN_ALL_TESTS());
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    std::printf("test process killed by signal %d\n", WTERMSIG(status));
    return 1;
}
