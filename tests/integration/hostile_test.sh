#!/bin/bash
# Hostile hosts and configs (issue 10) against the real vfiod (observe mode, private system bus)
# and vfioctl: names that are not UTF-8 on D-Bus, a config whose keys would overflow toml++'s
# stack, a FIFO where sysfs has an attribute, and host strings that try to forge output; then
# (enforce mode) a PF journal entry that would destroy the VFs of a protected PF.
# Usage: hostile_test.sh VFIOD VFIOCTL MKFIXTURE POLICY_CONF
# Exit 0 when every check passed, 1 otherwise, 77 (skip) when the tools are missing.
set -u

VFIOD=$1 VFIOCTL=$2 MKFIXTURE=$3 POLICY=$4
for tool in dbus-daemon busctl python3 timeout; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done

source "$(dirname "$0")/lib.sh"
it_setup vfiod-hostile

own_rule=
[ "$(id -u)" -ne 0 ] && own_rule="<allow own=\"org.vfiod1\"/>"
start_private_bus "$POLICY" "$own_rule"
BUSCTL=(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" --timeout=10)
MANAGER=org.vfiod1.Manager DEVICE=org.vfiod1.Device GROUP=org.vfiod1.Group

R=$WORK/root
"$MKFIXTURE" gpu-host "$R" || { fail "fixture"; exit 1; }
CONFIG=$WORK/vfiod.toml
cp "$R/etc/vfiod/vfiod.toml" "$CONFIG"
GPU=$(cd "$R/sys/bus/pci/devices/0000:01:00.0" && pwd -P)
AUDIO=$(cd "$R/sys/bus/pci/devices/0000:01:00.1" && pwd -P)

# A driver directory whose name is not UTF-8 (and holds an escape), and the GPU bound to it.
EVIL=$(printf 'evil\377\033[2J')
mkdir -p "$R/sys/bus/pci/drivers/$EVIL"
ln -sfn "/sys/bus/pci/drivers/$EVIL" "$GPU/driver"
# The journal of an earlier run that recorded such a driver as the original (escaped on disk).
mkdir -p "$R/run/vfiod"
printf 'vfiod-journal 1\ngroup 13\nop release\nphase done\nreleased 1\nfunction 0000:01:00.0 original=evil%%ff before=vfio-pci before_override= target=vfio-pci\n' \
    >"$R/run/vfiod/group-13"
# A mount point that is a line and a screen clear of its own once its octal escapes are decoded.
printf '23 22 259:1 / /mnt/a\\012FAKE\\033[2Jb\\040c rw - vfat /dev/nvme0n1p1 rw\n' \
    >"$R/proc/self/mountinfo"

# The D-Bus string property of a device, as JSON (busctl escapes nothing in JSON but quotes).
jprop() { "${BUSCTL[@]}" --json=short get-property org.vfiod1 "$1" "$DEVICE" "$2" 2>&1; }
gprop() { "${BUSCTL[@]}" get-property org.vfiod1 "$1" "$2" "$3" 2>&1; }
alive() { kill -0 "$VFIOD_PID" 2>/dev/null; }
REPLACEMENT=$(printf '\357\277\275')

"$VFIOD" --root "$R" --config "$CONFIG" --observe >"$WORK/vfiod.log" 2>&1 &
VFIOD_PID=$!
for _ in $(seq 100); do
    "${BUSCTL[@]}" status org.vfiod1 >/dev/null 2>&1 && break
    alive || break
    sleep 0.1
done

# --- row 1: invalid UTF-8 reaches the bus as U+FFFD, and the daemon lives ---
if alive; then pass "vfiod starts with a non-UTF-8 driver name and journal entry"
else fail "vfiod starts with a non-UTF-8 driver name and journal entry" "$(tail -3 "$WORK/vfiod.log")"; fi
D=/org/vfiod1/device/0000_01_00_0
check_contains "Driver published with U+FFFD" "\"data\":\"evil$REPLACEMENT" "$(jprop $D Driver)"
check_contains "OriginalDriver from the journal published with U+FFFD" "\"data\":\"evil$REPLACEMENT\"" \
    "$(jprop $D OriginalDriver)"
objects=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 org.freedesktop.DBus.ObjectManager GetManagedObjects 2>&1)
check_contains "GetManagedObjects answers" "/org/vfiod1/device/0000_01_00_0" "$objects"
plan=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Plan 2>&1)
check_contains "Plan() answers (JSON escapes the name)" 'evil\\ufffd' "$plan"
if grep -q "$(printf '\033')" "$WORK/vfiod.log"; then fail "no raw ESC in the daemon's log"
else pass "no raw ESC in the daemon's log"; fi
check_contains "the forged mount point is logged escaped" 'is mounted on /mnt/a\x0aFAKE\x1b[2Jb c' \
    "$(cat "$WORK/vfiod.log")"

# A second bad name appears and a SIGHUP re-reads the host: PropertiesChanged must go out too.
EVIL2=$(printf 'worse\376')
mkdir -p "$R/sys/bus/pci/drivers/$EVIL2"
ln -sfn "/sys/bus/pci/drivers/$EVIL2" "$GPU/driver"
kill -HUP "$VFIOD_PID"
sleep 1
if alive; then pass "vfiod survives SIGHUP with a new non-UTF-8 name"; else fail "vfiod survives SIGHUP with a new non-UTF-8 name"; fi
check_contains "Driver changed to the new name" "\"data\":\"worse$REPLACEMENT\"" "$(jprop $D Driver)"

# --- row 2: a key nested 50,000 deep; the reload is refused and the old config stays ---
cp "$CONFIG" "$WORK/good.toml"
state13=$(gprop /org/vfiod1/group/13 $GROUP State)
python3 -c "import sys; open(sys.argv[1],'w').write('.'.join(['a']*50000)+' = 1\n')" "$CONFIG"
out=$(timeout 20 "$VFIOCTL" check-config "$CONFIG" 2>&1); rc=$?
check "check-config of a deep key exits 2" 2 "$rc"
check_contains "check-config names FILE:LINE:COLUMN" "$CONFIG:1:1: key nested too deeply" "$out"
if [ "$(id -u)" -eq 0 ]; then
    out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Reload 2>&1); rc=$?
    check "Reload with a deep key fails" 1 "$rc"
    check_contains "Reload names the key's position" "key nested too deeply" "$out"
fi
kill -HUP "$VFIOD_PID"
sleep 1
if alive; then pass "vfiod survives SIGHUP with a deep key"; else fail "vfiod survives SIGHUP with a deep key"; fi
check "group 13 keeps its state" "$state13" "$(gprop /org/vfiod1/group/13 $GROUP State)"
check "the previous config still rules group 14" 's "in-use-storage"' \
    "$(gprop /org/vfiod1/group/14 $GROUP Reason)"
grep -q "$CONFIG:1:1: key nested too deeply" "$WORK/vfiod.log" && pass "bad reload logged with FILE:LINE:COL" \
    || fail "bad reload logged with FILE:LINE:COL"
cp "$WORK/good.toml" "$CONFIG"

# --- row 3: 4,000 overlapping entries: bounded warnings, quickly ---
python3 -c "import sys; open(sys.argv[1],'w').write('[[device]]\nselector=\"10de:*\"\n'*4000)" "$WORK/many.toml"
out=$(timeout 20 "$VFIOCTL" check-config "$WORK/many.toml" 2>&1); rc=$?
check "check-config of 4000 overlapping entries exits 0 in time" 0 "$rc"
check "at most 21 warning lines" 21 "$(grep -c '^warning:' <<<"$out")"
check_contains "the rest is counted" "... and 3979 more overlapping [[device]] entries" "$out"

# --- row 5: the CLI shows host strings escaped ---
for verb in plan doctor; do
    out=$(timeout 20 "$VFIOCTL" "$verb" --root "$R" --config "$CONFIG" 2>&1)
    if printf '%s' "$out" | LC_ALL=C grep -q "$(printf '[\033\377\376]')"; then
        fail "vfioctl $verb prints no raw ESC or non-UTF-8 byte"
    else
        pass "vfioctl $verb prints no raw ESC or non-UTF-8 byte"
    fi
    check_contains "vfioctl $verb shows the mount point escaped" '/mnt/a\x0aFAKE\x1b[2Jb c' "$out"
done
check_contains "vfioctl plan shows the driver escaped" 'worse\xfe' \
    "$(timeout 20 "$VFIOCTL" plan --root "$R" --config "$CONFIG" 2>&1)"
out=$("$VFIOCTL" bind "$(printf '0000:01:00.0\033[2J\nFAKE')" 2>&1); rc=$?
check "vfioctl bind of a forged argument exits 2" 2 "$rc"
check "vfioctl bind echoes the argument escaped, on one line" 1 "$(printf '%s\n' "$out" | wc -l)"
check_contains "vfioctl bind shows the escape" '\x1b[2J\x0aFAKE' "$out"

# --- row 4: a FIFO where sysfs has an attribute; the loop must not block on it ---
rm "$AUDIO/vendor"
mkfifo "$AUDIO/vendor"
out=$(timeout 20 "$VFIOCTL" plan --root "$R" --config "$CONFIG" 2>&1); rc=$?
check "vfioctl plan with a FIFO vendor finishes" 0 "$rc"
check_contains "vfioctl plan says why it skipped the function" \
    "skipping PCI function 0000:01:00.1: vendor is a FIFO, not a regular file" "$out"
kill -HUP "$VFIOD_PID"
sleep 1
check "vfiod answers after a SIGHUP with a FIFO vendor" 'b true' \
    "$(gprop /org/vfiod1 $MANAGER IommuEnabled)"
# The daemon says it too, at warning level (it was only a debug line), once while it lasts.
kill -HUP "$VFIOD_PID"
sleep 1
check "vfiod warns once about the FIFO vendor over two re-reads" 1 \
    "$(grep -c 'warning skipping PCI function 0000:01:00.1: vendor is a FIFO, not a regular file' "$WORK/vfiod.log")"
rm "$R/proc/net/route"
mkfifo "$R/proc/net/route"
out=$(timeout 20 "$VFIOCTL" plan --root "$R" --config "$CONFIG" 2>&1); rc=$?
check "vfioctl plan with a FIFO route table finishes" 0 "$rc"
check_contains "vfioctl plan names the FIFO route table" \
    "not reading proc/net/route: it is a FIFO, not a regular file" "$out"
kill -HUP "$VFIOD_PID"
sleep 1
check "vfiod answers after a SIGHUP with a FIFO route table" 'b true' \
    "$(gprop /org/vfiod1 $MANAGER IommuEnabled)"
check_contains "vfiod warns about the FIFO route table" \
    "warning not reading proc/net/route: it is a FIFO, not a regular file" "$(cat "$WORK/vfiod.log")"
kill -TERM "$VFIOD_PID"
for _ in $(seq 50); do alive || break; sleep 0.1; done
if alive; then fail "SIGTERM ends vfiod within 5 s"; else pass "SIGTERM ends vfiod within 5 s"; VFIOD_PID=; fi

# --- row 6 (issue 37, finding 1): a PF journal entry never destroys a protected PF's VFs ---
# The shape found: enforce mode, the PF protected, no [[sriov]] entry, its first VF carrying the
# default route, and an entry of an interrupted 0 -> 2 change. vfiod used to write
# sriov_numvfs <- 0 at start "back at 0"; now nothing is written and the entry goes.
S=$WORK/sriov
"$MKFIXTURE" sriov-routed-vf "$S" || { fail "sriov-routed-vf fixture"; exit 1; }
PF_DIR=$S/sys/bus/pci/devices/0000:02:00.0
mkdir -p "$S/run/vfiod"
printf 'vfiod-pf-journal 1\npf 0000:02:00.0\nfrom 0\nto 2\nphase started\n' \
    >"$S/run/vfiod/pf-0000:02:00.0"
printf '[daemon]\nmode = "enforce"\n\n[[protect]]\naddress = "0000:02:00.0"\n' >"$WORK/protect.toml"
"$VFIOD" --root "$S" --config "$WORK/protect.toml" >"$WORK/vfiod-pf.log" 2>&1 &
VFIOD_PID=$!
for _ in $(seq 100); do
    grep -q 'unfinished VF count change' "$WORK/vfiod-pf.log" && break
    alive || break
    sleep 0.1
done
check "the protected PF keeps its 2 VFs" 2 "$(cat "$PF_DIR/sriov_numvfs")"
check "the PF entry was discarded" "" "$(ls -A "$S/run/vfiod")"
LOG=$(cat "$WORK/vfiod-pf.log")
check_contains "vfiod names the rule for the PF" \
    "0000:02:00.0: protected: matches a [[protect]] entry" "$LOG"
check_contains "vfiod names the VF and its rule" \
    "0000:02:00.1: a VF of 0000:02:00.0, in-use-network: enp2s0v0 carries a route" "$LOG"
kill -TERM "$VFIOD_PID"
for _ in $(seq 50); do alive || break; sleep 0.1; done
alive && fail "SIGTERM ends the second vfiod"
VFIOD_PID=

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
