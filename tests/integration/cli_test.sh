#!/bin/bash
# vfioctl's offline verbs as an operator or a script uses them: output, --json validity and the
# exit-code contract (0 ok, 1 failed/not ready, 2 bad arguments or config), on the gpu-host tree.
# Usage: cli_test.sh VFIOCTL MKFIXTURE
set -u
VFIOCTL=$1 MKFIXTURE=$2
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }

source "$(dirname "$0")/lib.sh"
it_setup vfiod-cli
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }
ROOT=$WORK/root

# run NAME EXPECTED_RC ARGS...: runs vfioctl, keeps stdout/stderr in $out/$err.
run() {
    local name=$1 want=$2; shift 2
    "$VFIOCTL" "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    out=$(cat "$WORK/out") err=$(cat "$WORK/err")
    check "$name: exit $want" "$want" "$rc"
}
json() { python3 -c "import json,sys; d=json.load(open('$WORK/out')); $1"; }

run "plan" 0 plan --root "$ROOT"
check_contains "plan shows the GPU group bound whole" "group 13: bind" "$out"
check_contains "plan names the mounted root disk" "nvme0n1p2 (259:2) is mounted on /" "$out"
check_contains "plan says in one line what a tree cannot show" \
    "addresses, other network namespaces and exclusive claims are live-host only and were not checked" "$out"

run "plan --json" 0 plan --root "$ROOT" --json
check "plan --json decisions" "13 bind None|14 refuse in-use-storage|15 bind None|16 refuse in-use-network" \
    "$(json 'print("|".join(str(g["group"]) + " " + g["action"] + " " + str(g["reason"]) for g in d["groups"]))')"
check "plan --json writes exactly the bindable groups' functions" "0000:01:00.0 0000:01:00.1 0000:03:00.0" \
    "$(json 'print(" ".join(sorted({w["value"] for g in d["groups"] for w in g["writes"] if w["path"].endswith("drivers_probe")})))')"
check "plan --json keys" "action blockers devices group reason writes" \
    "$(json 'print(" ".join(sorted(d["groups"][0])))')"
check "plan --json without [[sriov]] entries has no pfs" "groups iommu" \
    "$(json 'print(" ".join(sorted(d)))')"

# SR-IOV (DESIGN §11) on issue 24's host: the PF is planned for its VF count and never bound.
"$MKFIXTURE" sriov-host "$WORK/sriov" || { fail "sriov fixture"; exit 1; }
mkdir -p "$WORK/sriov/etc/vfiod"
printf '[[device]]\nselector = "1b36:0010"\n\n[[sriov]]\nselector = "1b36:0010"\nnum_vfs = 2\n' \
    >"$WORK/sriov/etc/vfiod/vfiod.toml"
run "plan --json with [[sriov]]" 0 plan --root "$WORK/sriov" --json
check "plan --json pfs" "0000:02:00.0 2 0 2 create None" \
    "$(json 'print(" ".join(str(p[k]) for p in d["pfs"] for k in ("address", "total_vfs", "num_vfs", "wanted_vfs", "action", "reason")))')"
check "plan --json pfs writes, autoprobe off around the creation" \
    "sys/bus/pci/devices/0000:02:00.0/sriov_drivers_autoprobe=0 sys/bus/pci/devices/0000:02:00.0/sriov_numvfs=2 sys/bus/pci/devices/0000:02:00.0/sriov_drivers_autoprobe=1" \
    "$(json 'print(" ".join(w["path"] + "=" + w["value"] for w in d["pfs"][0]["writes"]))')"
check "plan --json pf keys" "action address blockers num_vfs reason total_vfs wanted_vfs writes" \
    "$(json 'print(" ".join(sorted(d["pfs"][0])))')"
check "plan --json never binds the PF" "7 refuse sriov-pf" \
    "$(json 'print(" ".join(str(g["group"]) + " " + g["action"] + " " + str(g["reason"]) for g in d["groups"]))')"
run "plan with [[sriov]]" 0 plan --root "$WORK/sriov"
check_contains "plan text shows the PF" "pf 0000:02:00.0: create" "$out"
check_contains "plan text shows the PF's write" "sys/bus/pci/devices/0000:02:00.0/sriov_numvfs             <- 2" "$out"
run "status --offline --json with [[sriov]]" 0 status --offline --root "$WORK/sriov" --json
check "status --offline --json pfs: the plan's counts, the state vfiod would publish" \
    "0000:02:00.0 2 0 2 pending None" \
    "$(json 'print(" ".join(str(p[k]) for p in d["pfs"] for k in ("address", "total_vfs", "num_vfs", "wanted_vfs", "state", "reason")))')"
check "status --offline --json pf keys: a state, no writes" \
    "address blockers num_vfs reason state total_vfs wanted_vfs" \
    "$(json 'print(" ".join(sorted(d["pfs"][0])))')"
run "status --offline with [[sriov]]" 0 status --offline --root "$WORK/sriov"
check_contains "status text shows the PF's state" "pf 0000:02:00.0: pending" "$out"
check_contains "status text shows wanted and actual counts" "VFs: 0 now, 2 wanted, 2 at most" "$out"
sed -i 's/num_vfs = 2/num_vfs = 3/' "$WORK/sriov/etc/vfiod/vfiod.toml"
run "plan --json above the total" 0 plan --root "$WORK/sriov" --json
check "plan --json refuses above the total" "refuse vfs-exceed-total 0" \
    "$(json 'p = d["pfs"][0]; print(p["action"], p["reason"], len(p["writes"]))')"
run "doctor above the total" 1 doctor --root "$WORK/sriov"
check_contains "doctor says how far to lower num_vfs" \
    "fix: lower num_vfs in the [[sriov]] entry to at most 2" "$out"
run "doctor --json above the total" 1 doctor --root "$WORK/sriov" --json
check "doctor --json pfs" "0000:02:00.0 refuse vfs-exceed-total True" \
    "$(json 'p = d["pfs"][0]; print(p["address"], p["action"], p["reason"], "at most 2" in p["fix"])')"
run "check-config with [[sriov]]" 0 check-config "$WORK/sriov/etc/vfiod/vfiod.toml"
check_contains "check-config counts sriov entries" "1 sriov entry" "$out"

# Issue 37, finding 8: an SR-IOV-only host whose PF has its VFs is healthy, and an empty
# allowlist names the file actually read (--config), not the default path.
"$MKFIXTURE" sriov-routed-vf "$WORK/sriov-only" || { fail "sriov-routed-vf fixture"; exit 1; }
printf '[[sriov]]\naddress = "0000:02:00.0"\nnum_vfs = 2\n' >"$WORK/sriov-only.toml"
run "doctor on an SR-IOV-only host with its VFs" 0 doctor --root "$WORK/sriov-only" --config "$WORK/sriov-only.toml"
check_contains "doctor counts the [[sriov]] entry as the allowlist" "[ok]   allowlist  1 [[sriov]] entry" "$out"
printf '[daemon]\nmode = "enforce"\n' >"$WORK/empty.toml"
run "doctor with an empty allowlist" 1 doctor --root "$WORK/sriov-only" --config "$WORK/empty.toml"
check_contains "doctor names the --config file" \
    "add [[device]], [[sriov]] or [[mdev]] entries to $WORK/empty.toml" "$out"

# [[mdev]] entries whose parents this host lacks: each (parent, type) pair is a finding with its
# fix, and only then does the JSON have "mdevs".
printf '[[mdev]]\nparent = "mbochs"\ntype = "mbochs-small"\ncount = 2\n' >"$WORK/mdev.toml"
run "doctor with an absent mdev parent" 1 doctor --root "$WORK/sriov-only" \
    --config "$WORK/mdev.toml"
check_contains "doctor counts the pair's mdevs" "mdevs: 2 wanted, 0 ready, 0 to create" "$out"
check_contains "doctor says how to make the parent appear" "modprobe mbochs" "$out"
check_contains "doctor notes KubeVirt's own mdev handling" \
    "note: KubeVirt's own mediated-device handling removes" "$out"
run "doctor --json with an absent mdev parent" 1 doctor --root "$WORK/sriov-only" \
    --config "$WORK/mdev.toml" --json
check "doctor --json mdevs" "mbochs mbochs-small 2 0 0 no-parent True" \
    "$(json 'm = d["mdevs"][0]; k = ("parent", "type", "wanted", "ready", "to_create", "reason")
print(*[m[x] for x in k], "mdev_note" in d)')"
run "doctor --json without [[mdev]] entries" 0 doctor --root "$WORK/sriov-only" \
    --config "$WORK/sriov-only.toml" --json
check "doctor --json has no mdevs key then" "False False" \
    "$(json 'print("mdevs" in d, "mdev_note" in d)')"

printf '[[device]]\nselector = "10de:2331"\nresource_nmae = "x.com/y"\n' >"$WORK/typo.toml"
run "plan with a bad config" 2 plan --root "$ROOT" --config "$WORK/typo.toml"
check "plan with a bad config prints no plan" "" "$out"
check_contains "the error names file, line and column" "typo.toml:3:1: unknown key" "$err"

# The tree's own conf.d is read through the host access layer: a FIFO there is an error naming
# it, at once (a plain open would wait for a writer).
cp -a "$ROOT" "$WORK/fifo-root" && mkdir -p "$WORK/fifo-root/etc/vfiod/conf.d" &&
    mkfifo "$WORK/fifo-root/etc/vfiod/conf.d/zz.toml"
timeout 20 "$VFIOCTL" plan --root "$WORK/fifo-root" >"$WORK/out" 2>"$WORK/err"
check "plan with a FIFO in the tree's conf.d: exit 2, no wait" 2 "$?"
check_contains "the error names the FIFO" "$WORK/fifo-root/etc/vfiod/conf.d/zz.toml: cannot read: not a regular file" "$(cat "$WORK/err")"

run "check-config bad" 2 check-config "$WORK/typo.toml"
run "check-config --json bad" 2 check-config --json "$WORK/typo.toml"
check "check-config --json says invalid" "False 1" "$(json 'print(d["valid"], len(d["errors"]))')"
run "check-config good" 0 check-config "$ROOT/etc/vfiod/vfiod.toml"
check_contains "check-config summarises" "3 device entries" "$out"

run "doctor" 1 doctor --root "$ROOT"
check_contains "doctor says what KubeVirt counts" "nvidia.com/GH100_H100_PCIE               0 now, 1 once" "$out"
check_contains "doctor gives a fix for the routed NIC" "fix: the host uses a network interface" "$out"
check_contains "doctor says in one line what a tree cannot show" \
    "addresses, other network namespaces and exclusive claims are live-host only and were not checked" "$out"
run "doctor --json" 1 doctor --root "$ROOT" --json
check "doctor --json" "False 4" "$(json 'print(d["healthy"], len(d["devices"]))')"

run "status --offline" 0 status --offline --root "$ROOT"
check_contains "status --offline says in one line what a tree cannot show" \
    "addresses, other network namespaces and exclusive claims are live-host only and were not checked" "$out"
run "status --offline --json" 0 status --offline --root "$ROOT" --json
check "status --offline states" "pending refused pending refused" \
    "$(json 'print(" ".join(g["state"] for g in d["groups"]))')"
check "status --offline --json without [[sriov]] entries has no pfs" "groups iommu" \
    "$(json 'print(" ".join(sorted(d)))')"
run "doctor --json without [[sriov]] entries" 1 doctor --root "$ROOT" --json
check "doctor --json without [[sriov]] entries has no pfs" "checks devices healthy" \
    "$(json 'print(" ".join(sorted(d)))')"

run "no command" 2
run "unknown command" 2 frobnicate
run "unknown option" 2 plan --frobnicate
run "missing operand" 2 check-config
run "extra operand" 2 plan extra
run "option that does not apply" 2 bind 0000:01:00.0 --root "$ROOT"
run "missing root" 2 plan --root "$WORK/nonexistent"
run "traversal address" 2 bind ../../../etc
check_contains "the address error explains the form" "expected DDDD:BB:SS.F" "$err"
run "--help" 0 --help
for verb in plan apply doctor check-config status bind release; do
    check_contains "--help documents $verb" "  $verb" "$out"
done
run "verb --help" 0 plan --help
check_contains "verb --help shows its usage" "Usage: vfioctl plan" "$out"

# --- initramfs (DESIGN §14): what the hooks write, the record, and plan/doctor on it ---
IR=$WORK/initramfs-root
"$MKFIXTURE" gpu-host "$IR" || fail "fixture for initramfs"
# The H100's and the NVMe model's entries made early.
sed -i -e 's|^resource_name = "nvidia.com/GH100_H100_PCIE"|&\nearly = true|' \
    -e 's|^resource_name = "samsung.com/PM9A1"|&\nearly = true|' "$IR/etc/vfiod/vfiod.toml"
run "initramfs dry run" 0 initramfs --root "$IR"
check_contains "the dry run carries the GPU's group whole" \
    "carries 0000:01:00.1 10de:22a3 -> vfio-pci" "$out"
check_contains "the mounted boot NVMe is left out, named" "left out 0000:02:00.0" "$err"
check_contains "... because its root is mounted" "is mounted on /" "$err"
check "the dry run records nothing" "" "$(ls "$IR/var/lib/vfiod" 2>/dev/null)"
mkdir -p "$WORK/image/etc/vfiod"
run "initramfs --output" 0 initramfs --root "$IR" --kernel 6.1.0-27-amd64 \
    --output "$WORK/image/etc/vfiod/early"
check "the list: a comment, then ADDRESS VENDOR DEVICE DRIVER" \
    "0000:01:00.0 10de 2331 vfio-pci|0000:01:00.1 10de 22a3 vfio-pci" \
    "$(grep -v '^#' "$WORK/image/etc/vfiod/early" | paste -sd'|')"
check "the record: kernel, carried, left out" \
    "6.1.0-27-amd64 0000:01:00.0,0000:01:00.1 0000:02:00.0" \
    "$(python3 -c "import json; d=json.load(open('$IR/var/lib/vfiod/initramfs-6.1.0-27-amd64.json'))
print(d['kernel'], ','.join(c['address'] for c in d['carried']),
      ','.join(str(l['address']) for l in d['left_out'] if l['address']))")"
run "doctor with a current record" 1 doctor --root "$IR"  # the NVMe, bonded I210: not ready
check_contains "doctor's initramfs check passes" "[ok]   initramfs  initramfs 6.1.0-27-amd64" \
    "$out"
sed -i 's/^early = true$/early = false/' "$IR/etc/vfiod/vfiod.toml"
run "plan after the config changed" 0 plan --root "$IR"
check_contains "plan says the record is out of date and what to run" \
    "it would now carry none: run update-initramfs -u -k 6.1.0-27-amd64" "$out"
run "doctor after the config changed" 1 doctor --root "$IR"
check_contains "doctor's initramfs check fails" "[FAIL] initramfs" "$out"
sed -i 's/^early = false$/early = true/' "$IR/etc/vfiod/vfiod.toml"
run "initramfs --image" 0 initramfs --root "$IR" --image --json
check "--image: entries without an address carry nothing" "False 0 2" \
    "$(json 'print(d["host_checked"], len(d["carried"]), len(d["left_out"]))')"
run "initramfs: a bad --kernel" 2 initramfs --root "$IR" --kernel ../x --output "$WORK/x"
check "... writes nothing" "" "$(ls "$WORK/x" 2>/dev/null)"
run "initramfs: an output directory that is missing" 1 initramfs --root "$IR" \
    --output "$WORK/missing/early"
check_contains "... names the file" "cannot write $WORK/missing/early" "$err"
echo '[[device]] selector = ' >"$WORK/bad.toml"
run "initramfs: a bad config" 2 initramfs --config "$WORK/bad.toml" --output "$WORK/image/x"
check "... writes no list" "" "$(ls "$WORK/image/x" 2>/dev/null)"

exit $((failures > 0))
