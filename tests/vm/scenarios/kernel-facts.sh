# The raw kernel behaviour vfiod relies on, on a real 6.1 kernel with real IOMMU groups.
# topology: default
# checks: group-two-functions mgmt-nic-own-group host-drivers-bound override-reads-null
# checks: bind-gpu-vfio bind-audio-vfio vfio-dev-node vfio-group-exclusive
# checks: release-gpu-e1000e release-audio-hda override-cleared virtio-netdev-one-level-deeper
# checks: nvme-namespace-under-controller iommu-class-present
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel virtio_pci virtio_net nvme vfio-pci

grp=$(group_of $GPU)
expect_eq group-two-functions "$GPU $AUDIO" "$(ls /sys/kernel/iommu_groups/$grp/devices | xargs)"
check mgmt-nic-own-group test "$(group_of $MGMT)" != "$grp"
expect_eq host-drivers-bound "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"
expect_eq override-reads-null "(null)" "$(cat "$(pci_dev $GPU)/driver_override")"

# libvirt's order: override, unbind, reprobe.
move() { # BDF DRIVER ("" clears the override: the kernel needs a write of "\n")
    if [ -n "$2" ]; then printf '%s' "$2"; else echo; fi >"$(pci_dev "$1")/driver_override"
    [ -e "$(pci_dev "$1")/driver" ] && printf '%s' "$1" >"$(pci_dev "$1")/driver/unbind"
    printf '%s' "$1" >/sys/bus/pci/drivers_probe
}
move $GPU vfio-pci
move $AUDIO vfio-pci
expect_eq bind-gpu-vfio vfio-pci "$(driver_of $GPU)"
expect_eq bind-audio-vfio vfio-pci "$(driver_of $AUDIO)"
check vfio-dev-node test -c /dev/vfio/$grp

# A VM holding the group: a second open fails (EBUSY), which is how "in use" can be seen.
exec 3</dev/vfio/$grp
if cat /dev/vfio/$grp >/dev/null 2>&1; then
    not_ok vfio-group-exclusive "second open of /dev/vfio/$grp succeeded"
else
    ok vfio-group-exclusive
fi
exec 3<&-

# Release: an empty override ("\n") clears it; the host driver comes back on reprobe.
move $GPU ""
move $AUDIO ""
expect_eq release-gpu-e1000e e1000e "$(driver_of $GPU)"
expect_eq release-audio-hda snd_hda_intel "$(driver_of $AUDIO)"
expect_eq override-cleared "(null) (null)" \
    "$(cat "$(pci_dev $GPU)/driver_override") $(cat "$(pci_dev $AUDIO)/driver_override")"

# Where the host-use reader has to look: a virtio-net netdev sits under <BDF>/virtio<N>/net, an
# nvme namespace under <BDF>/nvme/nvme<N>/nvme<N>n1 (walk the subtree, not just <BDF>/net).
check virtio-netdev-one-level-deeper sh -c "ls -d $(pci_dev $MGMT)/virtio*/net/* && ! test -e $(pci_dev $MGMT)/net"
wait_for 10 sh -c "ls -d $(pci_dev $NVME)/nvme/nvme*/nvme*n1"
check nvme-namespace-under-controller sh -c "ls -d $(pci_dev $NVME)/nvme/nvme*/nvme*n1"
check iommu-class-present test -e /sys/class/iommu/dmar0
