# Scenario: host use that sysfs alone does not show, all on one boot. vfiod decides from PID 1's
# mount table (a disk mounted before vfiod started and unmounted since binds at once; one mounted
# after vfiod started blocks Bind).
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
TOML

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
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done
