# Scenario 1, coldplug: vfiod, started by the udev rule at boot, binds the allowlisted group whole;
# the early override keeps the GPU from ever reaching e1000e (nothing else loads e1000e first:
# the management NIC is virtio).
# Shares its boot with daemon-sriov: overlays/sriov is overlays/gpu-early plus the [[sriov]] PFs,
# which are on other addresses and never touch the GPU's group.
# overlay: overlays/sriov
# nvme-sriov: yes
# checks: vfiod-active coldplug-bound coldplug-gpu-vfio coldplug-audio-vfio coldplug-vfio-node
# checks: coldplug-busctl-devices e1000e-loaded early-never-e1000e coldplug-no-errors
# checks: apply-refused-while-daemon-runs
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 systemctl is-active --quiet vfiod.service
check vfiod-active systemctl is-active --quiet vfiod.service
wait_for 30 state_is "$grp" bound
expect_eq coldplug-bound bound "$(group_state "$grp")"
expect_eq coldplug-gpu-vfio vfio-pci "$(driver_of $GPU)"
expect_eq coldplug-audio-vfio vfio-pci "$(driver_of $AUDIO)"
check coldplug-vfio-node test -c "/dev/vfio/$grp"
devs=$(group_prop "$grp" Devices)
check coldplug-busctl-devices sh -c "echo '$devs' | grep -q 'ao 2 \"/org/vfiod1/device/0000_01_00_0\" \"/org/vfiod1/device/0000_01_00_1\"'"
# The host driver was there to take it (udev loads it by modalias), and still never did:
# e1000e announces every function it probes ("e1000e 0000:01:00.0 eth1: ...").
check e1000e-loaded test -d /sys/module/e1000e
hits=$(dmesg | grep "e1000e $GPU" | head -n3)
if [ -z "$hits" ]; then ok early-never-e1000e; else not_ok early-never-e1000e "$hits"; fi
# A one-shot apply beside the running daemon would race it: refused (exit 1), nothing written.
out=$(vfioctl apply 2>&1); rc=$?
if [ "$rc" = 1 ] && echo "$out" | grep -q "vfiod is running"; then ok apply-refused-while-daemon-runs
else not_ok apply-refused-while-daemon-runs "rc=$rc: $out"; fi
errs=$(journalctl -u vfiod -p err -q --no-pager)
if [ -z "$errs" ]; then ok coldplug-no-errors; else not_ok coldplug-no-errors "$errs"; fi
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done
# Boot-relative times (s): vfiod active, and the journal line that said the group is bound.
measure vfiod-active-at "$(systemctl show vfiod -P ActiveEnterTimestampMonotonic | awk '{ printf "%.2f", $1 / 1e6 }')"
measure coldplug-bound-at "$(journalctl -u vfiod -q -o short-monotonic --no-pager | grep "group $grp: bound" | head -n1 | sed 's/^\[ *\([0-9.]*\)\].*/\1/')"
