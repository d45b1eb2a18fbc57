# Helpers for guest scenario scripts (busybox sh in the fast guest, the host's sh under systemd).
# One line per check goes to the second serial port; the host runner reads it, answers requests
# on the third port, and fails the test on any "not ok" or on a check that never reported.

RESULTS=/dev/ttyS1
CONTROL=/dev/ttyS2

report() { echo "$*" >"$RESULTS"; echo "vmtest: $*"; }

# A check's name is reported as $VMTEST_PREFIX$NAME: when scenarios share a boot (run.py), each
# runs with VMTEST_PREFIX="SCENARIO/".
ok() { report "ok ${VMTEST_PREFIX:-}$1"; }

# not_ok NAME DETAIL...: DETAIL is squeezed onto the one result line.
not_ok() {
    _name=$1; shift
    report "not ok ${VMTEST_PREFIX:-}$_name $(echo "$*" | tr '\n' ' ' | cut -c1-400)"
}

# check NAME COMMAND...: ok when COMMAND succeeds; otherwise its last output lines are the detail.
check() {
    _name=$1; shift
    if _out=$("$@" 2>&1); then ok "$_name"; else not_ok "$_name" "$(echo "$_out" | tail -n3)"; fi
}

# expect_eq NAME EXPECTED ACTUAL
expect_eq() {
    if [ "$2" = "$3" ]; then ok "$1"; else not_ok "$1" "expected '$2', got '$3'"; fi
}

note() { report "# $(echo "$*" | tr '\n' ' ')"; }

# For the demo: narrate TEXT is a heading, show COMMAND... reports the command's output lines.
narrate() { report "## $*"; }
show() {
    report "#   \$ $*"
    "$@" 2>&1 | while IFS= read -r _line; do report "#     $_line"; done
}

# measure NAME SECONDS: a timing the host prints in its summary.
measure() { report "time $1 $2"; }

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# elapsed_since T0: seconds (two decimals) since uptime T0.
elapsed_since() { awk -v t0="$1" '{ printf "%.2f", $1 - t0 }' /proc/uptime; }

# wait_for SECONDS COMMAND...: polls COMMAND every 50 ms until it succeeds or time runs out.
wait_for() {
    _deadline=$(awk -v s="$1" '{ print $1 + s }' /proc/uptime); shift
    while ! "$@" >/dev/null 2>&1; do
        if awk -v d="$_deadline" '{ exit !($1 > d) }' /proc/uptime; then return 1; fi
        sleep 0.05
    done
}

# udev_monitor LOG OPTION...: `udevadm monitor OPTION... --property` into LOG in the background
# ($monitor: its pid), back once it is listening: udevadm says nothing when it is, so a change
# on /dev/null's device is sent until the monitor reports it (its udev line with --udev, else its
# kernel line), ten times at most.
udev_monitor() {
    _log=$1; shift
    case " $* " in *" --udev "*) _src=UDEV ;; *) _src=KERNEL ;; esac
    stdbuf -oL udevadm monitor "$@" --property >"$_log" 2>&1 &
    monitor=$!
    _i=0
    while [ $_i -lt 10 ]; do
        echo change >/sys/devices/virtual/mem/null/uevent
        wait_for 6 grep -q "^$_src.*change.*/devices/virtual/mem/null" "$_log" && return 0
        _i=$((_i + 1))
    done
    note "the udev monitor did not report a change on /dev/null"
}

# host_request WORDS...: asks the host runner (e.g. "qmp device_add {...}") and prints its answer;
# fails when the answer does not start with "ok".
host_request() {
    report "req $*"
    read -r _answer <"$CONTROL"
    echo "$_answer"
    case $_answer in ok*) return 0 ;; *) return 1 ;; esac
}

# The guest topology run.py builds: a "GPU" (e1000e) + "HDMI audio" (ich9-intel-hda) in one
# group behind a root port, the management NIC on the root bus, an nvme disk.
GPU=0000:01:00.0
AUDIO=0000:01:00.1
MGMT=0000:00:02.0
NVME=0000:02:00.0
# "# nvme-sriov: yes": the SR-IOV NVMe PF behind root port 00:09.0 (bus 05, or 06 beside the
# nvme-subsys controller; empty without it), and where a scenario hot-adds a second one (rp3).
# Both carry $NVME's ID, 1b36:0010, and so do their VFs (PF + 1 and + 2: functions 1 and 2).
SRIOV_PF=$(ls /sys/bus/pci/devices/0000:00:09.0 2>/dev/null | grep -m1 '^0000:..:00\.0$')
SRIOV_HOTPLUG_PF=0000:03:00.0

# PCI helpers over the real sysfs.
pci_dev() { echo "/sys/bus/pci/devices/$1"; }
driver_of() { _l=$(readlink "$(pci_dev "$1")/driver" 2>/dev/null) && basename "$_l"; }
group_of() { basename "$(readlink "$(pci_dev "$1")/iommu_group")"; }
# pci_move BDF DRIVER: libvirt's (and vfiod's) order: override, unbind, reprobe. An empty DRIVER
# clears the override (the kernel needs a write of "\n"), so the host driver comes back.
pci_move() {
    if [ -n "$2" ]; then printf '%s' "$2"; else echo; fi >"$(pci_dev "$1")/driver_override"
    [ -e "$(pci_dev "$1")/driver" ] && printf '%s' "$1" >"$(pci_dev "$1")/driver/unbind"
    printf '%s' "$1" >/sys/bus/pci/drivers_probe
}

# Plan JSON helpers (the busybox guest has no JSON tool). Texts are compacted to one line without
# blanks around punctuation first, so patterns are written against compact JSON.
json_compact() { tr -d '\n' | sed -e 's/": */":/g' -e 's/[[:space:]]*\([][{},]\)[[:space:]]*/\1/g'; }
# json_has TEXT BRE: TEXT contains a match of BRE.
json_has() { echo "$1" | json_compact | grep -q -- "$2"; }
# plan_group JSON N: the object of group N.
plan_group() { echo "$1" | json_compact | sed 's/{"group":/\n&/g' | grep "^{\"group\":$2,"; }

# write_config < TOML: the main config file vfiod and vfioctl read under root /.
write_config() { mkdir -p /etc/vfiod; cat >/etc/vfiod/vfiod.toml; }

# D-Bus helpers (systemd guest).
# group_state N: the State of /org/vfiod1/group/N, empty if there is no such object.
group_state() {
    busctl get-property org.vfiod1 "/org/vfiod1/group/$1" org.vfiod1.Group State 2>/dev/null |
        sed -n 's/^s "\(.*\)"$/\1/p'
}
group_prop() {
    busctl get-property org.vfiod1 "/org/vfiod1/group/$1" org.vfiod1.Group "$2" 2>/dev/null
}
state_is() { [ "$(group_state "$1")" = "$2" ]; }
manager() { busctl call org.vfiod1 /org/vfiod1 org.vfiod1.Manager "$@"; }
# journal_since CURSOR_FILE [journalctl options]: vfiod's journal after the cursor saved by
# mark_journal.
mark_journal() { journalctl -u vfiod -n 0 --show-cursor -q 2>/dev/null | sed -n 's/^-- cursor: //p' >"$1"; }
journal_since() {
    _cursor=$1; shift
    if [ -s "$_cursor" ]; then journalctl -u vfiod --after-cursor "$(cat "$_cursor")" -q --no-pager "$@"
    else journalctl -u vfiod -q --no-pager "$@"; fi
}

# signal_time MONITOR_FILE PATH VALUE: the wall-clock time (s since the epoch) of the first signal
# in `busctl monitor` output MONITOR_FILE sent from object PATH whose body has STRING "VALUE".
signal_time() {
    _ts=$(awk -v path="$2" -v want="STRING \"$3\";" '
        /^‣ / { signal = ($0 ~ /Type=signal/); ts = $0; sub(/.*Timestamp="/, "", ts); sub(/".*/, "", ts) }
        /^  Sender=/ { here = (index($0, "Path=" path " ") > 0) }
        signal && here && index($0, want) { print ts; exit }' "$1")
    [ -n "$_ts" ] && date -d "${_ts#* }" +%s.%N
}
now_s() { date +%s.%N; }

# group_viable DEVNODE: "viable" when the group opens as QEMU opens it (/dev/vfio/N, O_RDWR) and
# VFIO_GROUP_GET_STATUS (_IO(';', 100 + 3)) says VIABLE; "not-viable" or python's error otherwise
# (systemd guest: python3 from the host's /).
group_viable() {
    python3 -c '
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
argsz, flags = struct.unpack("II", fcntl.ioctl(fd, 0x3b67, struct.pack("II", 8, 0)))
print("viable" if flags & 1 else "not-viable")
' "$1" 2>&1
}

# Raw and without echo, so answers arrive as written and nothing is sent back; set once here to
# keep it out of the timed path of a request.
stty -F "$CONTROL" raw -echo 2>/dev/null
report "time scenario-start $(uptime_s)"
