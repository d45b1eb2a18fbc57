# `vfioctl apply` (the executor) on the real kernel: loads vfio-pci itself, binds the two-function
# group whole, journals it, is a no-op the second time, and reconciles an interrupted bind.
# Also the kernel error codes the unit tests' fake kernel assumes.
# topology: default
# checks: modprobe-by-apply apply-exit-0 apply-gpu-vfio apply-audio-vfio apply-mgmt-untouched
# checks: journal-done journal-originals enable-zero-on-vfio apply-again-exit-0
# checks: bind-bound-ebusy bind-nomatch-enodev unbind-wrong-driver-enodev probe-nothing-ok
# checks: probe-nothing-no-driver probe-missing-enodev override-newline-clears
# checks: reconcile-exit-0 reconcile-reported reconcile-gpu-vfio reconcile-audio-vfio
# Then a native-multipath NVMe namespace (nvme-subsys: its block device lives under
# sys/devices/virtual/nvme-subsystem, not under its controller) held only by an O_EXCL open: apply
# refuses the controller's group in-use-storage, naming the namespace, and binds it once the
# holder is gone.
# checks: mpath-other-nvme-idle mpath-namespace-in-subsystem mpath-claimed-refused mpath-claimed-exit-1
# checks: mpath-claimed-kept mpath-unclaimed-binds
# nvme-subsys: yes
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel virtio_pci virtio_net
write_config <<'TOML'
[[device]]
selector = "8086:10d3"
address = "0000:01:00.0"
resource_name = "vmtest/gpu"
TOML
grp=$(group_of $GPU)
journal=/run/vfiod/group-$grp

out=$(vfioctl apply 2>&1); rc=$?
note "$out"
check modprobe-by-apply test -d /sys/bus/pci/drivers/vfio-pci
expect_eq apply-exit-0 0 $rc
expect_eq apply-gpu-vfio vfio-pci "$(driver_of $GPU)"
expect_eq apply-audio-vfio vfio-pci "$(driver_of $AUDIO)"
expect_eq apply-mgmt-untouched "virtio-pci (null)" \
    "$(driver_of $MGMT) $(cat "$(pci_dev $MGMT)/driver_override")"
note "$(cat $journal)"
check journal-done grep -q "phase done" $journal
check journal-originals grep -q "function $AUDIO original=snd_hda_intel" $journal
# vfio_use relies on this: vfio-pci leaves the device disabled until a user opens it.
expect_eq enable-zero-on-vfio 0 "$(cat "$(pci_dev $GPU)/enable")"
vfioctl apply >/dev/null 2>&1
expect_eq apply-again-exit-0 0 $?

# The errno of write(2), as the fake kernel models it (dd reports it; busybox printf does not).
kw() { printf '%s' "$2" | dd of="$1" 2>&1; }
r=$(kw /sys/bus/pci/drivers/vfio-pci/bind $GPU); note "bind bound: $r"
check bind-bound-ebusy sh -c "echo '$r' | grep -qi busy"
r=$(kw /sys/bus/pci/drivers/e1000e/bind $AUDIO); note "bind nomatch: $r"
check bind-nomatch-enodev sh -c "echo '$r' | grep -q 'No such device'"
r=$(kw /sys/bus/pci/drivers/e1000e/unbind $GPU); note "unbind wrong driver: $r"
check unbind-wrong-driver-enodev sh -c "echo '$r' | grep -q 'No such device'"
printf 'nosuchdrv' >"$(pci_dev $GPU)/driver_override"
printf '%s' $GPU >"$(pci_dev $GPU)/driver/unbind"
printf '%s' $GPU >/sys/bus/pci/drivers_probe
expect_eq probe-nothing-ok 0 $?
expect_eq probe-nothing-no-driver "" "$(driver_of $GPU)"
r=$(kw /sys/bus/pci/drivers_probe 0000:09:00.0); note "probe missing: $r"
check probe-missing-enodev sh -c "echo '$r' | grep -q 'No such device'"
echo >"$(pci_dev $GPU)/driver_override"
expect_eq override-newline-clears "(null)" "$(cat "$(pci_dev $GPU)/driver_override")"

# A crash mid-bind: the GPU is back on its host driver, the audio function still on vfio-pci,
# and the journal says the bind started. apply rolls it back, then binds the group whole.
printf '%s' $GPU >/sys/bus/pci/drivers_probe
sed -i 's/phase done/phase started/' $journal
out=$(vfioctl apply 2>&1); rc=$?
note "$out"
expect_eq reconcile-exit-0 0 $rc
check reconcile-reported sh -c "echo '$out' | grep -q 'journal: group $grp: rolled-back'"
expect_eq reconcile-gpu-vfio vfio-pci "$(driver_of $GPU)"
expect_eq reconcile-audio-vfio vfio-pci "$(driver_of $AUDIO)"

# The multipath controller (8086:5845, run.py's nvme-subsys). $NVME stays off the nvme driver, so
# no other NVMe does I/O in this guest: beside a busy second controller, one lost completions
# under TCG with interrupt remapping (commit cdf743e). No mount and no dm on the namespace: those
# the host-use walk already sees; the O_EXCL open is what only the claim probe finds.
printf vmtest-none >"$(pci_dev $NVME)/driver_override"
modprobe nvme
expect_eq mpath-other-nvme-idle "" "$(driver_of $NVME)"
mp=$(for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor"):$(cat "$d/device")" = "0x8086:0x5845" ] && basename "$d"; done | head -n1)
subsys=/sys/devices/virtual/nvme-subsystem
head_of_subsys() { ls $subsys/*/ 2>/dev/null | grep -m1 '^nvme[0-9]*n1$'; }
wait_for 20 head_of_subsys
ns=$(head_of_subsys)
note "multipath controller '$mp' on '$(driver_of "$mp")', namespace '$ns' at $(readlink -f "/sys/class/block/$ns")"
in_subsystem() {
    [ -n "$mp" ] && [ -n "$ns" ] && [ -b "/dev/$ns" ] &&
        case $(readlink -f "/sys/class/block/$ns") in $subsys/*) true ;; *) false ;; esac
}
check mpath-namespace-in-subsystem in_subsystem

rm -f /run/claim.ready
vfiod-exclusive-holder "/dev/$ns" /run/claim.ready &
holder=$!
wait_for 20 test -e /run/claim.ready
cat >>/etc/vfiod/vfiod.toml <<'TOML'

[[device]]
selector = "8086:5845"
resource_name = "vmtest/mpath"
TOML
mg=$(group_of "$mp")
json=$(vfioctl apply --json 2>&1); rc=$?
note "apply while $ns is held: rc=$rc $json"
# The plan would bind that group, and it did not end bound.
expect_eq mpath-claimed-exit-1 1 $rc
check mpath-claimed-refused json_has "$(plan_group "$json" "$mg")" \
    "\"state\":\"refused\",\"reason\":\"in-use-storage\",\"blockers\":\\[\"$mp\"\\],\"message\":\"$mp: $ns is claimed by the kernel ("
expect_eq mpath-claimed-kept nvme "$(driver_of "$mp")"

kill $holder
wait $holder 2>/dev/null
json=$(vfioctl apply --json 2>&1)
note "apply after the holder exited: rc=$? $json"
seg=$(plan_group "$json" "$mg")
unclaimed_binds() {
    json_has "$seg" '"state":"bound","reason":null' && ! json_has "$seg" in-use-storage &&
        [ "$(driver_of "$mp")" = vfio-pci ]
}
check mpath-unclaimed-binds unclaimed_binds
