#!/bin/bash
# Fetches the guest kernel (a Debian package, nothing else) and builds the base busybox initramfs.
#
# usage: prepare.sh OUT_DIR
#        prepare.sh --mdev-packages OUT_DIR    (prints the Debian packages the mdev samples need)
# Everything lands under OUT_DIR and is reused: a second run downloads nothing and rebuilds nothing
# unless an input changed. Concurrent runs (parallel meson tests) serialize on a lock.
# The kernel's sample mdev parents (mdev-samples.sh) join the kernel's module tree when their
# sources are installed and VFIOD_MDEV_SAMPLES is not "off"; otherwise OUT_DIR/mdev-samples.missing
# says why, and run.py skips the scenarios that need them (or fails them under CI=true).
set -euo pipefail

print_packages=
if [[ ${1:-} == --mdev-packages ]]; then
    print_packages=1
    shift
fi
out=${1:?usage: prepare.sh [--mdev-packages] OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)

exec 9>"$out/.prepare.lock"
flock 9

# Modules the guests load by name; their dependencies are resolved below, so only the names the
# scenarios and /init ask for are listed here.
modules=(e1000e snd-hda-intel vfio-pci nvme virtio_pci virtio_net 9pnet_virtio 9p overlay aer_inject)

log() { echo "prepare: $*" >&2; }

fetch_kernel() {
    local pkg deb
    mkdir -p "$out/debs"
    deb=$(ls "$out"/debs/linux-image-*-amd64_*.deb 2>/dev/null | head -n1 || true)
    if [[ -n $deb ]]; then
        echo "$deb"; return
    fi
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    if [[ -z $pkg && $(id -u) == 0 ]]; then
        log "apt lists are empty; running apt-get update"
        apt-get update -qq >&2
        pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
    fi
    [[ -n $pkg ]] || { log "cannot resolve linux-image-amd64 (apt-get update?)"; exit 1; }
    log "downloading $pkg"
    (cd "$out/debs" && apt-get download -q "$pkg" >&2) || {
        [[ $(id -u) == 0 ]] || exit 1
        apt-get update -qq >&2
        (cd "$out/debs" && apt-get download -q "$pkg" >&2)
    }
    ls "$out"/debs/linux-image-*-amd64_*.deb | head -n1
}

unpack_kernel() {
    local deb=$1
    if [[ -f $out/kernel/.unpacked && $(cat "$out/kernel/.unpacked") == "$(basename "$deb")" ]]; then
        return
    fi
    log "unpacking $(basename "$deb")"
    rm -rf "$out/kernel"
    mkdir -p "$out/kernel"
    dpkg -x "$deb" "$out/kernel"
    local kver
    kver=$(ls "$out/kernel/lib/modules" | head -n1)
    # The package ships no modules.dep; the full tree is also what the systemd guest mounts.
    depmod -b "$out/kernel" "$kver"
    basename "$deb" >"$out/kernel/.unpacked"
}

# Copies the named modules and everything they depend on into the initramfs staging tree.
stage_modules() {
    local kroot=$1 kver=$2 stage=$3 m path
    local dst=$stage/lib/modules/$kver
    mkdir -p "$dst"
    for m in "${modules[@]}"; do
        modprobe -d "$kroot" -S "$kver" --show-depends "$m" | while read -r verb path _; do
            [[ $verb == insmod ]] || continue
            mkdir -p "$stage/$(dirname "${path#"$kroot"/}")"
            cp -n "$path" "$stage/${path#"$kroot"/}"
        done
    done
    cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$dst/"
    depmod -b "$stage" "$kver"
}

# The packages mdev-samples.sh builds from: the headers of the guest kernel and the kernel source
# of the guest kernel's very Debian version (linux-image-6.1.0-57-amd64 6.1.192-3 ->
# linux-headers-6.1.0-57-amd64, linux-source-6.1=6.1.192-3).
mdev_packages() {
    local kver=$1 pkgver=$2
    echo "linux-headers-$kver"
    echo "linux-source-$(echo "$kver" | cut -d. -f1-2)=$pkgver"
}

# Puts the sample mdev parents (mtty, mdpy, mbochs) into the unpacked kernel's module tree, under
# extra/, and runs depmod: both guests then modprobe them like any module of the kernel (the
# systemd guest bind-mounts this tree), and modprobe loads vfio and mdev before them.
add_mdev_samples() {
    local kver=$1 pkgver=$2 built stamp
    local dst=$out/kernel/lib/modules/$kver/extra/vfio-mdev-samples
    rm -f "$out/mdev-samples.missing"
    if [[ ${VFIOD_MDEV_SAMPLES:-} == off ]]; then
        echo "mdev-samples: turned off (VFIOD_MDEV_SAMPLES=off)" >"$out/mdev-samples.log"
    fi
    if [[ ${VFIOD_MDEV_SAMPLES:-} == off ]] ||
        ! built=$("$here/mdev-samples.sh" "$kver" "$pkgver" 2>"$out/mdev-samples.log"); then
        tail -n 1 "$out/mdev-samples.log" >"$out/mdev-samples.missing"
        log "no mdev samples: $(cat "$out/mdev-samples.missing")"
        if [[ -d $dst ]]; then
            rm -rf "$dst" "$out/kernel/.mdev-samples"
            depmod -b "$out/kernel" "$kver"
        fi
        return
    fi
    stamp="$built $(cat "$built"/*.ko | sha256sum | cut -d' ' -f1)"
    if [[ -f $out/kernel/.mdev-samples && $(cat "$out/kernel/.mdev-samples") == "$stamp" ]]; then
        return
    fi
    rm -rf "$dst"
    mkdir -p "$dst"
    cp "$built"/*.ko "$dst/"
    depmod -b "$out/kernel" "$kver"
    echo "$stamp" >"$out/kernel/.mdev-samples"
    log "mdev samples from $built"
}

build_initramfs() {
    local kver=$1 stage=$out/initramfs
    local inputs stamp
    inputs=$(cat "$here/init" /bin/busybox "$0" | sha256sum | cut -d' ' -f1)
    stamp="$kver $inputs"
    if [[ -f $out/base.cpio.gz && -f $out/.base.stamp && $(cat "$out/.base.stamp") == "$stamp" ]]; then
        return
    fi
    log "building base initramfs for $kver"
    rm -rf "$stage"
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,run,tmp,lower,upper,newroot,payload}
    cp /bin/busybox "$stage/bin/busybox"
    install -m 0755 "$here/init" "$stage/init"
    stage_modules "$out/kernel" "$kver" "$stage"
    (cd "$stage" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet) |
        gzip -1 >"$out/base.cpio.gz.tmp"
    mv "$out/base.cpio.gz.tmp" "$out/base.cpio.gz"
    echo "$stamp" >"$out/.base.stamp"
}

for tool in qemu-system-x86_64 cpio depmod modprobe; do
    command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool || -x /sbin/$tool ]] ||
        { log "missing $tool (apt-get install qemu-system-x86 cpio kmod)"; exit 1; }
done
# Not `busybox --list | grep -q`: grep's early exit would SIGPIPE busybox, and under pipefail
# that fails the check now and then (it did: vm-plan, "missing /bin/busybox" with it installed).
[[ -x /bin/busybox && $'\n'$(/bin/busybox --list)$'\n' == *$'\n'switch_root$'\n'* ]] ||
    { log "missing /bin/busybox (apt-get install busybox-static)"; exit 1; }
export PATH=$PATH:/usr/sbin:/sbin

deb=$(fetch_kernel)
unpack_kernel "$deb"
kver=$(ls "$out/kernel/lib/modules" | head -n1)
pkgver=$(dpkg-deb -f "$deb" Version)
if [[ -n $print_packages ]]; then
    mdev_packages "$kver" "$pkgver"
    exit 0
fi
add_mdev_samples "$kver" "$pkgver"
ln -sfn "kernel/boot/vmlinuz-$kver" "$out/vmlinuz"
echo "$kver" >"$out/kver"
build_initramfs "$kver"
log "ready: $out/vmlinuz $out/base.cpio.gz ($kver)"
