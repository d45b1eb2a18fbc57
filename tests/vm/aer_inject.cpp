// vfiod-aer-inject: the real-kernel health scenario's two tools (docs/DESIGN.md §13); a test
// program only, never installed.
//
//   vfiod-aer-inject inject BDF --cor MASK | --uncor MASK
//       Sends one PCIe error through the kernel's AER driver, as if BDF's root port had received
//       it: writes a struct aer_error_inj to /dev/aer_inject (module aer_inject). MASK is the bits
//       of the AER Correctable or Uncorrectable Error Status register. Prints the boot-clock time
//       of the write (the clock of /proc/uptime), so a scenario can time what follows.
//   vfiod-aer-inject listen SECONDS
//       Prints every kernel uevent (NETLINK_KOBJECT_UEVENT, group 1: the kernel's own, not udev's)
//       for SECONDS, one line each: its boot-clock time, then ACTION, DEVPATH, SUBSYSTEM and any
//       ERROR_EVENT, DEVICE_ONLINE and DRIVER as KEY=VALUE. The busybox guest has no udevadm. A
//       first line "listening" says the socket is bound: no event after it is missed.
//
// Exit status: 0 done; 1 the kernel refused the injection, or the socket failed; 2 bad usage;
// 3 /dev/aer_inject is missing (modprobe aer_inject).
// It needs only libc (no std::string, nothing that throws): run.py copies every library a
// program needs into the guest's initramfs, and libstdc++ alone would slow the boot.
#include <fcntl.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

namespace {

// The kernel's struct aer_error_inj (drivers/pci/pcie/aer_inject.c, 6.1), naturally aligned: it
// accepts any size from the offset of `domain` (domain 0 then) up to the whole struct.
struct AerErrorInj {
    std::uint8_t bus, dev, fn;
    std::uint32_t uncor_status, cor_status;
    std::uint32_t header_log0, header_log1, header_log2, header_log3;
    std::uint32_t domain;
};
static_assert(offsetof(AerErrorInj, uncor_status) == 4 && offsetof(AerErrorInj, domain) == 28 &&
              sizeof(AerErrorInj) == 32);

constexpr int kRefused = 1, kUsage = 2, kNoInjector = 3;

int usage() {
    std::fprintf(stderr, "usage: vfiod-aer-inject inject BDF --cor MASK | --uncor MASK\n"
                         "       vfiod-aer-inject listen SECONDS\n");
    return kUsage;
}

double boot_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_BOOTTIME, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

// A whole unsigned number (base prefix allowed) no larger than max; false on anything else.
bool parse_number(const char* text, unsigned long max, unsigned long& out) {
    if (*text == '\0' || *text == '-')
        return false;
    char* end = nullptr;
    errno = 0;
    out = std::strtoul(text, &end, 0);
    return errno == 0 && *end == '\0' && out <= max;
}

// DOMAIN:BUS:DEV.FN as sysfs spells it, e.g. 0000:01:00.0.
bool parse_bdf(const char* text, AerErrorInj& inj) {
    unsigned domain = 0, bus = 0, dev = 0, fn = 0;
    int used = 0;
    if (std::strlen(text) != 12 ||
        std::sscanf(text, "%4x:%2x:%2x.%1x%n", &domain, &bus, &dev, &fn, &used) != 4 ||
        used != 12 || dev > 31 || fn > 7)
        return false;
    inj.domain = domain;
    inj.bus = std::uint8_t(bus);
    inj.dev = std::uint8_t(dev);
    inj.fn = std::uint8_t(fn);
    return true;
}

const char* refusal(int err) {
    switch (err) {
    case ENODEV: return "no such PCI function, or no root port or AER service above it";
    case EPROTONOSUPPORT: return "the function or its root port has no AER capability";
    case EINVAL: return "every bit of MASK is masked by the function's AER mask register";
    case EPERM: return "needs CAP_SYS_ADMIN";
    default: return std::strerror(err);
    }
}

int inject(int argc, char** argv) {
    AerErrorInj inj{};
    if (argc != 5 || !parse_bdf(argv[2], inj)) {
        if (argc == 5)
            std::fprintf(stderr, "vfiod-aer-inject: '%s' is not a PCI address like 0000:01:00.0\n",
                         argv[2]);
        return usage();
    }
    const std::string_view kind = argv[3];
    unsigned long mask = 0;
    if ((kind != "--cor" && kind != "--uncor") || !parse_number(argv[4], 0xffffffffUL, mask) ||
        mask == 0) {
        std::fprintf(stderr, "vfiod-aer-inject: want --cor or --uncor, then a non-zero 32-bit "
                             "mask\n");
        return usage();
    }
    (kind == "--cor" ? inj.cor_status : inj.uncor_status) = std::uint32_t(mask);

    int fd = ::open("/dev/aer_inject", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        std::fprintf(stderr, "vfiod-aer-inject: /dev/aer_inject: %s%s\n", std::strerror(err),
                     err == ENOENT ? " (modprobe aer_inject)" : "");
        return err == ENOENT ? kNoInjector : kRefused;
    }
    double at = boot_seconds();
    ssize_t n = ::write(fd, &inj, sizeof inj);
    int err = errno;
    ::close(fd);
    if (n != ssize_t(sizeof inj)) {
        std::fprintf(stderr, "vfiod-aer-inject: %s: %s\n", argv[2],
                     n < 0 ? refusal(err) : "short write");
        return kRefused;
    }
    std::printf("%.6f injected %s=0x%lx into %s\n", at, kind == "--cor" ? "cor" : "uncor", mask,
                argv[2]);
    return 0;
}

bool wanted_key(std::string_view key) {
    for (std::string_view k : {"ACTION", "DEVPATH", "SUBSYSTEM", "ERROR_EVENT", "DEVICE_ONLINE",
                               "DRIVER"})
        if (key == k)
            return true;
    return false;
}

// One kernel uevent: "ACTION@DEVPATH", then NUL-separated KEY=VALUE pairs.
void print_uevent(const char* buf, std::size_t len) {
    std::printf("%.6f", boot_seconds());
    std::size_t pos = ::strnlen(buf, len) + 1; // skip the header; its fields come again
    while (pos < len) {
        std::string_view pair(buf + pos, ::strnlen(buf + pos, len - pos));
        pos += pair.size() + 1;
        std::size_t eq = pair.find('=');
        if (eq != std::string_view::npos && wanted_key(std::string_view(pair.data(), eq)))
            std::printf(" %.*s", int(pair.size()), pair.data());
    }
    std::printf("\n");
}

int listen(int argc, char** argv) {
    unsigned long seconds = 0;
    if (argc != 3 || !parse_number(argv[2], 86400, seconds) || seconds == 0) {
        std::fprintf(stderr, "vfiod-aer-inject: SECONDS is a whole number from 1 to 86400\n");
        return usage();
    }
    int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = 1; // the kernel's uevents (udev re-sends its own on group 2)
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        std::fprintf(stderr, "vfiod-aer-inject: uevent socket: %s\n", std::strerror(errno));
        return kRefused;
    }
    // A recovery sends a few events per function; a storm beyond the buffer is reported, not
    // silently lost.
    int rcvbuf = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("listening\n");

    const double deadline = boot_seconds() + double(seconds);
    static char buf[16384];
    for (double left; (left = deadline - boot_seconds()) > 0;) {
        pollfd p{fd, POLLIN, 0};
        int r = ::poll(&p, 1, int(left * 1000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            std::fprintf(stderr, "vfiod-aer-inject: poll: %s\n", std::strerror(errno));
            return kRefused;
        }
        if (r == 0)
            continue;
        sockaddr_nl from{};
        iovec iov{buf, sizeof buf - 1};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        ssize_t n = ::recvmsg(fd, &msg, 0);
        if (n < 0 && errno == ENOBUFS) {
            std::printf("%.6f LOST uevents (receive buffer overrun)\n", boot_seconds());
            continue;
        }
        if (n < 0) {
            std::fprintf(stderr, "vfiod-aer-inject: recvmsg: %s\n", std::strerror(errno));
            return kRefused;
        }
        if (from.nl_pid != 0) // only the kernel's, never a process's forgery
            continue;
        print_uevent(buf, std::size_t(n));
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    const std::string_view mode = argc > 1 ? argv[1] : "";
    if (mode == "inject")
        return inject(argc, argv);
    if (mode == "listen")
        return listen(argc, argv);
    return usage();
}
