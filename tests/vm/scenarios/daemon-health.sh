# Device health (docs/DESIGN.md §13) on the real kernel: the kernel's aer_inject sends PCIe errors
# for the bound GPU group's first function through the AER driver, as if its root port had
# received them, and vfiod's Health follows from the kernel's own signals: the recovery uevents
# (no Reload between the injection and the check), the AER totals at the next Reload for a
# correctable error (no uevent exists for it), its record across a restart, the operator's Bind.
# overlay: overlays/e1000e-any
# checks: bound-at-start health-at-start audio-no-aer
# checks: nonfatal-degraded nonfatal-audio-degraded nonfatal-no-reload nonfatal-still-bound
# checks: fatal-failed fatal-audio-failed fatal-group-failed fatal-still-bound
# checks: plugin-healthy-at-start plugin-unhealthy-within-5s plugin-healthy-after-bind
# checks: dra-stream-healthy-at-start dra-stream-unhealthy-within-5s dra-taint-within-5s
# checks: dra-taint-value dra-still-published dra-stream-healthy-after-bind dra-taint-cleared
# checks: restart-keeps-failed bind-clears bind-audio-unknown
# checks: cor-no-change cor-degraded-at-reload cor-reason cor-reload-clears
. /vmtest/lib.sh

modprobe aer_inject
grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-start "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"

dev_prop() {
    busctl get-property org.vfiod1 "/org/vfiod1/device/$(echo "$1" | tr ':.' '__')" \
        org.vfiod1.Device "$2" 2>/dev/null | sed -n 's/^s "\(.*\)"$/\1/p'
}
health_is() { [ "$(dev_prop "$1" Health)" = "$2" ]; }
group_health() { group_prop "$grp" Health | sed -n 's/^s "\(.*\)"$/\1/p'; }
# inject ARGS...: an error for $GPU; $injected_at: the uptime just before.
inject() {
    injected_at=$(uptime_s)
    vfiod-aer-inject inject $GPU "$@" >/dev/null || note "inject $*: failed"
}
show_health() { note "health: $GPU $(dev_prop $GPU Health) ($(dev_prop $GPU HealthReason)), $AUDIO $(dev_prop $AUDIO Health) ($(dev_prop $AUDIO HealthReason)), group $(group_health)"; }

wait_for 10 health_is $GPU ok
expect_eq health-at-start "ok" "$(dev_prop $GPU Health)"
expect_eq audio-no-aer "unknown no-aer: the function has no AER capability" \
    "$(dev_prop $AUDIO Health) $(dev_prop $AUDIO HealthReason)"

# The real device plugin (its unit, stopped by the device-plugin part) with a fake kubelet: the
# allowlisted function ($GPU, resource vmtest/nic) goes Unhealthy on a failed recovery and
# Healthy again once the operator's Bind clears it (DESIGN §13). The 1 s goal is bench/'s; the
# check catches a poll or timer (5 s).
RES=vmtest/nic
KDIR=/var/lib/kubelet/device-plugins
OUT=/tmp/health-kubelet.out
mkdir -p $KDIR /var/lib/kubelet/pod-resources
rm -f /tmp/health-kubelet.in $KDIR/kubelet.sock
mkfifo /tmp/health-kubelet.in
vfiod-fake-kubelet $KDIR /var/lib/kubelet/pod-resources/kubelet.sock \
    </tmp/health-kubelet.in >$OUT 2>&1 &
kubelet=$!
exec 8>/tmp/health-kubelet.in
wait_for 10 test -S $KDIR/kubelet.sock
systemctl restart vfiod-device-plugin.service
listed() { grep "^list .* $RES " $OUT | tail -1 | grep -q " $1=$2"; }
check plugin-healthy-at-start wait_for 20 listed $GPU Healthy

# The DRA plugin beside it (DESIGN §13): the fake API server and the plugin as in dra-plugin,
# registered by the fake DRA kubelet, whose health stream (the service it picks, KEP-4680) is
# watched throughout, one line per message; the slice's taint (KEP-5055) read from the server.
NODE=vmtest
DRIVER=vfio.vfiod.io
DEV=pci-$(echo $GPU | tr ':.' '--')
API=/tmp/api
DRALOG=/tmp/health-dra.log
STREAM=/tmp/health-stream.jsonl
rm -rf $API
vfiod-fake-apiserver --dir $API --node $NODE >/tmp/health-apiserver.log 2>&1 &
apiserver=$!
wait_for 60 test -s $API/server.json
url=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' $API/server.json)
env -u INVOCATION_ID -u JOURNAL_STREAM vfiod-dra-plugin --node-name $NODE --api-server "$url" \
    --token-file $API/token --ca-file $API/ca.crt >$DRALOG 2>&1 &
draplugin=$!
wait_for 30 vfiod-fake-dra-kubelet --timeout 5 register \
    /var/lib/kubelet/plugins_registry/$DRIVER-reg.sock
vfiod-fake-dra-kubelet --timeout 900 watch-health /var/lib/kubelet/plugins/$DRIVER/dra.sock \
    >$STREAM 2>&1 &
watcher=$!
stream_says() { vfiod-vmtest-dra stream $STREAM $DEV "$@"; }
taint_of() { vfiod-vmtest-dra taints $DEV 2>/dev/null; }
check dra-stream-healthy-at-start wait_for 20 stream_says HEALTHY

mark_journal /tmp/health-cursor
# Non-fatal (completion timeout), recovered: both functions below the port get the uevents.
inject --uncor 0x4000
check nonfatal-degraded wait_for 5 health_is $GPU degraded
measure nonfatal-degraded "$(elapsed_since "$injected_at")"
check nonfatal-audio-degraded wait_for 5 health_is $AUDIO degraded
show_health
check nonfatal-no-reload sh -c "! journalctl -u vfiod -q --no-pager \
    --after-cursor '$(cat /tmp/health-cursor)' | grep -q 'configuration reloaded'"
expect_eq nonfatal-still-bound "bound vfio-pci" "$(group_state "$grp") $(driver_of $GPU)"

# Fatal (data link protocol error): QEMU's port link does not come back, recovery fails.
busctl monitor org.vfiod1 >/tmp/health-monitor.txt 2>&1 &
monitor=$!
sleep 1
inject --uncor 0x10
check fatal-failed wait_for 15 health_is $GPU failed
measure fatal-failed "$(elapsed_since "$injected_at")"
check fatal-audio-failed wait_for 5 health_is $AUDIO failed
expect_eq fatal-group-failed failed "$(group_health)"
# vfiod's signal (the group's Health "failed") to the first list naming $GPU Unhealthy: the
# goal is 1 s (bench/vm_latency.sh judges it); the check, 5 s, catches a poll or timer.
failed_signal() { signal_time /tmp/health-monitor.txt "/org/vfiod1/group/$grp" failed; }
unhealthy_listed() {
    awk -v id=" $GPU=Unhealthy" -v res=" $RES " '$1 == "list" && index($0, res) &&
        index($0, id) { print $2; exit }' $OUT | grep .
}
if wait_for 10 failed_signal && wait_for 5 unhealthy_listed; then
    latency=$(awk -v a="$(failed_signal)" -v b="$(unhealthy_listed)" 'BEGIN { printf "%.3f", b - a }')
    measure health-signal-to-unhealthy "$latency"
    check plugin-unhealthy-within-5s awk -v l="$latency" 'BEGIN { exit !(l >= -0.25 && l <= 5.0) }'
else
    not_ok plugin-unhealthy-within-5s "$(grep "^list .* $RES " $OUT | tail -1)"
fi
# The same signal to the DRA plugin's stream saying UNHEALTHY, and to the API server's write of
# the slice with the taint: goal 1 s each (bench/), checked at 5 s.
sig=$(failed_signal)
if [ -n "$sig" ] && wait_for 5 stream_says UNHEALTHY "$sig"; then
    latency=$(awk -v a="$sig" -v b="$(stream_says UNHEALTHY "$sig")" 'BEGIN { printf "%.3f", b - a }')
    measure dra-signal-to-unhealthy "$latency"
    check dra-stream-unhealthy-within-5s awk -v l="$latency" 'BEGIN { exit !(l <= 5.0) }'
else
    not_ok dra-stream-unhealthy-within-5s "$(tail -1 $STREAM); plugin: $(tail -3 $DRALOG)"
fi
tainted() { vfiod-vmtest-dra tainted "$sig" $DEV; }
if [ -n "$sig" ] && wait_for 5 tainted; then
    latency=$(awk -v a="$sig" -v b="$(tainted)" 'BEGIN { printf "%.3f", b - a }')
    measure dra-signal-to-taint "$latency"
    check dra-taint-within-5s awk -v l="$latency" 'BEGIN { exit !(l <= 5.0) }'
else
    not_ok dra-taint-within-5s "taints: $(taint_of); plugin: $(tail -3 $DRALOG)"
fi
expect_eq dra-taint-value "vfiod.io/unhealthy=aer-fatal:NoSchedule" "$(taint_of)"
check dra-still-published sh -c "vfiod-vmtest-dra slices | grep -q ' $DEV '"
kill $monitor
show_health
expect_eq fatal-still-bound "bound vfio-pci" "$(group_state "$grp") $(driver_of $GPU)"

systemctl restart vfiod.service
wait_for 30 state_is "$grp" bound
wait_for 10 health_is $GPU failed
expect_eq restart-keeps-failed "failed aer-fatal: recovery failed" \
    "$(dev_prop $GPU Health) $(dev_prop $GPU HealthReason)"

# The device reads fine (aer_inject fakes the AER registers only): the operator's Bind clears.
bound_at=$(now_s)
manager Bind s $GPU >/dev/null
check bind-clears wait_for 10 health_is $GPU ok
check bind-audio-unknown wait_for 10 health_is $AUDIO unknown
check plugin-healthy-after-bind wait_for 10 listed $GPU Healthy
check dra-stream-healthy-after-bind wait_for 10 stream_says HEALTHY "$bound_at"
no_taint() { vfiod-vmtest-dra slices | grep -q " $DEV " && [ -z "$(taint_of)" ]; }
check dra-taint-cleared wait_for 10 no_taint
kill $watcher $draplugin 2>/dev/null
wait $draplugin
note "DRA plugin exit status on SIGTERM: $?"
kill $apiserver 2>/dev/null
grep -E ' (warning|error|critical) ' $DRALOG | while read -r line; do note "dra plugin: $line"; done
systemctl stop vfiod-device-plugin.service
exec 8>&-
kill $kubelet 2>/dev/null
show_health

# Correctable: counted, no uevent; seen at the next Reload, cleared by a quiet one.
inject --cor 0x1
sleep 1
expect_eq cor-no-change ok "$(dev_prop $GPU Health)"
manager Reload >/dev/null
check cor-degraded-at-reload wait_for 10 health_is $GPU degraded
expect_eq cor-reason "aer-correctable: 1 since start" "$(dev_prop $GPU HealthReason)"
manager Reload >/dev/null
check cor-reload-clears wait_for 10 health_is $GPU ok
journal_since /tmp/health-cursor -o short-monotonic | grep -i health | while read -r line; do
    note "$line"
done
