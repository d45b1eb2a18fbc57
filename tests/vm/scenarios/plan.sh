# `vfioctl plan` on the real kernel: the two-function group is planned whole, nothing is written.
# topology: default
# checks: plan-exit-0 plan-iommu plan-gpu-bind plan-gpu-allowlisted plan-audio-companion
# checks: plan-gpu-writes plan-only-gpu-group plan-wrote-nothing
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel virtio_pci virtio_net vfio-pci
write_config <<'TOML'
[[device]]
selector = "8086:10d3"
resource_name = "vmtest/gpu"
TOML

json=$(vfioctl plan --json --root /)
expect_eq plan-exit-0 0 $?
note "$json"
grp=$(group_of $GPU)
check plan-iommu json_has "$json" '"iommu":true'
seg=$(plan_group "$json" "$grp")
check plan-gpu-bind json_has "$seg" '"action":"bind"'
check plan-gpu-allowlisted json_has "$seg" "\"address\":\"$GPU\",[^}]*\"role\":\"allowlisted\""
check plan-audio-companion json_has "$seg" "\"address\":\"$AUDIO\",[^}]*\"role\":\"companion\""
check plan-gpu-writes json_has "$seg" \
    "{\"path\":\"sys/bus/pci/devices/$GPU/driver_override\",\"value\":\"vfio-pci\"}"
expect_eq plan-only-gpu-group 1 "$(echo "$json" | json_compact | grep -o '{"group":' | wc -l)"
expect_eq plan-wrote-nothing "e1000e snd_hda_intel (null)" \
    "$(driver_of $GPU) $(driver_of $AUDIO) $(cat "$(pci_dev $GPU)/driver_override")"
