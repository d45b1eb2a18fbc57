# Scenario: host use that sysfs alone does not show, all on one boot. vfiod decides from PID 1's
# mount table (a disk mounted before vfiod started and unmounted since binds at once; one mounted
# after vfiod started blocks Bind); a process holding the HDMI-audio companion's control node gets
# the GPU-like group refused in-use-device, naming pid and comm, until it lets go.
# checks: gpu-refused-device gpu-device-message gpu-kept gpu-binds-after-close
# checks: nvme-refused-at-start nvme-unmounted-binds nvme-released nvme-remounted-refused
# checks: nvme-remounted-kept
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

wait_for 30 state_is "$gg" refused
out=$(bind_out $GPU)
note "bind while $ctl is held: $out"
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
