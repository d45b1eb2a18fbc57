#!/bin/bash
# dracut module of vfiod (docs/DESIGN.md §14): puts the configuration's early entries into the
# initramfs, with the script that writes their overrides in the cmdline hook (before udevd and
# before rd.driver.pre loads anything) and the drivers they name. It never fails the build.
# shellcheck disable=SC2154 # dracut sets kernel, initdir and moddir

VFIOCTL=@bindir@/vfioctl
APPLY=@applyscript@

# The list of `vfioctl initramfs` into FILE; an image build (VFIOD_IMAGE_BUILD=1) is not for the
# live host's devices, so it matches by address and ID. Further arguments go to vfioctl.
vfiod_list() {
    local out=$1
    shift
    [[ ${VFIOD_IMAGE_BUILD:-} == 1 ]] && set -- "$@" --image
    "$VFIOCTL" initramfs --output "$out" "$@"
}

# Included by default only when the configuration has early entries. No --kernel here: that
# would write the record of an initramfs this call does not build.
check() {
    [[ -x $VFIOCTL ]] || return 1
    local tmp rc=255
    tmp=$(mktemp) || return 255
    vfiod_list "$tmp" 2>/dev/null && grep -q '^[^#]' "$tmp" && rc=0
    rm -f "$tmp"
    return "$rc"
}

depends() {
    return 0
}

install() {
    local list=/etc/vfiod/early
    mkdir -p "$initdir/etc/vfiod"
    if ! vfiod_list "$initdir$list" --kernel "$kernel"; then
        echo "W: vfiod: vfioctl initramfs failed; this initramfs binds no device early" >&2
        : >"$initdir$list"
    fi
    inst_simple "$APPLY"
    inst_multiple -o readlink modprobe
    inst_hook cmdline 00 "$moddir/vfiod-early.sh"
    return 0
}

# After install(): the drivers the list names (vfio-pci when there is none, as with --kernel-only).
installkernel() {
    local list=$initdir/etc/vfiod/early drivers
    [[ -s $list ]] && drivers=$("$APPLY" --drivers "$list")
    drivers=${drivers:-vfio-pci}
    # shellcheck disable=SC2086 # one word a driver
    hostonly='' instmods $drivers || echo "W: vfiod: cannot add $drivers" >&2
    return 0
}
