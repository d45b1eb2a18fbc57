# The systemd guest's root (host / over 9p, read-only, with a tmpfs overlay carrying the
# installed project and the payload), built at NEWROOT by the harness's busybox /init and by
# the test boot script of Debian's initramfs (initramfs/scripts/vmtest). Sourced; fail() is the
# caller's. busybox's mount throughout: Debian's initramfs has klibc's first on its PATH.
guest_root() {
    newroot=$1
    modprobe -a virtio_pci 9pnet_virtio 9p overlay || fail "modprobe 9p/overlay"
    mkdir -p /lower /upper "$newroot"
    # No cache=loose: it merges inodes by 9p qid, and the host's /proc and /sys (both inode 1 on
    # their own filesystems) then become one directory.
    busybox mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /lower ||
        fail "mount 9p hostroot"
    busybox mount -t tmpfs -o mode=0755 tmpfs /upper
    mkdir -p /upper/u /upper/w
    busybox mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w \
        "$newroot" || fail "mount overlay"
    cp -a /payload/overlay/. "$newroot/" || fail "copy overlay payload"
    mkdir -p "$newroot/vmtest"
    cp -a /payload/scenario.sh /payload/lib.sh "$newroot/vmtest/"

    # The guest kernel's own modules, unpacked on the host, reached through the 9p root.
    kver=$(uname -r)
    kmods=$(cat /payload/kmods)
    mkdir -p "$newroot/usr/lib/modules/$kver"
    busybox mount --bind "/lower$kmods" "$newroot/usr/lib/modules/$kver" ||
        fail "bind modules $kmods"
    # systemd-tmpfiles would otherwise walk the host's /tmp over 9p.
    busybox mount -t tmpfs tmpfs "$newroot/tmp"
    busybox mount -t tmpfs tmpfs "$newroot/var/tmp"

    # The host's /.dockerenv (if any) would make systemd believe it runs in a container, and a
    # container image's policy-rc.d (exit 101) keeps maintainer scripts from starting or
    # stopping services (package-lifecycle).
    rm -f "$newroot/.dockerenv" "$newroot/run/.containerenv" "$newroot/usr/sbin/policy-rc.d"
}
