# The live demo (tests/vm/demo-vm.sh): a real kernel with real IOMMU groups; vfioctl plan before,
# vfiod started by its udev rule, its journal, the D-Bus tree and vfioctl status after, and a
# hot-plug with its latency. Also run as a test so the demo keeps working.
# checks: demo-plan-bind demo-bound demo-hotplug-bound
. /vmtest/lib.sh

narrate "Guest up after $(uptime_s) s: Linux $(uname -r), systemd, udevd and the system bus."
narrate "Its PCI functions and IOMMU groups (the GPU + HDMI audio pair shares group $(group_of $GPU)):"
for d in /sys/bus/pci/devices/*; do
    a=$(basename "$d")
    report "#     $a  $(cut -c3- "$d/vendor"):$(cut -c3- "$d/device")  group $(group_of "$a")  driver $(driver_of "$a" || echo -)"
done

cat >/etc/vfiod/vfiod.toml <<'TOML'
[[device]]
selector = "8086:10d3"      # the "GPU" (an e1000e here), and any like it hot-plugged later
resource_name = "example.com/gpu"
TOML
narrate "The allowlist, /etc/vfiod/vfiod.toml:"
show grep -v '^$' /etc/vfiod/vfiod.toml
narrate "vfioctl plan: what vfiod would do, writing nothing"
show vfioctl plan
check demo-plan-bind json_has "$(vfioctl plan --json)" '"action":"bind"'

narrate "The device appears (udevadm trigger): the udev rule starts vfiod, which binds the group"
mark_journal /tmp/cursor
udevadm trigger --action=add "$(pci_dev $GPU)"
grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq demo-bound bound "$(group_state "$grp")"
narrate "vfiod's journal"
show journal_since /tmp/cursor -o short-monotonic
narrate "busctl tree org.vfiod1"
show busctl tree --list org.vfiod1
narrate "vfioctl status"
show vfioctl status
narrate "Drivers now: $GPU $(driver_of $GPU), $AUDIO $(driver_of $AUDIO); /dev/vfio: $(ls /dev/vfio | xargs)"

narrate "Hot-plug: QMP device_add of another e1000e into an empty PCIe root port"
busctl monitor org.vfiod1 >/tmp/monitor.txt 2>&1 &
monitor=$!
sleep 1
HP=0000:03:00.0
t_ask=$(now_s)
host_request qmp device_add '{"driver":"e1000e","bus":"rp3","id":"hp1","netdev":"hp","romfile":""}' >/dev/null
bound_signal() { _g=$(group_of $HP 2>/dev/null) && [ -n "$_g" ] && signal_time /tmp/monitor.txt "/org/vfiod1/group/$_g" bound; }
if wait_for 20 bound_signal; then
    ok demo-hotplug-bound
    latency=$(awk -v a="$t_ask" -v b="$(bound_signal)" 'BEGIN { printf "%.2f", b - a }')
    measure hotplug-to-bound "$latency"
    narrate "$HP is on $(driver_of $HP); State \"bound\" was on the bus ${latency} s after device_add"
else
    not_ok demo-hotplug-bound "no bound signal for $HP"
fi
kill $monitor
show vfioctl status
narrate "Shutting the guest down"
