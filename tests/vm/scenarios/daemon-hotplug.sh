# Scenario 2, hot-plug: an allowlisted e1000e added over QMP to an empty root port is bound within
# 2 s of device_add returning and announced with InterfacesAdded; device_del removes its objects
# with InterfacesRemoved and nothing logged as an error.
# overlay: overlays/e1000e-any
# checks: coldplug-bound hotplug-within-2s hotplug-bound hotplug-vfio-pci hotplug-interfaces-added
# checks: hotunplug-objects-removed hotunplug-interfaces-removed hotunplug-no-errors
. /vmtest/lib.sh

HP=0000:03:00.0
HP_OBJ=/org/vfiod1/device/0000_03_00_0
wait_for 60 state_is "$(group_of $GPU)" bound
expect_eq coldplug-bound bound "$(group_state "$(group_of $GPU)")"

busctl monitor org.vfiod1 >/tmp/monitor.txt 2>&1 &
monitor=$!
sleep 1
mark_journal /tmp/cursor

# device_add returns somewhere between asking the host and reading its answer; the latency is
# counted from the ask (an upper bound) up to the time of the signal that carried State "bound"
# for the new group (busctl monitor's timestamp). From the answer, it is a lower bound.
t_ask=$(now_s)
host_request qmp device_add '{"driver":"e1000e","bus":"rp3","id":"hp1","netdev":"hp","romfile":""}' >/dev/null
t_answer=$(now_s)
note "device_add answered at uptime $(uptime_s)"
bound_signal() { _g=$(group_of $HP 2>/dev/null) && [ -n "$_g" ] && signal_time /tmp/monitor.txt "/org/vfiod1/group/$_g" bound; }
if wait_for 20 bound_signal; then
    t_bound=$(bound_signal)
    latency=$(awk -v a="$t_ask" -v b="$t_bound" 'BEGIN { printf "%.3f", b - a }')
    measure hotplug-to-bound "$latency"
    measure hotplug-to-bound-lower-bound "$(awk -v a="$t_answer" -v b="$t_bound" 'BEGIN { printf "%.3f", b - a }')"
    check hotplug-within-2s awk -v l="$latency" 'BEGIN { exit !(l <= 2.0) }'
else
    not_ok hotplug-within-2s "no State bound signal for the group of $HP"
fi
# Where the time goes, from vfiod's and the kernel's own log times (uptime seconds).
note "$(dmesg | grep -E "pciehp|$HP" | grep -v BAR | tail -n8 | tr '\n' '|')"
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
kill $monitor
errs=$(journal_since /tmp/cursor | grep -i -E 'error|fail' )
if [ -z "$errs" ] && [ -z "$(journalctl -u vfiod -p err -q --no-pager)" ]; then ok hotunplug-no-errors
else not_ok hotunplug-no-errors "$errs"; fi
journal_since /tmp/cursor -o short-monotonic | while read -r line; do note "$line"; done
