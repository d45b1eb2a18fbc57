# Scenario: host use that sysfs alone does not show, all on one boot. vfiod decides from PID 1's
# mount table (a disk mounted before vfiod started and unmounted since binds at once; one mounted
# after vfiod started blocks Bind); a process holding the HDMI-audio companion's control node gets
# the GPU-like group refused in-use-device, naming pid and comm, until it lets go; the GPU-like
# e1000e moved into a named network namespace gets it refused in-use-network naming the namespace
# (and the interface, once a process in it shows its sysfs), until it is moved back.
# checks: gpu-refused-netns gpu-netns-named gpu-netns-interface gpu-netns-kept gpu-back-not-network
# checks: gpu-refused-device gpu-device-message gpu-kept gpu-binds-after-close
# checks: nvme-refused-at-start nvme-unmounted-binds nvme-released nvme-remounted-refused
# checks: nvme-remounted-kept
# The nvme disk held O_EXCL by a process, neither mounted nor held, is refused in-use-storage
# "claimed"; and no probe changes anything: udevadm monitor sees no event during a plan, a refused
# Bind, or the probe's own read-only O_EXCL open and close.
# checks: nvme-claimed-refused nvme-claimed-kept no-event-plan-bind no-event-probe nvme-unclaimed-binds
. /vmtest/lib.sh

sel() { echo "$(cut -c3- "$(pci_dev "$1")/vendor"):$(cut -c3- "$(pci_dev "$1")/device")"; }
reason_of() { group_prop "$1" Reason | sed 's/^s "\(.*\)"$/\1/'; }
# bind_out ADDR: vfioctl bind's output and exit status on one line.
bind_out() { _o=$(vfioctl bind "$1" 2>&1); echo "rc=$? $_o"; }
# expect_match NAME GLOB ACTUAL
expect_match() {
    case $3 in $2) ok "$1" ;; *) not_ok "$1" "expected '$2', got '$3'" ;; esac
}
ng=$(group_of $NVME)

write_config <<TOML
[[device]]
selector = "$(sel $NVME)"
resource_name = "vmtest/disk"

[[device]]
selector = "$(sel $GPU)"
resource_name = "vmtest/gpu"
TOML
gg=$(group_of $GPU)

# (b) A "sound server" holds the companion's control node while vfiod starts and Bind is asked.
ctl=$(ls /dev/snd/ | grep -m1 '^controlC')
sleep 600 <"/dev/snd/$ctl" &
holder=$!

# (a) The GPU-like NIC's interface goes to a named namespace, with no address.
ifname=$(ls "$(pci_dev $GPU)/net")
ip netns add blue
ip link set "$ifname" netns blue
note "after the move: net/ holds '$(ls "$(pci_dev $GPU)/net" 2>&1)'"

disk=/dev/$(ls "$(pci_dev $NVME)/nvme/"*/ | grep -m1 '^nvme[0-9]*n1$')
mkfs.ext4 -q -F "$disk"
mkdir -p /mnt/data

# (d) Mounted before vfiod starts, unmounted after: no stale "mounted".
mount "$disk" /mnt/data
systemctl restart vfiod.service
wait_for 30 state_is "$ng" refused
expect_eq nvme-refused-at-start "refused in-use-storage" "$(group_state "$ng") $(reason_of "$ng")"
umount /mnt/data
out=$(bind_out $NVME)
note "bind after umount: $out"
expect_eq nvme-unmounted-binds "vfio-pci bound" "$(driver_of $NVME) $(group_state "$ng")"
check nvme-released manager Release s $NVME
wait_for 30 test -e "$disk"
# Mounted after vfiod started: Bind must see it.
mount "$disk" /mnt/data
out=$(bind_out $NVME)
note "bind while mounted: $out"
expect_match nvme-remounted-refused "rc=* in-use-storage*mounted on /mnt/data*" "$out"
expect_eq nvme-remounted-kept nvme "$(driver_of $NVME)"
umount /mnt/data

# (c) + (e)
python3 - "$disk" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL)
open("/run/claim.ready", "w").close()
time.sleep(600)
PY
claimer=$!
wait_for 20 test -e /run/claim.ready
udevadm monitor --kernel --udev >/run/monitor.log 2>&1 &
monitor=$!
sleep 1
vfioctl plan >/run/plan.out 2>&1
out=$(bind_out $NVME)
sleep 1
kill $monitor
note "bind while claimed: $out"
expect_match nvme-claimed-refused "rc=* in-use-storage*nvme*n1 is claimed by the kernel (*" "$out"
expect_eq nvme-claimed-kept nvme "$(driver_of $NVME)"
events=$(grep -E '^(KERNEL|UDEV)\[' /run/monitor.log)
if [ -z "$events" ]; then ok no-event-plan-bind; else not_ok no-event-plan-bind "$events"; fi
kill $claimer
wait $claimer 2>/dev/null
udevadm monitor --kernel --udev >/run/monitor.log 2>&1 &
monitor=$!
sleep 1
python3 -c 'import os, sys; os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL | os.O_NONBLOCK | os.O_CLOEXEC))' "$disk"
sleep 1
kill $monitor
events=$(grep -E '^(KERNEL|UDEV)\[' /run/monitor.log)
if [ -z "$events" ]; then ok no-event-probe; else not_ok no-event-probe "$events"; fi
out=$(bind_out $NVME)
note "bind after the claim ended: $out"
expect_eq nvme-unclaimed-binds "vfio-pci bound" "$(driver_of $NVME) $(group_state "$ng")"

wait_for 30 state_is "$gg" refused
out=$(bind_out $GPU)
note "bind while in netns blue: $out"
expect_eq gpu-refused-netns "refused in-use-network" "$(group_state "$gg") $(reason_of "$gg")"
expect_match gpu-netns-named "rc=* in-use-network*$GPU: its interface*network namespace blue*" "$out"
ip netns exec blue sleep 600 &
inside=$!
wait_for 10 sh -c "ip netns identify $inside | grep -q blue"
out=$(bind_out $GPU)
note "bind with a process in blue: $out"
expect_match gpu-netns-interface \
    "rc=* in-use-network*$GPU: its interface $ifname is in network namespace blue, held by pid $inside (sleep)*" "$out"
expect_eq gpu-netns-kept "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"
kill $inside
ip -n blue link set "$ifname" netns 1
ip netns del blue
out=$(bind_out $GPU)
note "bind while $ctl is held: $out"
expect_match gpu-back-not-network "rc=* in-use-device*" "$out"
expect_eq gpu-refused-device "refused in-use-device" "$(group_state "$gg") $(reason_of "$gg")"
expect_match gpu-device-message "rc=* in-use-device*$AUDIO: /dev/snd/$ctl is open by pid $holder (sleep)*" "$out"
expect_eq gpu-kept "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"
kill $holder
wait $holder 2>/dev/null
out=$(bind_out $GPU)
note "bind after close: $out"
expect_eq gpu-binds-after-close "vfio-pci vfio-pci bound" \
    "$(driver_of $GPU) $(driver_of $AUDIO) $(group_state "$gg")"
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done
