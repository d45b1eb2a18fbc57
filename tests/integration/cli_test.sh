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

exit $((failures > 0))
