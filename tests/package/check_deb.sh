#!/bin/bash
# The built Debian packages hold what DESIGN §7 installs, with Debian's layout, the conffile and
# the maintainer-script behaviour debian/ promises. Used by scripts/test.sh's package step.
# Usage: check_deb.sh DEB_DIR SOURCE_DIR
set -u
DEBS=$1 SRC=$2
failures=0
pass() { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; failures=$((failures + 1)); }

version=$(cd "$SRC" && dpkg-parsechangelog -S Version)
arch=$(dpkg --print-architecture)
deb=$DEBS/vfiod_${version}_${arch}.deb
[ -f "$deb" ] || { echo "not ok - $deb exists"; exit 1; }
files=$(dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|; s|/$||')
has() { grep -qxF "$1" <<<"$files"; }

# DESIGN §7, as Debian 12 lays it out (systemd.pc and udev.pc name /lib/...).
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd)
udevdir=$(pkg-config --variable=udevdir udev)
for f in /usr/sbin/vfiod /usr/bin/vfioctl "$unitdir/vfiod.service" "$udevdir/rules.d/60-vfiod.rules" \
         /usr/share/dbus-1/system.d/org.vfiod1.conf \
         /usr/share/dbus-1/system-services/org.vfiod1.service \
         /usr/share/dbus-1/interfaces/org.vfiod1.Manager.xml \
         /usr/share/dbus-1/interfaces/org.vfiod1.Group.xml \
         /usr/share/dbus-1/interfaces/org.vfiod1.Device.xml \
         /usr/share/dbus-1/interfaces/org.vfiod1.PhysicalFunction.xml \
         /usr/share/dbus-1/interfaces/org.vfiod1.MediatedDevice.xml \
         /etc/vfiod/vfiod.toml \
         /usr/share/man/man8/vfiod.8.gz /usr/share/man/man1/vfioctl.1.gz \
         /usr/share/man/man5/vfiod.toml.5.gz \
         /usr/share/bash-completion/completions/vfioctl \
         /usr/share/doc/vfiod/copyright; do
    has "$f" && pass "vfiod ships $f" || fail "vfiod ships $f"
done
# Early binding from the initramfs (DESIGN §14): programs all, as initramfs-tools and dracut run
# them.
listing=$(dpkg-deb -c "$deb")
for f in /usr/lib/vfiod/early-apply /usr/share/initramfs-tools/hooks/vfiod \
         /usr/share/initramfs-tools/scripts/init-top/00-vfiod \
         /usr/lib/dracut/modules.d/90vfiod/module-setup.sh \
         /usr/lib/dracut/modules.d/90vfiod/vfiod-early.sh; do
    grep -qE "^-rwxr-xr-x .* \.$f\$" <<<"$listing" && pass "vfiod ships $f, executable" \
        || fail "vfiod ships $f, executable"
done
# The polkit policy, once the source has one (DESIGN §6).
for p in $(cd "$SRC" && ls systemd/*.policy config/*.policy 2>/dev/null); do
    f=/usr/share/polkit-1/actions/$(basename "$p")
    has "$f" && pass "vfiod ships $f" || fail "vfiod ships $f"
done
# Nothing of the plugins', and no gRPC: hosts without Kubernetes need neither.
bad=$(grep -E 'device-plugin|dra-plugin|grpc' <<<"$files")
[ -z "$bad" ] && pass "vfiod ships nothing of the device plugin" || fail "vfiod ships nothing of the device plugin" "$bad"
deps=$(dpkg-deb -f "$deb" Depends)
case $deps in *grpc*|*protobuf*|*curl*) fail "vfiod does not depend on gRPC" "$deps" ;; *) pass "vfiod does not depend on gRPC" ;; esac

ctl=$(mktemp -d)
trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
grep -qxF /etc/vfiod/vfiod.toml "$ctl/conffiles" && pass "vfiod.toml is a conffile" \
    || fail "vfiod.toml is a conffile" "$(cat "$ctl/conffiles" 2>&1)"
# The shipped configuration is the empty allowlist: installing binds nothing.
tmp=$ctl/data
mkdir "$tmp" && dpkg-deb -x "$deb" "$tmp"
# vfioctl reads KubeVirt CRs (doctor --kubevirt-cr) with yaml-cpp; the daemon itself links
# nothing a host without Kubernetes would not need.
needed=$(readelf -d "$tmp/usr/sbin/vfiod" 2>&1 | grep NEEDED)
case $needed in
    *yaml*|*grpc*|*protobuf*|*curl*) fail "the daemon links no Kubernetes-side library" "$needed" ;;
    *libsdbus*) pass "the daemon links no Kubernetes-side library" ;;
    *) fail "the daemon links no Kubernetes-side library" "no NEEDED read: $needed" ;;
esac
if grep -qE '^\s*\[\[(device|protect)\]\]' "$tmp/etc/vfiod/vfiod.toml"; then
    fail "shipped vfiod.toml has an empty allowlist"
else
    pass "shipped vfiod.toml has an empty allowlist"
fi
grep -q '^ExecStart=/usr/sbin/vfiod$' "$tmp$unitdir/vfiod.service" && pass "unit runs /usr/sbin/vfiod" \
    || fail "unit runs /usr/sbin/vfiod"
grep -q '/usr/sbin/vfiod --udev-match' "$tmp$udevdir/rules.d/60-vfiod.rules" \
    && pass "rule runs /usr/sbin/vfiod" || fail "rule runs /usr/sbin/vfiod"
owners=$(dpkg-deb -c "$deb" | awk '$2 != "root/root" { print $2, $6 }')
[ -z "$owners" ] && pass "every file is root:root" || fail "every file is root:root" "$owners"

# Maintainer scripts: install makes the rule live and starts the unit; upgrade restarts it;
# remove stops it (bindings stay: nothing releases them); purge removes /run/vfiod, /etc/vfiod.
for s in postinst prerm postrm; do sh -n "$ctl/$s" && pass "$s parses" || fail "$s parses"; done
grep -q 'udevadm control --reload' "$ctl/postinst" && pass "postinst reloads the udev rules" \
    || fail "postinst reloads the udev rules"
grep -q "deb-systemd-helper enable 'vfiod.service'" "$ctl/postinst" && pass "postinst enables vfiod.service" \
    || fail "postinst enables vfiod.service"
grep -q '_dh_action=restart' "$ctl/postinst" && grep -q '_dh_action=start' "$ctl/postinst" \
    && pass "postinst starts on install, restarts on upgrade" \
    || fail "postinst starts on install, restarts on upgrade"
grep -q "deb-systemd-invoke stop 'vfiod.service'" "$ctl/prerm" && pass "prerm stops vfiod.service" \
    || fail "prerm stops vfiod.service"
if grep -qE 'vfioctl (release|apply)|Release|driver_override' "$ctl/prerm" "$ctl/postrm"; then
    fail "removal leaves the bindings alone"
else
    pass "removal leaves the bindings alone"
fi
# The maintainer scripts run under DPKG_ROOT (dpkg --root, a chroot being built): the files are
# there, and the running system's udevd and systemd are not the target's. Every command they
# run is a stub here that only records its call.
root=$ctl/root stub=$ctl/stub
mkdir -p "$root/run/vfiod" "$root/var/lib/vfiod" "$root/etc/vfiod/conf.d" "$stub"
for c in udevadm systemctl deb-systemd-helper deb-systemd-invoke; do
    printf '#!/bin/sh\necho "%s $*" >>"$STUB_LOG"\n' "$c" >"$stub/$c" && chmod +x "$stub/$c"
done
in_root() { PATH=$stub:$PATH DPKG_ROOT=$root STUB_LOG=$ctl/calls sh "$ctl/$1" "$2"; }
in_root postrm purge
[ ! -e "$root/run/vfiod" ] && [ ! -e "$root/var/lib/vfiod" ] && [ ! -e "$root/etc/vfiod" ] \
    && pass "postrm purge removes DPKG_ROOT's /run/vfiod, /var/lib/vfiod and /etc/vfiod" \
    || fail "postrm purge removes DPKG_ROOT's /run/vfiod, /var/lib/vfiod and /etc/vfiod" \
        "$(ls -d "$root"/run/* "$root"/var/lib/* "$root"/etc/* 2>&1)"
# The hook's files come and go with the package: debhelper's update-initramfs trigger.
grep -qx 'activate-noawait update-initramfs' "$ctl/triggers" \
    && pass "vfiod triggers update-initramfs" || fail "vfiod triggers update-initramfs"
: >"$ctl/calls"
in_root postrm remove
in_root postinst configure
grep -q udevadm "$ctl/calls" && fail "under DPKG_ROOT the host's udevd is left alone" "$(cat "$ctl/calls")" \
    || pass "under DPKG_ROOT the host's udevd is left alone"

# The device plugin's package, when the source builds one.
plugin=$DEBS/vfiod-device-plugin_${version}_${arch}.deb
if grep -q '^Package: vfiod-device-plugin$' "$SRC/debian/control"; then
    if [ -f "$plugin" ]; then
        pfiles=$(dpkg-deb -c "$plugin" | awk '{ print $6 }' | sed 's|^\./|/|')
        want=(/usr/sbin/vfiod-device-plugin /usr/share/man/man8/vfiod-device-plugin.8.gz)
        [ -e "$SRC/systemd/vfiod-device-plugin.service.in" ] && want+=("$unitdir/vfiod-device-plugin.service" \
                                                                        "$unitdir/vfiod-device-plugin.path")
        for f in "${want[@]}"; do
            grep -qxF "$f" <<<"$pfiles" && pass "vfiod-device-plugin ships $f" \
                || fail "vfiod-device-plugin ships $f"
        done
        # A host without a kubelet gets no plugin that fails: the path unit is what install
        # enables, and the service starts only where the kubelet's directory exists.
        pctl=$ctl/plugin && mkdir "$pctl" && dpkg-deb -e "$plugin" "$pctl"
        grep -q "deb-systemd-helper enable 'vfiod-device-plugin.path'" "$pctl/postinst" \
            && pass "plugin postinst enables vfiod-device-plugin.path" \
            || fail "plugin postinst enables vfiod-device-plugin.path"
        pdata=$ctl/plugin-data && mkdir "$pdata" && dpkg-deb -x "$plugin" "$pdata"
        grep -qx 'ConditionPathIsDirectory=/var/lib/kubelet/device-plugins' \
            "$pdata$unitdir/vfiod-device-plugin.service" \
            && pass "the plugin's service starts only with the kubelet's directory" \
            || fail "the plugin's service starts only with the kubelet's directory"
        pdeps=$(dpkg-deb -f "$plugin" Depends)
        grep -qE '(^|, )vfiod( |,|$)' <<<"$pdeps" && pass "vfiod-device-plugin depends on vfiod" \
            || fail "vfiod-device-plugin depends on vfiod" "$pdeps"
    else
        fail "$plugin was built"
    fi
fi

# The DRA plugin's package, when the source builds one: the plugin, its units (not enabled on
# install: it needs the node's name and credentials first), its manifests as examples.
dra=$DEBS/vfiod-dra-plugin_${version}_${arch}.deb
if grep -q '^Package: vfiod-dra-plugin$' "$SRC/debian/control"; then
    if [ -f "$dra" ]; then
        dfiles=$(dpkg-deb -c "$dra" | awk '{ print $6 }' | sed 's|^\./|/|')
        want=(/usr/sbin/vfiod-dra-plugin /usr/share/man/man8/vfiod-dra-plugin.8.gz
              "$unitdir/vfiod-dra-plugin.service" "$unitdir/vfiod-dra-plugin.path"
              /usr/share/doc/vfiod-dra-plugin/copyright)
        # Every DRA manifest of deploy/kubernetes, uncompressed (dh_compress spares examples/).
        for m in $(cd "$SRC/deploy/kubernetes" &&
                   ls vfiod-dra-plugin*.yaml kubevirt-vm-dra.yaml kubevirt-vm-vgpu-dra.yaml); do
            want+=("/usr/share/doc/vfiod-dra-plugin/examples/$m")
        done
        for f in "${want[@]}"; do
            grep -qxF "$f" <<<"$dfiles" && pass "vfiod-dra-plugin ships $f" \
                || fail "vfiod-dra-plugin ships $f"
        done
        bad=$(grep -E 'device-plugin|/usr/bin/vfioctl|/usr/sbin/vfiod$|/etc/' <<<"$dfiles")
        [ -z "$bad" ] && pass "vfiod-dra-plugin ships only its own files" \
            || fail "vfiod-dra-plugin ships only its own files" "$bad"
        downers=$(dpkg-deb -c "$dra" | awk '$2 != "root/root" { print $2, $6 }')
        [ -z "$downers" ] && pass "every DRA plugin file is root:root" \
            || fail "every DRA plugin file is root:root" "$downers"
        dctl=$ctl/dra && mkdir "$dctl" && dpkg-deb -e "$dra" "$dctl"
        for s in postinst prerm postrm; do
            sh -n "$dctl/$s" && pass "DRA plugin $s parses" || fail "DRA plugin $s parses"
        done
        # Install runs postinst with deb-systemd-helper's defaults (not debian-installed, was
        # enabled): nothing may be enabled, nothing started. Every command is a stub.
        printf '#!/bin/sh\necho "deb-systemd-helper $*" >>"$STUB_LOG"\n[ "$1" != debian-installed ]\n' \
            >"$stub/deb-systemd-helper"
        : >"$ctl/calls"
        PATH=$stub:$PATH STUB_LOG=$ctl/calls sh "$dctl/postinst" configure
        units="'vfiod-dra-plugin.path' 'vfiod-dra-plugin.service'"
        if grep -qE '^deb-systemd-helper enable|^systemctl (enable|start)' "$ctl/calls"; then
            fail "DRA plugin postinst enables and starts nothing" "$(cat "$ctl/calls")"
        else
            pass "DRA plugin postinst enables and starts nothing"
        fi
        grep -q "deb-systemd-helper update-state 'vfiod-dra-plugin.service'" "$dctl/postinst" \
            && grep -q "deb-systemd-helper update-state 'vfiod-dra-plugin.path'" "$dctl/postinst" \
            && pass "DRA plugin postinst records both units for purge" \
            || fail "DRA plugin postinst records both units for purge"
        # deb-systemd-invoke starts no disabled unit, and restarts one only while it runs.
        grep -q '_dh_action=restart' "$dctl/postinst" && pass "DRA plugin postinst restarts a running plugin on upgrade" \
            || fail "DRA plugin postinst restarts a running plugin on upgrade"
        grep -qF "deb-systemd-invoke stop $units" "$dctl/prerm" && pass "DRA plugin prerm stops both units" \
            || fail "DRA plugin prerm stops both units"
        mkdir -p "$root/var/lib/vfiod-dra-plugin/claims"
        PATH=$stub:$PATH DPKG_ROOT=$root STUB_LOG=$ctl/calls sh "$dctl/postrm" purge
        [ ! -e "$root/var/lib/vfiod-dra-plugin" ] \
            && pass "DRA plugin postrm purge removes DPKG_ROOT's /var/lib/vfiod-dra-plugin" \
            || fail "DRA plugin postrm purge removes DPKG_ROOT's /var/lib/vfiod-dra-plugin"
        ddata=$ctl/dra-data && mkdir "$ddata" && dpkg-deb -x "$dra" "$ddata"
        dunit=$ddata$unitdir/vfiod-dra-plugin.service
        grep -qx 'ConditionPathIsDirectory=/var/lib/kubelet/plugins_registry' "$dunit" \
            && pass "the DRA plugin's service starts only with the kubelet's directory" \
            || fail "the DRA plugin's service starts only with the kubelet's directory"
        grep -qx 'ExecStart=/usr/sbin/vfiod-dra-plugin $VFIOD_DRA_PLUGIN_ARGS' "$dunit" \
            && grep -qx 'EnvironmentFile=-/etc/default/vfiod-dra-plugin' "$dunit" \
            && pass "DRA unit runs /usr/sbin/vfiod-dra-plugin with /etc/default's arguments" \
            || fail "DRA unit runs /usr/sbin/vfiod-dra-plugin with /etc/default's arguments"
        ddeps=$(dpkg-deb -f "$dra" Depends)
        grep -qE '(^|, )vfiod \(= '"$version"'\)' <<<"$ddeps" && pass "vfiod-dra-plugin depends on this vfiod" \
            || fail "vfiod-dra-plugin depends on this vfiod" "$ddeps"
        grep -q 'libcurl' <<<"$ddeps" && pass "vfiod-dra-plugin depends on libcurl" \
            || fail "vfiod-dra-plugin depends on libcurl" "$ddeps"
    else
        fail "$dra was built"
    fi
fi

for d in "$DEBS"/*.deb; do
    echo "# $(basename "$d"): $(stat -c %s "$d") bytes, Installed-Size $(dpkg-deb -f "$d" Installed-Size) KiB"
done
echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
