// vfiod-exclusive-holder DEVICE READY_FILE: holds block device DEVICE with an O_EXCL open, the
// way ZFS or LVM claims a disk without mounting it, until it is killed. It creates READY_FILE once
// the claim is taken, so a scenario can wait for it. The busybox guest has no other way to open
// with O_EXCL (its shell and tools cannot); a test program only, never installed.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: vfiod-exclusive-holder DEVICE READY_FILE\n");
        return 2;
    }
    // Read-only: the claim is the point, and the disk must see no writes from the test.
    int fd = ::open(argv[1], O_RDONLY | O_EXCL | O_CLOEXEC);
    if (fd < 0) {
        std::fprintf(stderr, "vfiod-exclusive-holder: %s: %s\n", argv[1], std::strerror(errno));
        return 1;
    }
    int ready = ::open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (ready < 0) {
        std::fprintf(stderr, "vfiod-exclusive-holder: %s: %s\n", argv[2], std::strerror(errno));
        return 1;
    }
    ::close(ready);
    // The kernel drops the claim with the descriptor when a signal ends the process.
    for (;;)
        ::pause();
}
