#!/bin/bash
# The VM harness must fail a test on a failed check, a check that never reported, and a guest that
# hangs, and keep the console log when it does; a scenario whose "# needs:" are not met skips,
# except under CI=true. Runs run.py on scenarios made to fail.
# usage: selftest.sh CACHE_DIR WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=$1 work=$2
failures=0 total=0
expect() { # NAME OUTPUT PATTERN
    total=$((total + 1))
    if grep -qF -- "$3" <<<"$2"; then echo "ok $1"; else echo "not ok $1: no '$3'"; failures=$((failures + 1)); fi
}

out=$("$here/../run.py" --mode busybox --scenario "$here/broken.sh" --cache "$cache" \
    --work "$work/broken" --timeout 120 2>&1)
rc=$?
expect broken-exit-1 "rc=$rc" "rc=1"
expect broken-passed-line "$out" "ok reports-ok"
expect broken-failed-line "$out" "not ok reports-not-ok deliberate failure"
expect broken-missing-line "$out" "not ok never-reports # never reported"
expect broken-summary "$out" "1 passed, 2 failed"
expect broken-log-kept "$(ls "$work/broken")" "console.log"

out=$("$here/../run.py" --mode busybox --scenario "$here/hangs.sh" --cache "$cache" \
    --work "$work/hangs" --timeout 25 2>&1)
rc=$?
expect hangs-exit-1 "rc=$rc" "rc=1"
expect hangs-timed-out "$out" "guest timed out after 25"
expect hangs-ok-still-shown "$out" "ok reports-ok"

# Two scenarios in one boot: each check is named SCENARIO/CHECK, the second runs although the
# first failed, and a check either never reported fails the test under its full name.
out=$("$here/../run.py" --mode busybox --scenario "$here/broken.sh" --scenario "$here/second.sh" \
    --cache "$cache" --work "$work/shared" --timeout 120 2>&1)
rc=$?
expect shared-exit-1 "rc=$rc" "rc=1"
expect shared-first-ok "$out" "ok broken/reports-ok"
expect shared-first-failed "$out" "not ok broken/reports-not-ok deliberate failure"
expect shared-second-ran "$out" "ok second/reports-ok"
expect shared-missing-named "$out" "not ok second/also-never-reports # never reported"
expect shared-summary "$out" "2 passed, 3 failed"
# Scenarios whose guests differ are refused before anything boots.
out=$("$here/../run.py" --mode busybox --scenario "$here/broken.sh" \
    --scenario "$here/other-topology.sh" --cache "$cache" --work "$work/mixed" 2>&1)
rc=$?
expect mixed-exit-1 "rc=$rc" "rc=1"
expect mixed-names-key "$out" "'# topology: e1000e-mgmt' differs"

# Without the sample mdev parents a scenario that needs them skips (77), alone or beside others
# that then run without it; under CI=true it fails the test instead.
out=$(VFIOD_MDEV_SAMPLES=off CI= "$here/../run.py" --mode busybox --scenario "$here/needs-mdev.sh" \
    --cache "$cache" --work "$work/needs" --timeout 120 2>&1)
rc=$?
expect needs-skips "rc=$rc" "rc=77"
expect needs-says-why "$out" "SKIP: needs-mdev needs mdev-samples: mdev-samples: turned off"
out=$(VFIOD_MDEV_SAMPLES=off CI= "$here/../run.py" --mode busybox --scenario "$here/second.sh" \
    --scenario "$here/needs-mdev.sh" --cache "$cache" --work "$work/needs-shared" --timeout 120 2>&1)
expect needs-shared-skip-named "$out" "# SKIP needs-mdev needs mdev-samples"
expect needs-shared-rest-ran "$out" "ok reports-ok"
out=$(VFIOD_MDEV_SAMPLES=off CI=true "$here/../run.py" --mode busybox \
    --scenario "$here/needs-mdev.sh" --cache "$cache" --work "$work/needs-ci" --timeout 120 2>&1)
rc=$?
expect needs-ci-fails "rc=$rc" "rc=1"
expect needs-ci-says-why "$out" "(CI=true: no scenario may skip)"
# The cache as the other tests want it again (the samples back in the kernel's module tree).
"$here/../prepare.sh" "$cache" >/dev/null 2>&1

echo "$((total - failures)) passed, $failures failed"
exit $((failures > 0))
