#!/bin/bash
# Issue 20: vfioctl apply --root keeps its journal inside that root, and reconciles only the
# journal entries the host still agrees with (the daemon's very check: Executor::reconcile).
# Finding 3: with DIR/run a symlink out of the tree, apply created vfiod/group-N where it led.
# Finding 2: an unfinished entry naming the mounted root disk made apply write to its unbind file.
# Usage: journal_test.sh VFIOCTL MKFIXTURE
set -u
VFIOCTL=$1 MKFIXTURE=$2

source "$(dirname "$0")/lib.sh"
it_setup vfiod-journal

R=$WORK/root
fresh() {
    rm -rf "$R"
    "$MKFIXTURE" gpu-host "$R" >/dev/null || { fail "fixture"; exit 1; }
}
NVME=sys/bus/pci/devices/0000:02:00.0

# --- finding 3: run -> a directory outside the tree ---
fresh
mkdir -p "$WORK/outside"
rmdir "$R/run" && ln -s "$WORK/outside" "$R/run"
"$VFIOCTL" apply --root "$R" >"$WORK/out" 2>&1
check "apply with run leading out of the tree: exit 1" 1 "$?"
check "nothing is written where run leads" "" "$(ls -A "$WORK/outside")"
check_contains "apply names the entry and why" \
    "journal run/vfiod/group-13: a symlink on the way leads out of the root $R" "$(cat "$WORK/out")"

# The same with .. past the root, one level down.
fresh
mkdir -p "$R/run" "$WORK/outside2"
ln -s "../../../../../../../../../..$WORK/outside2" "$R/run/vfiod"
"$VFIOCTL" apply --root "$R" >"$WORK/out" 2>&1
check "nothing is written where run/vfiod leads with .." "" "$(ls -A "$WORK/outside2")"

# A link that stays inside the tree is followed.
fresh
mkdir -p "$R/var/run" && rmdir "$R/run" && ln -s var/run "$R/run"
"$VFIOCTL" apply --root "$R" >"$WORK/out" 2>&1
if [ -f "$R/var/run/vfiod/group-13" ]; then pass "a run link inside the tree is followed"
else fail "a run link inside the tree is followed" "$(cat "$WORK/out")"; fi

# --- finding 2: an unfinished entry naming the mounted root disk ---
fresh
mkdir -p "$R/run/vfiod"
printf 'vfiod-journal 1\ngroup 13\nop bind\nphase started\nreleased 0\nfunction 0000:02:00.0 original= before= before_override= target=vfio-pci\n' \
    >"$R/run/vfiod/group-13"
"$VFIOCTL" apply --root "$R" --json >"$WORK/out" 2>&1
check "the root disk's driver was not unbound" "" "$(cat "$R/sys/bus/pci/drivers/nvme/unbind")"
check "the root disk's driver_override is untouched" "(null)" "$(cat "$R/$NVME/driver_override")"
check_contains "apply reports the entry as discarded, naming the disk and the rule" \
    "0000:02:00.0: not a member of IOMMU group 13 (its group is 14)" "$(cat "$WORK/out")"
# The text output says it too (a refused group's reasons come from its plan; an entry's here).
printf 'vfiod-journal 1\ngroup 999\nop bind\nphase started\nreleased 0\nfunction 0000:00:1f.6 original= before= before_override=snd_hda_intel target=vfio-pci\n' \
    >"$R/run/vfiod/group-999"
"$VFIOCTL" apply --root "$R" >"$WORK/out" 2>&1
check_contains "apply's text names the routed NIC and the rule" \
    "0000:00:1f.6: in-use-network" "$(cat "$WORK/out")"
check "the NIC's driver_override is untouched" "(null)" \
    "$(cat "$R/sys/bus/pci/devices/0000:00:1f.6/driver_override")"
if grep -q 0000:02:00.0 "$R/run/vfiod/group-13" 2>/dev/null; then
    fail "the discarded entry is gone" "$(cat "$R/run/vfiod/group-13")"
else pass "the discarded entry is gone"; fi

exit $((failures > 0))
