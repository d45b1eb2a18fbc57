# Scenario 5: a reload that allowlists the mounted nvme disk and the routed management NIC
# (virtio-net) refuses both groups (in-use-storage, in-use-network) and touches neither: the
# mount, the address and the route stay, the drivers stay.
# overlay: overlays/e1000e-any
# checks: bound-at-boot nvme-mounted mgmt-routed reload-accepted nvme-refused-storage
# checks: mgmt-refused-network nvme-blocker mount-intact mgmt-still-routed host-drivers-kept
# checks: gpu-still-bound
. /vmtest/lib.sh

wait_for 60 state_is "$(group_of $GPU)" bound
expect_eq bound-at-boot bound "$(group_state "$(group_of $GPU)")"

disk=/dev/$(ls "$(pci_dev $NVME)/nvme/"*/ | grep -m1 '^nvme[0-9]*n1$')
mkfs.ext4 -q -F "$disk"
mkdir -p /mnt/data && mount "$disk" /mnt/data && echo payload >/mnt/data/file
check nvme-mounted mountpoint -q /mnt/data

ifname=$(ls "$(pci_dev $MGMT)/virtio"*/net)
ip link set "$ifname" up
ip addr add 10.0.2.15/24 dev "$ifname"
ip route add default via 10.0.2.2 dev "$ifname"
mgmt_routed() {
    ip route | grep -q "default via 10.0.2.2 dev $ifname" &&
        ip addr show dev "$ifname" | grep -q 'inet 10.0.2.15/24'
}
check mgmt-routed mgmt_routed

sel() { echo "$(cut -c3- "$(pci_dev "$1")/vendor"):$(cut -c3- "$(pci_dev "$1")/device")"; }
cat >>/etc/vfiod/vfiod.toml <<TOML

[[device]]
selector = "$(sel $NVME)"
resource_name = "vmtest/disk"

[[device]]
selector = "$(sel $MGMT)"
resource_name = "vmtest/mgmt"
TOML
mark_journal /tmp/cursor
systemctl reload vfiod.service
wait_for 30 sh -c "journalctl -u vfiod --after-cursor '$(cat /tmp/cursor)' -q | grep -q 'configuration reloaded'"
check reload-accepted sh -c "journalctl -u vfiod --after-cursor '$(cat /tmp/cursor)' -q | grep -q 'configuration reloaded'"
ng=$(group_of $NVME)
mg=$(group_of $MGMT)
wait_for 10 state_is "$ng" refused
expect_eq nvme-refused-storage "refused in-use-storage" \
    "$(group_state "$ng") $(group_prop "$ng" Reason | sed 's/^s "\(.*\)"$/\1/')"
expect_eq mgmt-refused-network "refused in-use-network" \
    "$(group_state "$mg") $(group_prop "$mg" Reason | sed 's/^s "\(.*\)"$/\1/')"
expect_eq nvme-blocker "as 1 \"$NVME\"" "$(group_prop "$ng" Blockers)"
check mount-intact sh -c "mountpoint -q /mnt/data && grep -q payload /mnt/data/file"
check mgmt-still-routed mgmt_routed
expect_eq host-drivers-kept "nvme virtio-pci" "$(driver_of $NVME) $(driver_of $MGMT)"
expect_eq gpu-still-bound bound "$(group_state "$(group_of $GPU)")"
journal_since /tmp/cursor -o short-monotonic | while read -r line; do note "$line"; done
umount /mnt/data
