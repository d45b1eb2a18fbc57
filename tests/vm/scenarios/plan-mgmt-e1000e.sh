# The management NIC has the GPU's vendor:device (both e1000e, 8086:10d3) and carries the guest's
# address and default route: one selector matches both; only the GPU's group may be planned bind.
# topology: e1000e-mgmt
# checks: mgmt-routed plan-exit-0 plan-mgmt-refused plan-mgmt-blocker plan-gpu-bind
# checks: mgmt-still-routed
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel vfio-pci
ifname=$(ls "$(pci_dev $MGMT)/net")
ip link set "$ifname" up
ip addr add 10.0.2.15/24 dev "$ifname"
ip route add default via 10.0.2.2 dev "$ifname"
mgmt_routed() {
    ip route | grep -q "default via 10.0.2.2 dev $ifname" && [ "$(driver_of $MGMT)" = e1000e ]
}
check mgmt-routed mgmt_routed

write_config <<'TOML'
[[device]]
selector = "8086:10d3"
resource_name = "vmtest/gpu"
TOML
json=$(vfioctl plan --json --root /)
expect_eq plan-exit-0 0 $?
note "$json"
seg=$(plan_group "$json" "$(group_of $MGMT)")
check plan-mgmt-refused json_has "$seg" '"action":"refuse","reason":"in-use-network"'
check plan-mgmt-blocker json_has "$seg" "\"blockers\":\\[\"$MGMT\"\\]"
check plan-gpu-bind json_has "$(plan_group "$json" "$(group_of $GPU)")" '"action":"bind"'
check mgmt-still-routed mgmt_routed
