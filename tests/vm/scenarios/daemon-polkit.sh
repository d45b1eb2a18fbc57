# Scenario: polkit on a real host. Debian's polkitd (this machine's, over 9p) answers vfiod's
# CheckAuthorization. With the shipped example rule installed for the Unix group kvm-ops, a
# non-root member may `vfioctl release` and `vfioctl bind`; a non-root non-member gets exit 4
# naming org.vfiod1.manage and nothing changes. The installed unit keeps its exposure <= 2.0.
# overlay: overlays/e1000e-any
# checks: bound-at-boot rule-installed users-made alice-release-ok alice-release-done
# checks: polkitd-answered bob-bind-exit-4 bob-names-action bob-changed-nothing alice-bind-ok
# checks: alice-bind-done bob-release-exit-4 exposure
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-boot bound "$(group_state "$grp")"

# The rule first: polkitd reads rules.d when it starts (and watches it afterwards).
mkdir -p /etc/polkit-1/rules.d
cp /usr/share/doc/vfiod/examples/50-vfiod.rules /etc/polkit-1/rules.d/50-vfiod.rules
check rule-installed grep -q '"kvm-ops"' /etc/polkit-1/rules.d/50-vfiod.rules
# polkit asks NSS for the user's groups, so they are real users in /etc/passwd and /etc/group.
groupadd kvm-ops && useradd -M -N -g users -G kvm-ops alice && useradd -M -N -g users bob
check users-made sh -c 'id -nG alice | grep -qw kvm-ops && ! id -nG bob | grep -qw kvm-ops'
as() { _u=$1; shift; setpriv --reuid="$_u" --regid=users --init-groups "$@"; }

out=$(as alice vfioctl release $GPU 2>&1); rc=$?
note "alice release: rc=$rc $out"
expect_eq alice-release-ok 0 "$rc"
expect_eq alice-release-done "released e1000e snd_hda_intel" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
owner=$(busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus NameHasOwner \
    s org.freedesktop.PolicyKit1)
expect_eq polkitd-answered "b true" "$owner"

out=$(as bob vfioctl bind $GPU 2>&1); rc=$?
note "bob bind: rc=$rc $out"
expect_eq bob-bind-exit-4 4 "$rc"
case $out in *org.vfiod1.manage*rules.d*) ok bob-names-action ;; *) not_ok bob-names-action "$out" ;; esac
expect_eq bob-changed-nothing "released e1000e" "$(group_state "$grp") $(driver_of $GPU)"

out=$(as alice vfioctl bind $GPU 2>&1); rc=$?
note "alice bind: rc=$rc $out"
expect_eq alice-bind-ok 0 "$rc"
expect_eq alice-bind-done "bound vfio-pci vfio-pci" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
as bob vfioctl release $GPU >/dev/null 2>&1
expect_eq bob-release-exit-4 4 "$?"

unit=$(systemctl show -P FragmentPath vfiod.service)
out=$(systemd-analyze security --offline=yes "$unit" 2>&1)
level=$(echo "$out" | sed -n 's/.*Overall exposure level for vfiod.service: \([0-9.]*\).*/\1/p')
note "exposure $level"
if [ -n "$level" ] && awk "BEGIN { exit !($level <= 2.0) }"; then ok exposure; else not_ok exposure "$out"; fi
