#!/bin/bash
# An idle vfiod does nothing but ping the watchdog (issue 14): the installed binary, on a fixture
# tree and a private bus, is left alone for 10 s twice, once without a watchdog and once with
# WATCHDOG_USEC. Its threads' voluntary context switches (each one a sleep the kernel woke it
# from) must be none, then no more than the pings it sent in the window. A timer, a poll with a
# timeout or a busy fd in the loop would show here.
# Usage: idle_test.sh VFIOD MKFIXTURE POLICY_CONF LISTENER
set -u

VFIOD=$1 MKFIXTURE=$2 POLICY=$3 LISTEN=$4
for tool in dbus-daemon python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (vfiod owns org.vfiod1 on the private bus)"; exit 77; }

source "$(dirname "$0")/lib.sh"
it_setup vfiod-idle
start_private_bus "$POLICY"
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }

start_notify_listener "$LISTEN"

# Voluntary context switches, summed over every thread of $VFIOD_PID.
switches() { cat /proc/"$VFIOD_PID"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ { v += $2 } END { print v + 0 }'; }
cpu_ticks() { awk '{ print $14 + $15 }' /proc/"$VFIOD_PID"/stat; }
pings() { grep -c 'WATCHDOG=1' "$WORK/notify.log"; }

# idle NAME [WATCHDOG_USEC]: start vfiod, wait for READY=1 and a second more, watch 10 s.
idle() {
    local name=$1 usec=${2:-}
    : > "$WORK/notify.log"
    if [ -n "$usec" ]; then
        NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=$usec sh -c 'WATCHDOG_PID=$$ exec "$@"' vfiod \
            "$VFIOD" --root "$WORK/root" --observe >>"$WORK/vfiod.log" 2>&1 &
    else
        NOTIFY_SOCKET=$NOTIFY "$VFIOD" --root "$WORK/root" --observe >>"$WORK/vfiod.log" 2>&1 &
    fi
    VFIOD_PID=$!
    for _ in $(seq 100); do grep -q "READY=1" "$WORK/notify.log" 2>/dev/null && break; sleep 0.1; done
    check "$name: READY=1" 1 "$(grep -c 'READY=1' "$WORK/notify.log")"
    sleep 1
    local s0 c0 p0 s1 c1 p1
    s0=$(switches) c0=$(cpu_ticks) p0=$(pings)
    sleep 10
    s1=$(switches) c1=$(cpu_ticks) p1=$(pings)
    WAKEUPS=$((s1 - s0)) PINGS=$((p1 - p0))
    echo "# $name: 10 s idle: $WAKEUPS wakeups, $PINGS watchdog pings, $((c1 - c0)) CPU ticks," \
         "$(ls /proc/"$VFIOD_PID"/task | wc -l) thread(s)"
    kill "$VFIOD_PID"; wait "$VFIOD_PID" 2>/dev/null
    VFIOD_PID=
}

idle "no watchdog"
check "no watchdog: no wakeup in 10 s" 0 "$WAKEUPS"

# 6 s: a ping every 2.4 s, four or five in the window.
idle "watchdog" 6000000
[ "$PINGS" -ge 3 ] && pass "watchdog: pings sent ($PINGS)" || fail "watchdog: pings sent" "$PINGS"
# A wakeup per ping; one more when a ping falls on the window's edge.
[ "$WAKEUPS" -le $((PINGS + 1)) ] && pass "watchdog: no wakeup but the pings ($WAKEUPS for $PINGS)" \
    || fail "watchdog: no wakeup but the pings" "$WAKEUPS wakeups for $PINGS pings"

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
