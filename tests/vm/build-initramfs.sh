#!/usr/bin/env bash
# Builds the guest's initramfs with Debian's own mkinitramfs and the vfiod hook (and a dracut
# image with vfiod's module, for its contents), for the guest kernel, without touching this
# machine: in a private mount namespace, /usr, /etc and /var are overlays (their upper layers
# on a tmpfs) holding the build's install tree and the test configuration, the guest kernel's
# modules are bound at /usr/lib/modules/KVER and its /boot at /boot. As root (run.py).
#
#   build-initramfs.sh CACHE DESTDIR CONFDIR VFIOD_TOML OUT
#     CACHE: prepare.sh's output; DESTDIR: `meson install --destdir` tree; CONFDIR: the
#     initramfs-tools configuration (tests/vm/initramfs); OUT: a directory for initrd-debian.img,
#     initrd-dracut.img and facts/ (what the guest checks: the init-top ORDER, the lists, the
#     record, the listings, the build times)
set -euo pipefail
cache=$1 dest=$2 conf=$3 toml=$4 out=$5
if [[ -z ${VMTEST_PRIVATE_NS:-} ]]; then
    exec env VMTEST_PRIVATE_NS=1 unshare --mount --propagation private "$0" "$@"
fi
kver=$(cat "$cache/kver")
facts=$out/facts
mkdir -p "$facts"

layers=$out/layers
mkdir -p "$layers"
mount -t tmpfs tmpfs "$layers"
for d in usr etc var; do
    mkdir -p "$layers/$d/upper" "$layers/$d/work"
done
cp -a "$dest/usr/." "$layers/usr/upper/"
# The install tree's /lib (units, udev rule) belongs under /usr on this merged-/usr root.
[[ -d $dest/lib ]] && cp -a "$dest/lib/." "$layers/usr/upper/lib/"
cp -a "$dest/etc/." "$layers/etc/upper/"
install -D -m 0644 "$toml" "$layers/etc/upper/vfiod/vfiod.toml"
for d in usr etc var; do
    mount -t overlay overlay \
        -o "lowerdir=/$d,upperdir=$layers/$d/upper,workdir=$layers/$d/work" "/$d"
done
mkdir -p "/usr/lib/modules/$kver"
mount --bind "$cache/kernel/lib/modules/$kver" "/usr/lib/modules/$kver"
mount --bind "$cache/kernel/boot" /boot
# The host's own devices are not the guest's: vfioctl matches by address and ID only.
export VFIOD_IMAGE_BUILD=1
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'; }

start=$EPOCHREALTIME
mkinitramfs -d "$conf" -o "$out/initrd-debian.img" "$kver" 2>"$facts/mkinitramfs.err"
elapsed "$start" >"$facts/mkinitramfs.seconds"
unpack=$out/debian-unpacked
rm -rf "$unpack"
mkdir -p "$unpack"
(cd "$unpack" && zcat "$out/initrd-debian.img" | cpio -id --quiet)
cp "$unpack/scripts/init-top/ORDER" "$facts/init-top-ORDER"
cp "$unpack/etc/vfiod/early" "$facts/debian-early" || : >"$facts/debian-early"
(cd "$unpack" && find . -name '*.ko' | sed 's|.*/||') >"$facts/debian-modules"
cp "/var/lib/vfiod/initramfs-$kver.json" "$facts/debian-record.json" 2>/dev/null || true

start=$EPOCHREALTIME
mkdir -p "$out/dracut.conf.d"
dracut --quiet --force --no-hostonly --no-early-microcode --gzip --conf /dev/null \
    --confdir "$out/dracut.conf.d" -m "vfiod" --kver "$kver" "$out/initrd-dracut.img" \
    2>"$facts/dracut.err" || echo "dracut failed: $?" >>"$facts/dracut.err"
elapsed "$start" >"$facts/dracut.seconds"
lsinitrd "$out/initrd-dracut.img" >"$facts/dracut-listing" 2>&1 || true
lsinitrd -f etc/vfiod/early "$out/initrd-dracut.img" >"$facts/dracut-early" 2>&1 || true
