# The management NIC is an e1000e too, so e1000e is loaded (by that NIC) before or while udev sees
# the GPU: the early override can lose the race and the daemon must move the GPU off e1000e. The
# management NIC, same vendor:device but not the allowlisted address, stays on e1000e.
# topology: e1000e-mgmt
# overlay: overlays/gpu-early
# checks: vfiod-active gpu-group-bound gpu-vfio audio-vfio mgmt-kept-e1000e no-errors
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 systemctl is-active --quiet vfiod.service
check vfiod-active systemctl is-active --quiet vfiod.service
wait_for 30 state_is "$grp" bound
expect_eq gpu-group-bound bound "$(group_state "$grp")"
expect_eq gpu-vfio vfio-pci "$(driver_of $GPU)"
expect_eq audio-vfio vfio-pci "$(driver_of $AUDIO)"
expect_eq mgmt-kept-e1000e "e1000e (null)" "$(driver_of $MGMT) $(cat "$(pci_dev $MGMT)/driver_override")"
errs=$(journalctl -u vfiod -p err -q --no-pager)
if [ -z "$errs" ]; then ok no-errors; else not_ok no-errors "$errs"; fi
if dmesg | grep -q "e1000e $GPU"; then note "e1000e probed the GPU first; vfiod moved it"
else note "the early override won: e1000e never probed the GPU"; fi
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done
