#!/bin/bash
# The D-Bus authorization matrix (issue "Bad input and faults"): every mutating method x {root,
# an unprivileged uid, a caller that leaves before the reply}; unknown methods and wrong
# signatures; odd strings on every string argument; invalid UTF-8, which the bus must reject
# before vfiod sees it. After each group of calls vfiod must still be up and answering.
# Usage: authz_test.sh VFIOD MKFIXTURE POLICY_CONF CLIENT
# Exit 0 when every check passed, 1 otherwise, 77 (skip) without root or the tools.
set -u

VFIOD=$1 MKFIXTURE=$2 POLICY=$3 CLIENT=$4
for tool in dbus-daemon setpriv python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
# Both sides of the matrix need a root caller and a uid switch.
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (root and uid 65534 callers)"; exit 77; }

source "$(dirname "$0")/lib.sh"
it_setup vfiod-authz

# --- a private system bus with the shipped policy, and vfiod (observe mode) on a fixture ---
start_private_bus "$POLICY"

"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }
CONFIG=$WORK/vfiod.toml
cp "$WORK/root/etc/vfiod/vfiod.toml" "$CONFIG"
"$VFIOD" --root "$WORK/root" --config "$CONFIG" --observe >"$WORK/vfiod.log" 2>&1 &
VFIOD_PID=$!

# uid 65534 needs an interpreter it may run (not one under root's home, as pyenv installs).
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
ROOT=("$PY" "$CLIENT" "$WORK/bus")
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups "$PY" "$CLIENT" "$WORK/bus")
# manager MODE METHOD SIG ARGS... as root; nobody_manager the same as uid 65534. Print the
# error name ("ok" on success); the message goes to $WORK/last.
manager() {
    local mode=$1 method=$2; shift 2
    "${ROOT[@]}" "$mode" /org/vfiod1 "org.vfiod1.Manager.$method" "$@" >"$WORK/last" 2>&1
    cut -f1 "$WORK/last"
}
nobody_manager() {
    local mode=$1 method=$2; shift 2
    "${NOBODY[@]}" "$mode" /org/vfiod1 "org.vfiod1.Manager.$method" "$@" >"$WORK/last" 2>&1
    cut -f1 "$WORK/last"
}
alive() {
    if kill -0 "$VFIOD_PID" 2>/dev/null && [ "$(manager call Plan "")" = ok ]; then
        pass "vfiod alive and answering after $1"
    else
        fail "vfiod alive and answering after $1"
    fi
}
for _ in $(seq 100); do [ "$(manager call Plan "" 2>/dev/null)" = ok ] && break; sleep 0.1; done
check "vfiod is up" ok "$(manager call Plan "")"
# How often Plan() mentions $1 (Properties.Get returns a variant, which the client does not
# decode, so states are read from the plan).
plan_has() { "${ROOT[@]}" call /org/vfiod1 org.vfiod1.Manager.Plan "" | grep -o -- "$1" | wc -l; }

DENIED=org.freedesktop.DBus.Error.AccessDenied
INVALID=org.freedesktop.DBus.Error.InvalidArgs
GPU=0000:01:00.0

# --- the matrix: Bind, Release, Reload x root, uid 65534, callers that leave early ---
# In observe mode an authorized Bind/Release reaches the service and is answered Failed (it writes
# nothing); Reload succeeds.
check "root Bind is authorized" org.vfiod1.Error.Failed "$(manager call Bind s $GPU)"
check "root Release is authorized" org.vfiod1.Error.Failed "$(manager call Release s $GPU)"
check "root Reload succeeds" ok "$(manager call Reload "")"
check "uid 65534 Bind is AccessDenied" $DENIED "$(nobody_manager call Bind s $GPU)"
check "uid 65534 Release is AccessDenied" $DENIED "$(nobody_manager call Release s $GPU)"
check "uid 65534 Reload is AccessDenied" $DENIED "$(nobody_manager call Reload "")"

# A config change only a successful Reload can apply: protecting the spare NIC refuses group 15.
cat >>"$CONFIG" <<'TOML'

[[protect]]
address = "0000:03:00.0"
TOML
check "before any Reload group 15 is not protected" 0 "$(plan_has '"reason": "protected"')"
for mode in disconnect noreply; do
    nobody_manager $mode Bind s $GPU >/dev/null
    nobody_manager $mode Release s $GPU >/dev/null
    nobody_manager $mode Reload "" >/dev/null
done
sleep 1
alive "uid 65534 callers that left before the reply"
check "uid 65534 early-leaving Reloads applied nothing" 0 "$(plan_has '"reason": "protected"')"
for mode in disconnect noreply; do
    manager $mode Bind s $GPU >/dev/null
    manager $mode Release s $GPU >/dev/null
    manager $mode Reload "" >/dev/null
done
sleep 1
alive "root callers that left before the reply"
check "root Reload applies the new config" ok "$(manager call Reload "")"
check "after root's Reload group 15 is protected" 1 "$(plan_has '"reason": "protected"')"

# --- unknown methods, interfaces, objects and wrong signatures: errors, for everyone ---
for who in manager nobody_manager; do
    check "$who: unknown method" org.freedesktop.DBus.Error.UnknownMethod "$($who call Frobnicate "")"
    check "$who: Bind without its argument" $INVALID "$($who call Bind "")"
    check "$who: Bind with a uint32" $INVALID "$($who call Bind u 5)"
    check "$who: Bind with two strings" $INVALID "$($who call Bind ss $GPU $GPU)"
    check "$who: Release with a uint32" $INVALID "$($who call Release u 0)"
    check "$who: Reload with an argument" $INVALID "$($who call Reload s x)"
    check "$who: Plan with an argument" $INVALID "$($who call Plan s x)"
done
out=$("${NOBODY[@]}" call /org/vfiod1 org.vfiod1.Nope.Bind s $GPU | cut -f1)
check "unknown interface" org.freedesktop.DBus.Error.UnknownMethod "$out"
out=$("${NOBODY[@]}" call /org/vfiod1/nope org.vfiod1.Manager.Bind s $GPU | cut -f1)
check "unknown object" org.freedesktop.DBus.Error.UnknownObject "$out"
alive "unknown methods and wrong signatures"

# --- odd strings on every string argument: clean errors, bounded, no forged log lines ---
big=$(head -c 65536 /dev/zero | tr '\0' a)
odd=("" "$big" "${big:0:65524}$GPU" $'0000:01:00.0\n' $'0000:01:00.0\nvfiod: FORGED line'
     $'\t0000:01:00.0' $'0000:01:00.0\x7f' $'\x1b[31m0000:01:00.0' $'0000:01:00.0\r'
     "０000:01:00.0" "0000:01:00.0​" "0000:01:00.0‮" "0000:01:00.😀" "0000:01:00.0́"
     "../../../../sys/bus/pci/drivers_probe" "0000:01:00.0/../../x")
n=0
for s in "${odd[@]}"; do
    n=$((n + 1))
    for method in Bind Release; do
        check "root $method odd string #$n is InvalidArgs" $INVALID "$(manager call $method s "$s")"
        len=$(wc -c <"$WORK/last")
        [ "$len" -lt 1024 ] && pass "root $method odd string #$n: reply is short ($len bytes)" \
            || fail "root $method odd string #$n: reply is short" "$len bytes"
        check "uid 65534 $method odd string #$n is AccessDenied" $DENIED \
            "$(nobody_manager call $method s "$s")"
    done
    # Property reads take strings too: an unknown interface or property is an error, not a crash.
    out=$("${NOBODY[@]}" call /org/vfiod1 org.freedesktop.DBus.Properties.Get ss "$s" "$s" | cut -f1)
    case $out in org.freedesktop.DBus.Error.*) pass "Properties.Get odd string #$n is an error" ;;
        *) fail "Properties.Get odd string #$n is an error" "$out" ;; esac
done
if grep -q '^vfiod: FORGED' "$WORK/vfiod.log"; then fail "no forged log line"; else pass "no forged log line"; fi
alive "odd strings"

# --- invalid UTF-8 and NUL: the bus drops the sender; vfiod never sees the call ---
lines=$(wc -l <"$WORK/vfiod.log")
for s in $'0000:01:00.0\xff' $'\xc3\x28' $'\xc0\xaf' $'\xed\xa0\x80' $'\xf4\x90\x80\x80'; do
    check "root Bind with invalid UTF-8 $(printf %q "$s"): the bus disconnects" disconnected \
        "$(manager call Bind s "$s")"
    check "uid 65534 Bind with invalid UTF-8 $(printf %q "$s"): the bus disconnects" disconnected \
        "$(nobody_manager call Bind s "$s")"
done
check "Bind with a NUL byte: the bus disconnects" disconnected \
    "$(manager call Bind s hex:303030303a30313a30302e3000)"
check "vfiod logged nothing for calls the bus rejected" "$lines" "$(wc -l <"$WORK/vfiod.log")"
alive "invalid UTF-8"

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
