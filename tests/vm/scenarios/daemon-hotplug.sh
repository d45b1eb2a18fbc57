# Scenario 2, hot-plug, both cases of issue 14 in one boot.
# Driver loaded: an allowlisted e1000e added over QMP to empty root port rp3 is probed by e1000e
# first (the module is loaded, for the "GPU"); vfiod moves it, bound and announced with
# InterfacesAdded; device_del removes its objects with InterfacesRemoved and
# nothing logged as an error.
# Driver not loaded, early = true: after `modprobe -r e1000e`, an e1000e added to rp4 gets its
# driver_override from the udev rule before udev loads e1000e for it by modalias; vfiod binds it
# and e1000e never probes it. No timing is asserted here (bench/README.md judges it).
# Both print the latency and where it went: the kernel's and udev's events (`udevadm monitor`) and
# vfiod's journal lines, as seconds after device_add was asked for. The goal (1 s) is judged by
# bench/vm_latency.sh over several runs, not here: this emulated guest on a busy two-core machine
# took 2.1 s once. The gate only catches a real regression: a bind that waits for a rescan or a
# timer instead of the udev event (10 s).
# overlay: overlays/hotplug
# checks: coldplug-bound hotplug-within-10s hotplug-bound hotplug-vfio-pci hotplug-interfaces-added
# checks: hotunplug-objects-removed hotunplug-interfaces-removed hotunplug-no-errors
# checks: e1000e-unloaded early-override-from-udev early-bound early-vfio-pci
# checks: early-e1000e-loaded-first early-never-e1000e early-no-errors
. /vmtest/lib.sh

HP=0000:03:00.0
HP_OBJ=/org/vfiod1/device/0000_03_00_0
EHP=0000:04:00.0

# first_stamp ERE [AFTER]: the time of the first stdin line matching ERE whose leading
# "[ seconds]" (journalctl -o short-monotonic, udev_events) is later than AFTER.
first_stamp() {
    awk -v pat="$1" -v after="${2:-0}" '$0 ~ pat {
        t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t); if (t + 0 > after + 0) { print t; exit } }'
}
# udev_events: /tmp/udev.txt's "KERNEL[t] add /devices/... (pci)" lines as "[t] KERNEL add ...".
udev_events() { sed -n 's/^\([A-Z]*\) *\[\([0-9.]*\)\] *\([a-z]*\) *\(.*\)/[\2] \1 \3 \4/p' /tmp/udev.txt; }
vfiod_log() { journalctl -u vfiod -q --no-pager -o short-monotonic; }
# step NAME U_ASK STAMP: a step's time after device_add was asked for (uptime U_ASK).
step() {
    if [ -n "$3" ]; then measure "$1" "$(awk -v a="$2" -v b="$3" 'BEGIN { printf "%.3f", b - a }')"
    else note "$1: no stamp"; fi
}
# hotplug_steps PREFIX BDF U_ASK: where one hot-plug's time went. All stamps are CLOCK_MONOTONIC
# (udevadm monitor's reception of each event, the journal's): dmesg's clock drifts from it by tens
# of milliseconds in this guest, enough to put a module load after the event that loaded it.
hotplug_steps() {
    _p=$1 _d=$2 _a=$3
    step "$_p-step-kernel-add" "$_a" "$(udev_events | first_stamp "KERNEL add .*/$_d [(]pci" "$_a")"
    step "$_p-step-e1000e-loaded" "$_a" "$(udev_events | first_stamp "KERNEL add /module/e1000e " "$_a")"
    step "$_p-step-netdev-added" "$_a" "$(udev_events | first_stamp "KERNEL add .*/$_d/net/" "$_a")"
    step "$_p-step-udev-add-done" "$_a" "$(udev_events | first_stamp "UDEV add .*/$_d [(]pci" "$_a")"
    step "$_p-step-netdev-renamed" "$_a" "$(udev_events | first_stamp "KERNEL move .*/$_d/net/" "$_a")"
    step "$_p-step-vfiod-decided" "$_a" "$(vfiod_log | first_stamp "binding $_d" "$_a")"
    step "$_p-step-vfiod-bound" "$_a" "$(vfiod_log | first_stamp "bound [(]$_d" "$_a")"
}
wait_for 60 state_is "$(group_of $GPU)" bound
expect_eq coldplug-bound bound "$(group_state "$(group_of $GPU)")"

# Appended to (O_APPEND), so the second case can empty it and read only its own signals.
busctl monitor org.vfiod1 >>/tmp/monitor.txt 2>&1 &
monitor=$!
udevadm monitor --kernel --udev --property -s pci -s net -s module >/tmp/udev.txt 2>&1 &
udevmon=$!
sleep 1
mark_journal /tmp/cursor

# device_add returns somewhere between asking the host and reading its answer; the latency is
# counted from the ask (an upper bound) up to the time of the signal that carried State "bound"
# for the new group (busctl monitor's timestamp). From the answer, it is a lower bound.
t_ask=$(now_s)
read -r u_ask _ </proc/uptime  # a builtin: the same moment as t_ask, on the guest's uptime clock
host_request qmp device_add '{"driver":"e1000e","bus":"rp3","id":"hp1","netdev":"hp","romfile":""}' >/dev/null
t_answer=$(now_s)
note "device_add answered at uptime $(uptime_s)"
# bound_signal BDF: the time of the State "bound" signal for BDF's group in /tmp/monitor.txt.
bound_signal() { _g=$(group_of "$1" 2>/dev/null) && [ -n "$_g" ] && signal_time /tmp/monitor.txt "/org/vfiod1/group/$_g" bound; }
if wait_for 20 bound_signal $HP; then
    t_bound=$(bound_signal $HP)
    latency=$(awk -v a="$t_ask" -v b="$t_bound" 'BEGIN { printf "%.3f", b - a }')
    measure hotplug-to-bound "$latency"
    measure hotplug-to-bound-lower-bound "$(awk -v a="$t_answer" -v b="$t_bound" 'BEGIN { printf "%.3f", b - a }')"
    check hotplug-within-10s awk -v l="$latency" 'BEGIN { exit !(l <= 10.0) }'
else
    not_ok hotplug-within-10s "no State bound signal for the group of $HP"
fi
hotplug_steps hotplug $HP "$u_ask"
expect_eq hotplug-bound bound "$(group_state "$(group_of $HP)")"
expect_eq hotplug-vfio-pci vfio-pci "$(driver_of $HP)"
hp_group=/org/vfiod1/group/$(group_of $HP)
sleep 1
check hotplug-interfaces-added sh -c "grep -A30 'Member=InterfacesAdded' /tmp/monitor.txt | grep -q '\"$HP_OBJ\"'"

host_request qmp device_del '{"id":"hp1"}' >/dev/null
t0=$(uptime_s)
gone() { ! busctl tree --list org.vfiod1 | grep -q -e "$HP_OBJ" -e "$hp_group\$"; }
if wait_for 20 gone; then ok hotunplug-objects-removed; else not_ok hotunplug-objects-removed "$(busctl tree --list org.vfiod1 | xargs)"; fi
measure hotunplug-to-removed "$(elapsed_since "$t0")"
sleep 1
check hotunplug-interfaces-removed sh -c "grep -A30 'Member=InterfacesRemoved' /tmp/monitor.txt | grep -q '\"$HP_OBJ\"'"
errs=$(journal_since /tmp/cursor | grep -i -E 'error|fail' )
if [ -z "$errs" ] && [ -z "$(journalctl -u vfiod -p err -q --no-pager)" ]; then ok hotunplug-no-errors
else not_ok hotunplug-no-errors "$errs"; fi
journal_since /tmp/cursor -o short-monotonic | while read -r line; do note "$line"; done

# The driver not loaded, early = true. Nothing uses e1000e now: the "GPU" is on vfio-pci and the
# first hot-plugged NIC is gone.
modprobe -r e1000e
check e1000e-unloaded test ! -d /sys/module/e1000e
: >/tmp/monitor.txt
mark_journal /tmp/cursor
t_ask=$(now_s)
read -r u_ask _ </proc/uptime
host_request qmp device_add '{"driver":"e1000e","bus":"rp4","id":"hp2","romfile":""}' >/dev/null
if wait_for 20 bound_signal $EHP; then
    measure early-hotplug-to-bound "$(awk -v a="$t_ask" -v b="$(bound_signal $EHP)" 'BEGIN { printf "%.3f", b - a }')"
else
    note "no State bound signal for the group of $EHP"
fi
hotplug_steps early $EHP "$u_ask"
# The rule's helper asked for the override in udev's add event (its properties, as broadcast).
check early-override-from-udev sh -c "awk -v RS= '/^UDEV.* add .*\/$EHP [(]pci/' /tmp/udev.txt | grep -qx VFIOD_EARLY_DRIVER=vfio-pci"
expect_eq early-bound bound "$(group_state "$(group_of $EHP)")"
expect_eq early-vfio-pci vfio-pci "$(driver_of $EHP)"
# udev loaded e1000e for this device by its modalias, after the rule had set the override and
# before vfiod heard of the device: a driver was there to take it, and never did (e1000e names
# every function it probes).
loaded_at=$(udev_events | first_stamp "KERNEL add /module/e1000e " "$u_ask")
decided_at=$(vfiod_log | first_stamp "binding $EHP" "$u_ask")
check early-e1000e-loaded-first awk -v l="$loaded_at" -v d="$decided_at" \
    'BEGIN { if (l == "" || d == "" || l + 0 >= d + 0) { print "e1000e loaded at " l ", vfiod decided at " d; exit 1 } }'
hits=$(dmesg | grep "e1000e $EHP" | head -n3)
if [ -z "$hits" ]; then ok early-never-e1000e; else not_ok early-never-e1000e "$hits"; fi
errs=$(journal_since /tmp/cursor -p warning)
if [ -z "$errs" ]; then ok early-no-errors; else not_ok early-no-errors "$errs"; fi
kill $monitor $udevmon
udev_events | while read -r line; do note "$line"; done
journal_since /tmp/cursor -o short-monotonic | while read -r line; do note "$line"; done
