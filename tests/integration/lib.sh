# Shared by the D-Bus integration tests: a work directory every uid can reach, TAP-style
# check helpers, cleanup of what the test started, and a private system bus that applies the
# system bus's default policy plus the policy file under test.
# Source it, then call it_setup PREFIX and start_private_bus POLICY [EXTRA_RULES] [SERVICEDIR].

# Every uid must reach the socket: the unprivileged checks connect as uid 65534.
it_setup() {
    WORK=$(mktemp -d "/tmp/$1.XXXXXX")
    chmod 755 "$WORK"
    BUS_PID= VFIOD_PID= MON_PID= EXTRA_PIDS=
    failures=0
    trap it_cleanup EXIT
}

it_cleanup() {
    for pid in $EXTRA_PIDS $MON_PID $VFIOD_PID $BUS_PID; do
        kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
    if [ "$failures" -ne 0 ]; then
        echo "--- vfiod log ---"; cat "$WORK/vfiod.log" 2>/dev/null
        echo "--- kept in $WORK ---"
    else
        rm -rf "$WORK"
    fi
}

pass() { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; failures=$((failures + 1)); }
# check NAME EXPECTED ACTUAL
check() { if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected '$2', got '$3'"; fi; }
# check_contains NAME NEEDLE HAYSTACK
check_contains() {
    case "$3" in *"$2"*) pass "$1" ;; *) fail "$1" "'$2' not in: $3" ;; esac
}

# start_private_bus POLICY [EXTRA_RULES] [SERVICEDIR]: dbus-daemon on $WORK/bus,
# DBUS_SYSTEM_BUS_ADDRESS set. SERVICEDIR holds .service files the bus may activate (tests that
# prove nothing activates vfiod put a marker-writing org.vfiod1.service there).
start_private_bus() {
    cat > "$WORK/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$WORK/bus</listen>
  <auth>EXTERNAL</auth>
  ${3:+<servicedir>$3</servicedir>}
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus"/>
    ${2:-}
  </policy>
  <include>$1</include>
</busconfig>
CONF
    # The address is printed once the bus listens; the socket file exists a moment earlier
    # (bind before listen), and a client connecting then is refused.
    : > "$WORK/bus.addr"
    dbus-daemon --config-file="$WORK/bus.conf" --nofork --nopidfile --print-address=3 \
        3>"$WORK/bus.addr" >"$WORK/bus.log" 2>&1 &
    BUS_PID=$!
    for _ in $(seq 100); do [ -s "$WORK/bus.addr" ] && break; sleep 0.1; done
    chmod 666 "$WORK/bus"
    export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$WORK/bus"
}

# start_notify_listener LISTENER: a stand-in for systemd's notify socket at $NOTIFY
# ($WORK/notify.sock), logging each datagram to $WORK/notify.log; $PY is the python it runs on.
start_notify_listener() {
    PY=python3
    [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
    NOTIFY=$WORK/notify.sock
    "$PY" "$1" "$NOTIFY" "$WORK/notify.log" &
    EXTRA_PIDS="$EXTRA_PIDS $!"
    for _ in $(seq 50); do [ -S "$NOTIFY" ] && break; sleep 0.1; done
}
