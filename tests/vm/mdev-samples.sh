#!/bin/bash
# Builds the kernel's sample mdev parent drivers (samples/vfio-mdev: mtty, mdpy, mbochs) for the
# guest kernel: Debian's kernel ships mdev.ko but no parent driver, so without them nothing could
# make a mediated device there. They build out of tree from Debian's linux-source-<major.minor>
# of the guest kernel's very package version, against linux-headers-<kernel version>;
# scripts/test.sh installs both.
#
# usage: mdev-samples.sh KVER PKGVER    e.g. 6.1.0-57-amd64 6.1.192-3
# Prints the directory holding mtty.ko, mdpy.ko and mbochs.ko. They are cached by kernel and
# package version outside the clone (VFIOD_TEST_CACHE, default /var/cache/vfiod-test, else
# ~/.cache/vfiod-test), so a new clone or build directory reuses them: unpacking the 139 MB
# source archive is most of the cost. Fails, saying why, when they can be neither found nor built.
set -euo pipefail

kver=${1:?usage: mdev-samples.sh KVER PKGVER}
pkgver=${2:?usage: mdev-samples.sh KVER PKGVER}
modules=(mtty mdpy mbochs)
source_pkg=linux-source-$(echo "$kver" | cut -d. -f1-2)
headers=/usr/src/linux-headers-$kver

export PATH=$PATH:/usr/sbin:/sbin

log() { echo "mdev-samples: $*" >&2; }
fail() { log "$*"; exit 1; }

cache=${VFIOD_TEST_CACHE:-/var/cache/vfiod-test}
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/vfiod-test
    mkdir -p "$cache"
fi
dir=$cache/mdev-samples/$kver/$pkgver
# A change to this script (what is built, how) builds them again.
stamp="$(sha256sum <"$0" | cut -d' ' -f1) ${modules[*]}"

cached() {
    [[ -f $dir/.stamp && $(cat "$dir/.stamp") == "$stamp" ]] || return 1
    for m in "${modules[@]}"; do [[ -f $dir/$m.ko ]] || return 1; done
}

if cached; then
    echo "$dir"
    exit 0
fi
mkdir -p "$cache/mdev-samples"
exec 9>"$cache/mdev-samples/.lock"
flock 9
if cached; then  # built by another run while this one waited
    echo "$dir"
    exit 0
fi

have=$(dpkg-query -W -f='${Status} ${Version}' "$source_pkg" 2>/dev/null || true)
[[ $have == "install ok installed $pkgver" ]] ||
    fail "$source_pkg $pkgver is not installed (${have:-not at all}; scripts/test.sh installs it)"
archive=/usr/src/$source_pkg.tar.xz
[[ -f $archive ]] || fail "$archive is missing although $source_pkg is installed"
[[ -f $headers/Makefile ]] ||
    fail "$headers is missing (apt-get install linux-headers-$kver; scripts/test.sh does)"
for tool in make gcc xz modinfo; do
    command -v "$tool" >/dev/null || fail "missing $tool"
done

log "building ${modules[*]} for $kver from $source_pkg $pkgver"
work=$(mktemp -d "$cache/mdev-samples/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xJf "$archive" -C "$work" --wildcards "$source_pkg/samples/vfio-mdev/*"
src=$work/$source_pkg/samples/vfio-mdev
# The samples' own Makefile follows CONFIG_SAMPLE_VFIO_MDEV_*, which Debian's config leaves off.
printf 'obj-m := %s\n' "${modules[*]/%/.o}" >"$src/Kbuild"
rm -f "$src/Makefile"
make -s -C "$headers" M="$src" -j"$(nproc)" modules >"$work/build.log" 2>&1 || {
    tail -n 20 "$work/build.log" >&2
    fail "building the samples against $headers failed"
}
for m in "${modules[@]}"; do
    got=$(modinfo -F vermagic "$src/$m.ko" | cut -d' ' -f1)
    [[ $got == "$kver" ]] || fail "$m.ko was built for '$got', not $kver"
done
rm -rf "$dir"
mkdir -p "$dir"
for m in "${modules[@]}"; do cp "$src/$m.ko" "$dir/"; done
echo "$stamp" >"$dir/.stamp"
echo "$dir"
