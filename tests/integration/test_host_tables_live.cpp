// io/host_tables' watch of the running kernel, driven by the kernel's real signals: the binary
// re-runs its tests as pid 1 of private mount, network and pid namespaces (root only; exit 77
// otherwise), with a fresh /proc, so /proc/1/mountinfo is the test's own mount table and the
// rtnetlink socket hears only the test's own netns. Every mount is made after / was made
// MS_PRIVATE, and every link lives in the private netns: the host sees nothing.
//
// What it holds: a mount, unmount, link, address or route change is seen at the next decision;
// with no change, no table is read again; a change made while the tables are being read is seen
// at the decision after; an overflowed netlink socket (ENOBUFS) re-reads the tables.
#include <gtest/gtest.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "io/host_fs.hpp"
#include "io/host_tables.hpp"

namespace vfiod::test {
namespace {


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

// A HostFs that runs `during` once, right after the read of `rel`: a change made while
// the tables are being read.
class MidReadFs : public HostFs {
public:
    MidReadFs() : HostFs("/") {}
    std::string rel;
    std::function<void()> during;

    std::optional<std::string> read(std::string_view r, size_t max, std::string* why) const override {
        auto out = HostFs::read(r, max, why);
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

    HostFs fs_{"/"};
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
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) != 0) {
        std::printf("SKIP: unshare(mount, net, pid): %s\n", std::strerror(errno));
        return 77;
    }
    pid_t child = ::fork();
    if (child < 0) {
        std::perror("fork");
        return 1;
    }
    if (child == 0) {
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
        ::_exit(RUN_ALL_TESTS());
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    std::printf("test process killed by signal %d\n", WTERMSIG(status));
    return 1;
}
