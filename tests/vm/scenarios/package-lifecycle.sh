# The Debian package's life on a host, with the .debs scripts/test.sh's package step built:
# dpkg -i (unit enabled and started against the empty allowlist, which binds nothing; org.vfiod1
# owned; vfioctl, man pages and completion work), D-Bus activation, the udev rule live without a
# reboot (a hot-plugged allowlisted function starts a stopped vfiod), use (release and bind of the
# "GPU" group with vfioctl), dpkg -i over itself (restart), dpkg -r (stopped, programs gone,
# bindings and configuration kept), dpkg -P (/etc/vfiod and /run/vfiod gone, nothing of the
# package left) and dpkg -i again. The vfiod-dra-plugin package goes along: installed beside
# vfiod with its units neither enabled nor started (skipped without a kubelet, run by hand with
# /etc/default/vfiod-dra-plugin's arguments), upgraded, removed before vfiod (it depends on it;
# its state stays), purged (its state goes) and installed again.
# install: debs
# checks: not-installed-before install install-enabled install-started install-name-owned
# checks: install-vfioctl install-binds-nothing install-man install-completion dbus-activation
# checks: dra-install dra-install-not-enabled dra-install-not-started dra-install-runs dra-install-man
# checks: dra-install-examples dra-skipped-without-kubelet dra-runs-with-default-args
# checks: dra-path-not-enabled
# checks: rule-live use-bound-by-rule use-release use-bind use-completion-addresses
# checks: upgrade upgrade-restarts upgrade-keeps-binding dra-upgrade dra-upgrade-not-enabled
# checks: dra-remove dra-remove-programs-gone dra-remove-keeps-state
# checks: remove remove-stopped remove-programs-gone remove-not-activatable remove-keeps-bindings
# checks: remove-keeps-config remove-config-files-state
# checks: dra-purge dra-purge-state-gone
# checks: purge purge-config-gone purge-state-gone purge-unknown purge-leaves-nothing
# checks: reinstall reinstall-started reinstall-name-owned reinstall-fresh-config
# checks: dra-reinstall dra-reinstall-not-enabled
. /vmtest/lib.sh

HP=0000:03:00.0
DEB=$(ls /vmtest/debs/vfiod_*.deb)
DRA_DEB=$(ls /vmtest/debs/vfiod-dra-plugin_*.deb)
DRA_UNITS="vfiod-dra-plugin.service vfiod-dra-plugin.path"
# No man-db index rebuild (its dpkg trigger) over 9p under TCG: minutes, and not vfiod's.
rm -f /var/lib/man-db/auto-update

# Every place the package, its maintainer scripts and the daemon write to.
snapshot() {
    find /etc /usr/sbin /usr/bin /usr/lib/systemd/system /usr/lib/udev/rules.d /usr/share/dbus-1 \
        /usr/share/polkit-1 /usr/share/man/man1 /usr/share/man/man5 /usr/share/man/man8 \
        /usr/share/bash-completion/completions /usr/share/doc/vfiod /usr/share/doc/vfiod-dra-plugin \
        /var/lib/systemd /var/lib/vfiod-dra-plugin /run/vfiod \
        2>/dev/null | LC_ALL=C sort
    find /var/lib/dpkg/info -name 'vfiod*' | LC_ALL=C sort
}
name_owned() {
    busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
        NameHasOwner s org.vfiod1 2>&1 | grep -qx 'b true'
}
main_pid() { systemctl show -P MainPID vfiod.service; }
# dpkg_step NAME ARGS...: a timed dpkg run; its output becomes notes.
dpkg_step() {
    _name=$1; shift
    _t0=$(uptime_s)
    if _out=$(dpkg "$@" 2>&1); then ok "$_name"; else not_ok "$_name" "$(echo "$_out" | tail -n3)"; fi
    measure "dpkg-$_name" "$(elapsed_since "$_t0")"
    echo "$_out" | while IFS= read -r _line; do note "dpkg: $_line"; done
}
# complete_vfioctl WORD...: what the installed completion offers, loaded on demand as bash does.
complete_vfioctl() {
    bash -c '
        . /usr/share/bash-completion/bash_completion
        _completion_loader vfioctl
        COMP_WORDS=(vfioctl "$@")
        COMP_CWORD=$#
        COMP_LINE="vfioctl $*" COMP_POINT=$((${#COMP_LINE}))
        _vfioctl
        printf "%s\n" "${COMPREPLY[@]}" | LC_ALL=C sort | paste -sd" "
    ' _ "$@" 2>&1
}

# --- install -------------------------------------------------------------------------------------
if dpkg -s vfiod >/dev/null 2>&1 || [ -e /usr/sbin/vfiod ] ||
   dpkg -s vfiod-dra-plugin >/dev/null 2>&1 || [ -e /usr/sbin/vfiod-dra-plugin ]; then
    not_ok not-installed-before "$(dpkg -l 'vfiod*' 2>&1 | tail -n2) $(ls -l /usr/sbin/vfiod* 2>&1)"
else
    ok not-installed-before
fi
snapshot >/tmp/before

dpkg_step install -i "$DEB"
expect_eq install-enabled enabled "$(systemctl is-enabled vfiod.service 2>&1)"
wait_for 30 systemctl is-active --quiet vfiod.service
expect_eq install-started active "$(systemctl is-active vfiod.service 2>&1)"
wait_for 10 name_owned
check install-name-owned name_owned
check install-vfioctl vfioctl status
# The shipped allowlist is empty: nothing moved, no group object.
tree=$(busctl tree --list org.vfiod1 2>&1)
got="$(driver_of $GPU) $(driver_of $AUDIO) $(echo "$tree" | grep -c /group/)"
expect_eq install-binds-nothing "e1000e snd_hda_intel 0" "$got"
man_pages() {
    for page in vfiod.8 vfioctl.1 vfiod.toml.5 ; do
        _path=$(man -w "${page##*.}" "${page%.*}") || return 1
        [ "$_path" = "/usr/share/man/man${page##*.}/$page.gz" ] || { echo "$page: $_path"; return 1; }
        zcat "$_path" | grep -q '^\.TH' || { echo "$_path: no .TH"; return 1; }
    done
}
check install-man man_pages
# Every verb of the installed vfioctl's --help, read here with sed (the script uses awk).
verbs=$(vfioctl --help | sed -n '/^Commands:/,/^[^ ]/s/^  \([a-z][a-z-]*\).*/\1/p' |
    LC_ALL=C sort | paste -sd" ")
expect_eq install-completion "$verbs" "$(complete_vfioctl "")"

# --- the DRA plugin's package: beside vfiod, its units neither enabled nor started ---------------
dpkg_step dra-install -i "$DRA_DEB"
# shellcheck disable=SC2086
expect_eq dra-install-not-enabled "disabled disabled" \
    "$(systemctl is-enabled $DRA_UNITS 2>&1 | paste -sd' ')"
# shellcheck disable=SC2086
expect_eq dra-install-not-started "inactive inactive" \
    "$(systemctl is-active $DRA_UNITS 2>&1 | paste -sd' ')"
# Its shared libraries (gRPC, libcurl, yaml-cpp) are what the package depends on.
check dra-install-runs vfiod-dra-plugin --version
dra_man() {
    _path=$(man -w 8 vfiod-dra-plugin) && [ "$_path" = /usr/share/man/man8/vfiod-dra-plugin.8.gz ] &&
        zcat "$_path" | grep -q '^\.TH'
}
check dra-install-man dra_man
check dra-install-examples test -s /usr/share/doc/vfiod-dra-plugin/examples/vfiod-dra-plugin.yaml \
    -a -s /usr/share/doc/vfiod-dra-plugin/examples/kubevirt-vm-dra.yaml
# Started by hand on a host without a kubelet: skipped, not failed (and not restarted).
systemctl start vfiod-dra-plugin.service
expect_eq dra-skipped-without-kubelet "inactive no" \
    "$(systemctl show -P ActiveState vfiod-dra-plugin.service) $(systemctl show -P ConditionResult vfiod-dra-plugin.service)"
# With the kubelet's directory: the unit runs the plugin, in its sandbox, with the arguments of
# /etc/default/vfiod-dra-plugin (here --version: no API server in this guest). Its state
# directory is made for it.
mkdir -p /var/lib/kubelet/plugins_registry
echo 'VFIOD_DRA_PLUGIN_ARGS="--version"' >/etc/default/vfiod-dra-plugin
systemctl start vfiod-dra-plugin.service
dra_ran() { [ "$(systemctl show -P ExecMainCode vfiod-dra-plugin.service)" = 1 ]; }
wait_for 10 dra_ran
expect_eq dra-runs-with-default-args "success 0 inactive 700" \
    "$(systemctl show -P Result vfiod-dra-plugin.service) $(systemctl show -P ExecMainStatus vfiod-dra-plugin.service) $(systemctl is-active vfiod-dra-plugin.service) $(stat -c %a /var/lib/vfiod-dra-plugin 2>&1)"
journalctl -u vfiod-dra-plugin -q --no-pager -o cat | tail -n 3 | while read -r line; do note "dra: $line"; done
# The path unit is not enabled either: the directory alone starts nothing.
expect_eq dra-path-not-enabled "disabled inactive" \
    "$(systemctl is-enabled vfiod-dra-plugin.path 2>&1) $(systemctl is-active vfiod-dra-plugin.path 2>&1)"
rm -f /etc/default/vfiod-dra-plugin
rm -rf /var/lib/kubelet

# --- D-Bus activation: a call to org.vfiod1 starts a stopped vfiod ------------------------------
systemctl stop vfiod.service
check dbus-activation busctl get-property org.vfiod1 /org/vfiod1 org.vfiod1.Manager Version

# --- the udev rule is live, and use ------------------------------------------------------------
# As configuration management would: a drop-in allowlisting every e1000e (the "GPU" and the
# function hot-plugged below), vfiod stopped. The hot-plug alone must start it (rule's
# SYSTEMD_WANTS), which then binds both groups.
mkdir -p /etc/vfiod/conf.d
cat >/etc/vfiod/conf.d/50-vmtest.toml <<EOF
[[device]]
selector = "8086:10d3"
resource_name = "vmtest/nic"
EOF
systemctl stop vfiod.service
host_request qmp device_add '{"driver":"e1000e","bus":"rp3","id":"hp1","netdev":"hp","romfile":""}' >/dev/null
if wait_for 30 systemctl is-active --quiet vfiod.service; then ok rule-live
else not_ok rule-live "vfiod not started by the hot-plug: $(systemctl is-active vfiod.service)"; fi
grp=$(group_of $GPU)
hp_bound() { [ "$(driver_of $HP)" = vfio-pci ] && state_is "$grp" bound; }
wait_for 30 hp_bound
expect_eq use-bound-by-rule "vfio-pci vfio-pci vfio-pci bound" \
    "$(driver_of $GPU) $(driver_of $AUDIO) $(driver_of $HP) $(group_state "$grp")"
out=$(vfioctl release $GPU 2>&1); rc=$?
note "vfioctl release: $out"
expect_eq use-release "0 released e1000e snd_hda_intel" \
    "$rc $(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
out=$(vfioctl bind $AUDIO 2>&1); rc=$?
note "vfioctl bind: $out"
expect_eq use-bind "0 bound vfio-pci vfio-pci" \
    "$rc $(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
# bind's addresses are the running daemon's allowlisted functions, not every PCI function.
expect_eq use-completion-addresses "$GPU $HP" "$(complete_vfioctl bind "")"

# --- upgrade (the same version again): restarted, bindings and drop-in untouched ---------------
pid=$(main_pid)
dpkg_step upgrade -i "$DEB"
wait_for 30 systemctl is-active --quiet vfiod.service
new_pid=$(main_pid)
if [ "$new_pid" != 0 ] && [ "$new_pid" != "$pid" ]; then ok upgrade-restarts
else not_ok upgrade-restarts "MainPID $pid before, $new_pid after"; fi
wait_for 10 state_is "$grp" bound
expect_eq upgrade-keeps-binding "bound vfio-pci vfio-pci" \
    "$(group_state "$grp") $(driver_of $HP) $(driver_of $GPU)"
dpkg_step dra-upgrade -i "$DRA_DEB"
# shellcheck disable=SC2086
expect_eq dra-upgrade-not-enabled "disabled disabled inactive" \
    "$(systemctl is-enabled $DRA_UNITS 2>&1 | paste -sd' ') $(systemctl is-active vfiod-dra-plugin.service 2>&1)"

# --- remove the DRA plugin first (it depends on vfiod): programs gone, its state kept -----------
dpkg_step dra-remove -r vfiod-dra-plugin
left=$(ls -d /usr/sbin/vfiod-dra-plugin /usr/lib/systemd/system/vfiod-dra-plugin.service \
    /usr/lib/systemd/system/vfiod-dra-plugin.path 2>&1 | grep -v 'No such file')
if [ -z "$left" ]; then ok dra-remove-programs-gone; else not_ok dra-remove-programs-gone "$left"; fi
check dra-remove-keeps-state test -d /var/lib/vfiod-dra-plugin

# --- remove: stopped, programs gone, bindings and configuration stay ----------------------------
[ -d /run/vfiod ] || note "no /run/vfiod while vfiod ran"
dpkg_step remove -r vfiod
expect_eq remove-stopped inactive "$(systemctl is-active vfiod.service 2>&1)"
left=$(ls -d /usr/sbin/vfiod /usr/bin/vfioctl /usr/lib/systemd/system/vfiod.service \
    /usr/lib/udev/rules.d/60-vfiod.rules /usr/share/dbus-1/system-services/org.vfiod1.service 2>&1 |
    grep -v 'No such file')
if [ -z "$left" ]; then ok remove-programs-gone; else not_ok remove-programs-gone "$left"; fi
# The bus forgot the activation file (dbus's trigger reloaded it): nothing starts vfiod again.
if out=$(busctl get-property org.vfiod1 /org/vfiod1 org.vfiod1.Manager Version 2>&1); then
    not_ok remove-not-activatable "$out"
else
    ok remove-not-activatable
fi
expect_eq remove-keeps-bindings "vfio-pci vfio-pci vfio-pci" \
    "$(driver_of $GPU) $(driver_of $AUDIO) $(driver_of $HP)"
check remove-keeps-config test -f /etc/vfiod/vfiod.toml -a -f /etc/vfiod/conf.d/50-vmtest.toml
expect_eq remove-config-files-state "deinstall ok config-files" \
    "$(dpkg-query -W -f='${Status}' vfiod 2>&1)"

# --- purge: configuration and binding journal gone, nothing of the package left ------------------
dpkg_step dra-purge -P vfiod-dra-plugin
check dra-purge-state-gone test ! -e /var/lib/vfiod-dra-plugin
dpkg_step purge -P vfiod
check purge-config-gone test ! -e /etc/vfiod
check purge-state-gone test ! -e /run/vfiod
if out=$(dpkg -s vfiod 2>&1); then not_ok purge-unknown "$(echo "$out" | head -n2)"
else ok purge-unknown; fi
snapshot >/tmp/after
left=$(diff /tmp/before /tmp/after)
if [ -z "$left" ]; then ok purge-leaves-nothing; else not_ok purge-leaves-nothing "$left"; fi

# --- reinstall: as on a fresh host ----------------------------------------------------------------
dpkg_step reinstall -i "$DEB"
wait_for 30 systemctl is-active --quiet vfiod.service
expect_eq reinstall-started active "$(systemctl is-active vfiod.service 2>&1)"
wait_for 10 name_owned
check reinstall-name-owned name_owned
got=$(ls /etc/vfiod; grep -cE '^[[:space:]]*\[\[(device|protect)\]\]' /etc/vfiod/vfiod.toml)
expect_eq reinstall-fresh-config "vfiod.toml 0" "$(echo $got)"
dpkg_step dra-reinstall -i "$DRA_DEB"
# shellcheck disable=SC2086
expect_eq dra-reinstall-not-enabled "disabled disabled" \
    "$(systemctl is-enabled $DRA_UNITS 2>&1 | paste -sd' ')"
journalctl -u vfiod -q --no-pager -o short-monotonic | tail -n 30 | while read -r line; do note "$line"; done
