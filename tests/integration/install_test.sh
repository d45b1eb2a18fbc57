#!/bin/bash
# `meson install` with DESTDIR produces the DESIGN §7 tree, and the installed unit is hardened to
# an exposure of at most 2.0 by `systemd-analyze security --offline=yes` (the device plugin's
# and the DRA plugin's, when built, to 2.5).
# Usage: install_test.sh BUILD_DIR
set -u
BUILD=$1
DEST=$(mktemp -d /tmp/vfiod-install.XXXXXX)
trap 'rm -rf "$DEST"' EXIT
failures=0
pass() { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; failures=$((failures + 1)); }

meson install -C "$BUILD" --no-rebuild --destdir "$DEST" >"$DEST.log" 2>&1 \
    || { cat "$DEST.log"; rm -f "$DEST.log"; echo "not ok - meson install"; exit 1; }
rm -f "$DEST.log"
opt() {
    meson introspect "$BUILD" --buildoptions |
        python3 -c "import json,sys; print([o['value'] for o in json.load(sys.stdin) if o['name']=='$1'][0])"
}
prefix=$(opt prefix)
sysconfdir=$(opt sysconfdir)
case "$sysconfdir" in /*) ;; *) sysconfdir=$prefix/$sysconfdir ;; esac
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd)
udevdir=$(pkg-config --variable=udevdir udev)

for f in "$prefix/sbin/vfiod" "$prefix/bin/vfioctl" "$unitdir/vfiod.service" \
         "$udevdir/rules.d/60-vfiod.rules" \
         "$prefix/share/dbus-1/system.d/org.vfiod1.conf" \
         "$prefix/share/dbus-1/system-services/org.vfiod1.service" \
         "$prefix/share/dbus-1/interfaces/org.vfiod1.Manager.xml" \
         "$prefix/share/dbus-1/interfaces/org.vfiod1.Group.xml" \
         "$prefix/share/dbus-1/interfaces/org.vfiod1.Device.xml" \
         "$prefix/share/dbus-1/interfaces/org.vfiod1.PhysicalFunction.xml" \
         "$prefix/share/dbus-1/interfaces/org.vfiod1.MediatedDevice.xml" \
         "$prefix/share/polkit-1/actions/org.vfiod1.policy" \
         "$prefix/share/doc/vfiod/examples/50-vfiod.rules" \
         "$sysconfdir/vfiod/vfiod.toml"; do
    if [ -e "$DEST$f" ]; then pass "installed $f"; else fail "installed $f"; fi
done
# Early binding from the initramfs (DESIGN §14): the hooks run the installed vfioctl and the
# installed apply script.
for f in "$prefix/lib/vfiod/early-apply" "$prefix/share/initramfs-tools/hooks/vfiod" \
         "$prefix/share/initramfs-tools/scripts/init-top/00-vfiod" \
         "$prefix/lib/dracut/modules.d/90vfiod/module-setup.sh" \
         "$prefix/lib/dracut/modules.d/90vfiod/vfiod-early.sh"; do
    if [ -x "$DEST$f" ]; then pass "installed $f, executable"; else fail "installed $f, executable"; fi
done
for f in share/initramfs-tools/hooks/vfiod lib/dracut/modules.d/90vfiod/module-setup.sh; do
    grep -qx "VFIOCTL=$prefix/bin/vfioctl" "$DEST$prefix/$f" &&
        grep -qx "APPLY=$prefix/lib/vfiod/early-apply" "$DEST$prefix/$f" \
        && pass "$f runs the installed vfioctl and apply script" \
        || fail "$f runs the installed vfioctl and apply script"
done
# Man pages, when this build renders them (option man); the plugin's only with the plugin.
if [ -f "$BUILD/man/vfiod.8" ]; then
    for f in man8/vfiod.8 man1/vfioctl.1 man5/vfiod.toml.5; do
        if [ -s "$DEST$prefix/share/man/$f" ]; then pass "installed man/$f"; else fail "installed man/$f"; fi
    done
    for plugin in vfiod-device-plugin vfiod-dra-plugin; do
        plugin_man=$DEST$prefix/share/man/man8/$plugin.8
        if { [ -e "$DEST$prefix/sbin/$plugin" ] && [ -s "$plugin_man" ]; } ||
           { [ ! -e "$DEST$prefix/sbin/$plugin" ] && [ ! -e "$plugin_man" ]; }; then
            pass "$plugin(8) exactly with the plugin"
        else
            fail "$plugin(8) exactly with the plugin"
        fi
    done
    grep -q '^Documentation=man:vfiod(8)' "$DEST$unitdir/vfiod.service" \
        && pass "unit documents man:vfiod(8)" || fail "unit documents man:vfiod(8)"
fi
completionsdir=$(pkg-config --define-variable=datadir="$prefix/share" \
    --variable=completionsdir bash-completion)
if [ -s "$DEST$completionsdir/vfioctl" ]; then pass "installed $completionsdir/vfioctl"
else fail "installed $completionsdir/vfioctl"; fi
grep -q "^ExecStart=$prefix/sbin/vfiod\$" "$DEST$unitdir/vfiod.service" \
    && pass "unit runs the installed vfiod" || fail "unit runs the installed vfiod"
grep -q "$prefix/sbin/vfiod --udev-match" "$DEST$udevdir/rules.d/60-vfiod.rules" \
    && pass "rule calls the installed vfiod" || fail "rule calls the installed vfiod"

# The polkit action and its defaults are part of the contract (DESIGN §6).
policy=$(cat "$DEST$prefix/share/polkit-1/actions/org.vfiod1.policy" 2>/dev/null)
for need in '<action id="org.vfiod1.manage">' '<allow_any>auth_admin</allow_any>' \
            '<allow_inactive>auth_admin</allow_inactive>' '<allow_active>auth_admin_keep</allow_active>'; do
    grep -qF "$need" <<<"$policy" && pass "policy has $need" || fail "policy has $need"
done
xmllint --noout "$DEST$prefix/share/polkit-1/actions/org.vfiod1.policy" \
    && pass "policy is well-formed XML" || fail "policy is well-formed XML"

# The hardening must leave what the daemon needs.
unit=$(cat "$DEST$unitdir/vfiod.service")
for need in "ReadWritePaths=/sys/bus/pci /sys/devices" "RestrictAddressFamilies=AF_UNIX AF_NETLINK" \
            "RuntimeDirectoryPreserve=yes" "Wants=modprobe@vfio_pci.service" "WatchdogSec=3min"; do
    grep -qF "$need" <<<"$unit" && pass "unit has $need" || fail "unit has $need"
done
for forbidden in "PrivateNetwork=yes" "ProcSubset=pid"; do
    grep -qF "$forbidden" <<<"$unit" && fail "unit lacks $forbidden" || pass "unit lacks $forbidden"
done
# The exposure is part of the contract: without systemd-analyze it cannot be shown, so fail.
out=$(systemd-analyze security --offline=yes "$DEST$unitdir/vfiod.service" 2>&1)
level=$(sed -n 's/.*Overall exposure level for vfiod.service: \([0-9.]*\).*/\1/p' <<<"$out")
echo "# systemd-analyze security --offline=yes: exposure $level"
if [ -n "$level" ] && awk "BEGIN { exit !($level <= 2.0) }"; then
    pass "exposure $level <= 2.0"
else
    fail "exposure <= 2.0" "$out"
fi

# vfiod-device-plugin, when this build has it (option device_plugin): binary, unit, hardening.
if [ -e "$DEST$prefix/sbin/vfiod-device-plugin" ]; then
    punit=$DEST$unitdir/vfiod-device-plugin.service
    grep -q "^ExecStart=$prefix/sbin/vfiod-device-plugin\$" "$punit" \
        && pass "plugin unit runs the installed plugin" || fail "plugin unit runs the installed plugin"
    for need in "Wants=vfiod.service" "After=vfiod.service dbus.service" \
                "ReadWritePaths=-/var/lib/kubelet/device-plugins -/var/lib/kubelet/pod-resources" \
                "RestrictAddressFamilies=AF_UNIX" "CapabilityBoundingSet=" "DevicePolicy=closed"; do
        grep -qxF "$need" "$punit" && pass "plugin unit has $need" || fail "plugin unit has $need"
    done
    # A host without a kubelet: the service is skipped, and the path unit starts it once the
    # kubelet's directory appears (systemd-analyze verify checks both files and their link).
    grep -qxF "ConditionPathIsDirectory=/var/lib/kubelet/device-plugins" "$punit" \
        && pass "plugin unit is skipped without the kubelet's directory" \
        || fail "plugin unit is skipped without the kubelet's directory"
    ppath=$DEST$unitdir/vfiod-device-plugin.path
    grep -qxF "PathExists=/var/lib/kubelet/device-plugins" "$ppath" 2>/dev/null \
        && grep -qxF "Also=vfiod-device-plugin.path" "$punit" \
        && pass "plugin path unit starts it once the directory exists" \
        || fail "plugin path unit starts it once the directory exists"
    out=$(systemd-analyze verify --man=no "$ppath" 2>&1) && pass "plugin path unit verifies" \
        || fail "plugin path unit verifies" "$out"
    # It must see /dev/vfio/<N> come and go: a private /dev would hide it.
    grep -q "^PrivateDevices=yes" "$punit" && fail "plugin unit keeps the host's /dev/vfio" \
        || pass "plugin unit keeps the host's /dev/vfio"
    out=$(systemd-analyze security --offline=yes "$punit" 2>&1)
    level=$(sed -n 's/.*Overall exposure level for vfiod-device-plugin.service: \([0-9.]*\).*/\1/p' <<<"$out")
    echo "# plugin unit: exposure $level"
    if [ -n "$level" ] && awk "BEGIN { exit !($level <= 2.5) }"; then
        pass "plugin exposure $level <= 2.5"
    else
        fail "plugin exposure <= 2.5" "$out"
    fi
fi
# vfiod-dra-plugin, when this build has it (option dra_plugin): binary, unit, hardening. Unlike
# the device plugin it talks HTTPS to the API server, and writes CDI specs and its state.
if [ -e "$DEST$prefix/sbin/vfiod-dra-plugin" ]; then
    dunit=$DEST$unitdir/vfiod-dra-plugin.service
    grep -q "^ExecStart=$prefix/sbin/vfiod-dra-plugin \$VFIOD_DRA_PLUGIN_ARGS\$" "$dunit" \
        && pass "DRA unit runs the installed plugin" || fail "DRA unit runs the installed plugin"
    for need in "Wants=vfiod.service" "EnvironmentFile=-/etc/default/vfiod-dra-plugin" \
                "ReadWritePaths=-/var/lib/kubelet/plugins_registry -/var/lib/kubelet/plugins" \
                "RuntimeDirectory=cdi" "RuntimeDirectoryPreserve=yes" \
                "StateDirectory=vfiod-dra-plugin" "StateDirectoryMode=0700" \
                "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6" "CapabilityBoundingSet=" \
                "DevicePolicy=closed" "ProtectSystem=strict"; do
        grep -qxF "$need" "$dunit" && pass "DRA unit has $need" || fail "DRA unit has $need"
    done
    grep -qE '^After=.*vfiod\.service' "$dunit" && pass "DRA unit orders after vfiod.service" \
        || fail "DRA unit orders after vfiod.service"
    # The API server is reached over IP: no private network, no address deny list.
    for forbidden in "PrivateNetwork=yes" "IPAddressDeny=any" "PrivateDevices=yes"; do
        grep -qxF "$forbidden" "$dunit" && fail "DRA unit lacks $forbidden" || pass "DRA unit lacks $forbidden"
    done
    grep -qxF "ConditionPathIsDirectory=/var/lib/kubelet/plugins_registry" "$dunit" \
        && pass "DRA unit is skipped without the kubelet's directory" \
        || fail "DRA unit is skipped without the kubelet's directory"
    dpath=$DEST$unitdir/vfiod-dra-plugin.path
    grep -qxF "PathExists=/var/lib/kubelet/plugins_registry" "$dpath" 2>/dev/null \
        && grep -qxF "Also=vfiod-dra-plugin.path" "$dunit" \
        && pass "DRA path unit starts it once the directory exists" \
        || fail "DRA path unit starts it once the directory exists"
    # Verifying the path unit loads the service too; a warning about either is a failure.
    out=$(systemd-analyze verify --man=no "$dpath" 2>&1) && [ -z "$out" ] && pass "DRA units verify" \
        || fail "DRA units verify" "$out"
    out=$(systemd-analyze security --offline=yes "$dunit" 2>&1)
    level=$(sed -n 's/.*Overall exposure level for vfiod-dra-plugin.service: \([0-9.]*\).*/\1/p' <<<"$out")
    echo "# DRA plugin unit: exposure $level"
    if [ -n "$level" ] && awk "BEGIN { exit !($level <= 2.5) }"; then
        pass "DRA plugin exposure $level <= 2.5"
    else
        fail "DRA plugin exposure <= 2.5" "$out"
    fi
fi
echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
