#!/bin/bash
# systemd's watchdog: vfiod (a test build whose loop can be wedged by SIGUSR1) runs with
# NOTIFY_SOCKET pointing at a stand-in for systemd's socket and WATCHDOG_USEC/WATCHDOG_PID set.
# The pings must come at most half an interval apart while the loop turns (the median gap, and no
# gap of a whole interval), stop when the loop is wedged, and never come from a process
# WATCHDOG_PID does not name.
# Usage: watchdog_test.sh VFIOD_TEST_HOOKS MKFIXTURE POLICY_CONF LISTENER
set -u

VFIOD=$1 MKFIXTURE=$2 POLICY=$3 LISTEN=$4
for tool in dbus-daemon busctl python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (vfiod owns org.vfiod1 on the private bus)"; exit 77; }

source "$(dirname "$0")/lib.sh"
it_setup vfiod-watchdog
start_private_bus "$POLICY"
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }

start_notify_listener "$LISTEN"
mark() {  # a line in the listener's log, on its clock
    "$PY" -c 'import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(sys.argv[2].encode(), sys.argv[1])' "$NOTIFY" "MARK $1"
}
# The gaps between WATCHDOG=1 lines after MARK $1 (and before MARK $2, if given), in ms.
gaps() {
    awk -v from="MARK $1" -v to="${2:+MARK $2}" '
        $0 ~ from { on = 1; next }
        to != "" && $0 ~ to { on = 0 }
        on && $2 == "WATCHDOG=1" { if (last) print int(($1 - last) * 1000); last = $1 }' "$WORK/notify.log"
}
pings_after() { awk -v from="MARK $1" '$0 ~ from { on = 1; next } on && $2 == "WATCHDOG=1"' "$WORK/notify.log" | wc -l; }

# 2 s: at 2/5 of it vfiod pings every 800 ms, and a loaded machine's scheduling delays are small
# beside that.
USEC=2000000
# WATCHDOG_PID must be vfiod's own pid: the shell that execs it names itself.
start_vfiod() {  # start_vfiod WATCHDOG_PID_OR_SELF
    NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=$USEC WATCHDOG_OWNER=$1 \
        sh -c 'if [ "$WATCHDOG_OWNER" = self ]; then WATCHDOG_PID=$$; else WATCHDOG_PID=$WATCHDOG_OWNER; fi
               export WATCHDOG_PID; unset WATCHDOG_OWNER; exec "$@"' vfiod \
        "$VFIOD" --root "$WORK/root" --observe >>"$WORK/vfiod.log" 2>&1 &
    VFIOD_PID=$!
    for _ in $(seq 100); do grep -q "READY=1" "$WORK/notify.log" 2>/dev/null && break; sleep 0.1; done
}

mark start
start_vfiod self
check "vfiod said READY=1" 1 "$(grep -c 'READY=1' "$WORK/notify.log")"
sleep 1
mark healthy
# Work on the loop meanwhile: the pings must keep their pace.
for _ in $(seq 40); do
    busctl --system call org.vfiod1 /org/vfiod1 org.vfiod1.Manager Plan >/dev/null
    sleep 0.1
done
mark wedge
n=$(gaps healthy wedge | wc -l)
median=$(gaps healthy wedge | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
max=$(gaps healthy wedge | sort -n | tail -1)
echo "# WATCHDOG_USEC=$USEC: $((n + 1)) pings in ~4 s, median gap ${median:-none} ms, largest ${max:-none} ms"
[ "$n" -ge 3 ] && pass "pings keep coming while the loop turns ($((n + 1)))" \
    || fail "pings keep coming while the loop turns" "$((n + 1)) pings"
# vfiod's schedule is a ping every 2/5 of the interval: the median gap shows it keeps to at most
# half. One gap may stretch when a loaded CI machine does not run vfiod or the listener for a
# while; only a gap of the whole interval is a miss (systemd would kill the service).
[ -n "$median" ] && [ "$median" -le $((USEC / 2000)) ] \
    && pass "pings at most half the interval apart (median ${median} ms)" \
    || fail "pings at most half the interval apart" "median ${median:-none} ms"
[ -n "$max" ] && [ "$max" -lt $((USEC / 1000)) ] \
    && pass "no gap of a whole interval (largest ${max} ms)" \
    || fail "no gap of a whole interval" "${max:-none} ms"

kill -USR1 "$VFIOD_PID"
sleep 0.2
mark wedged
out=$(busctl --system --timeout=1 call org.vfiod1 /org/vfiod1 org.vfiod1.Manager Plan 2>&1 | head -c 200)
case $out in *"timed out"*|*"Timeout"*|*"Connection timed out"*) pass "the wedged loop no longer answers" ;;
    *) fail "the wedged loop no longer answers" "$out" ;; esac
sleep 3
check "no ping once the loop is wedged" 0 "$(pings_after wedged)"
kill -KILL "$VFIOD_PID"; wait "$VFIOD_PID" 2>/dev/null

# WATCHDOG_PID naming another process: the watchdog is not ours, no pings.
mark other
start_vfiod 1
sleep 3
check "READY=1 from the second run" 2 "$(grep -c 'READY=1' "$WORK/notify.log")"
check "no ping when WATCHDOG_PID names another process" 0 "$(pings_after other)"

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
