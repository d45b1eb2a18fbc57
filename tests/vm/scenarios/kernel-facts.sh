# The raw kernel behaviour vfiod relies on, on a real 6.1 kernel with real IOMMU groups.
# topology: default
# checks: group-two-functions mgmt-nic-own-group host-drivers-bound override-reads-null
# checks: bind-gpu-vfio bind-audio-vfio vfio-dev-node vfio-group-exclusive
# checks: release-gpu-e1000e release-audio-hda override-cleared virtio-netdev-one-level-deeper
# checks: nvme-namespace-under-controller iommu-class-present
# SR-IOV (issue 24) on QEMU's NVMe PF: what vfiod's VF creation relies on.
# nvme-sriov: yes
# checks: sriov-pf-nvme sriov-totalvfs sriov-vfs-created sriov-vfs-driverless sriov-vfs-own-groups
# checks: sriov-vfs-pf-id sriov-vf-vfio-node sriov-change-ebusy sriov-through-zero sriov-pf-kept
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel virtio_pci virtio_net nvme vfio-pci

grp=$(group_of $GPU)
expect_eq group-two-functions "$GPU $AUDIO" "$(ls /sys/kernel/iommu_groups/$grp/devices | xargs)"
check mgmt-nic-own-group test "$(group_of $MGMT)" != "$grp"
expect_eq host-drivers-bound "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"
expect_eq override-reads-null "(null)" "$(cat "$(pci_dev $GPU)/driver_override")"

pci_move $GPU vfio-pci
pci_move $AUDIO vfio-pci
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
pci_move $GPU ""
pci_move $AUDIO ""
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

# SR-IOV on QEMU's NVMe PF: autoprobe 0 keeps new VFs off every driver; each VF is a group of its
# own with the PF's ID; a count change between two non-zero counts is refused (EBUSY), through 0
# it works.
PF=$SRIOV_PF
pf_attr() { cat "$(pci_dev $PF)/$1"; }
wait_for 10 test -e "$(pci_dev $PF)/driver"
expect_eq sriov-pf-nvme nvme "$(driver_of $PF)"
expect_eq sriov-totalvfs "2 0" "$(pf_attr sriov_totalvfs) $(pf_attr sriov_numvfs)"
echo 0 >"$(pci_dev $PF)/sriov_drivers_autoprobe"
echo 2 >"$(pci_dev $PF)/sriov_numvfs"
vfs=$(for n in 0 1; do basename "$(readlink "$(pci_dev $PF)/virtfn$n")"; done | xargs)
note "PF $PF (group $(group_of $PF)), VFs $vfs"
expect_eq sriov-vfs-created "2 ${PF%.0}.1 ${PF%.0}.2" "$(pf_attr sriov_numvfs) $vfs"
drivers=$(for vf in $vfs; do driver_of "$vf" || echo none; done | xargs)
expect_eq sriov-vfs-driverless "none none" "$drivers"
# Each VF alone in its group, and no group shared with the PF or the other VF.
groups=$(for d in $PF $vfs; do group_of "$d"; done)
members=$(for vf in $vfs; do ls "/sys/kernel/iommu_groups/$(group_of "$vf")/devices"; done | xargs)
if [ "$members" = "$vfs" ] && [ "$(echo "$groups" | sort -u | wc -l)" = 3 ]; then
    ok sriov-vfs-own-groups
else
    not_ok sriov-vfs-own-groups "groups $(echo "$groups" | xargs), members $members"
fi
ids=$(for vf in $vfs; do echo "$(cut -c3- "$(pci_dev "$vf")/vendor"):$(cut -c3- "$(pci_dev "$vf")/device")"; done | xargs)
expect_eq sriov-vfs-pf-id "1b36:0010 1b36:0010" "$ids"
vf0=${vfs%% *}
pci_move "$vf0" vfio-pci
check sriov-vf-vfio-node test -c "/dev/vfio/$(group_of "$vf0")"
if out=$( (echo 1 >"$(pci_dev $PF)/sriov_numvfs") 2>&1); then
    not_ok sriov-change-ebusy "2 -> 1 succeeded"
else
    case $out in *"busy"*) ok sriov-change-ebusy ;; *) not_ok sriov-change-ebusy "$out" ;; esac
fi
echo 0 >"$(pci_dev $PF)/sriov_numvfs" && echo 1 >"$(pci_dev $PF)/sriov_numvfs"
expect_eq sriov-through-zero "1 ${PF%.0}.1" \
    "$(pf_attr sriov_numvfs) $(basename "$(readlink "$(pci_dev $PF)/virtfn0")")"
expect_eq sriov-pf-kept nvme "$(driver_of $PF)"
