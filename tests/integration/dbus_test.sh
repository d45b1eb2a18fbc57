#!/bin/bash
# Integration test of vfiod's D-Bus API on a private system bus (DESIGN §6): the real vfiod in
# observe mode on a synthetic GPU host, busctl and vfioctl as clients.
# Usage: dbus_test.sh VFIOD VFIOCTL MKFIXTURE POLICY_CONF INTERFACES_DIR (daemon/dbus: the XML)
# Exit 0 when every check passed, 1 otherwise, 77 (skip) when the tools are missing.
set -u

VFIOD=$1 VFIOCTL=$2 MKFIXTURE=$3 POLICY=$4 INTERFACES=$5
for tool in dbus-daemon busctl dbus-monitor dbus-send python3; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done

source "$(dirname "$0")/lib.sh"
it_setup vfiod-it


# --- a private bus with the system bus's default policy plus our own policy file ---
own_rule=
[ "$(id -u)" -ne 0 ] && own_rule="<allow own=\"org.vfiod1\"/>"  # a developer not running as root
start_private_bus "$POLICY" "$own_rule"
BUSCTL=(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS")

# --- the fixture host and vfiod on it ---
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }
CONFIG=$WORK/vfiod.toml
cp "$WORK/root/etc/vfiod/vfiod.toml" "$CONFIG"
cp "$CONFIG" "$WORK/original.toml"

# vfioctl without a daemon: a clear message and the "unavailable" exit code.
out=$("$VFIOCTL" status 2>&1); rc=$?
check "vfioctl status without daemon exits 3" 3 "$rc"
check_contains "vfioctl status without daemon says so" "not running" "$out"

"$VFIOD" --root "$WORK/root" --config "$CONFIG" --observe >"$WORK/vfiod.log" 2>&1 &
VFIOD_PID=$!
for _ in $(seq 100); do
    "${BUSCTL[@]}" status org.vfiod1 >/dev/null 2>&1 && break
    sleep 0.1
done

# The error name of a Manager call ("" on success): dbus-send prints "Error NAME: message".
call_error() {
    local method=$1; shift
    dbus-send --bus="$DBUS_SYSTEM_BUS_ADDRESS" --print-reply --dest=org.vfiod1 /org/vfiod1 \
        "org.vfiod1.Manager.$method" "$@" 2>&1 | sed -n 's/^Error \([^:]*\):.*/\1/p'
}
prop() { "${BUSCTL[@]}" get-property org.vfiod1 "$1" "$2" "$3" 2>&1; }
# The error name of a Properties.Get of PATH INTERFACE PROPERTY ("" on success).
get_error() {
    dbus-send --bus="$DBUS_SYSTEM_BUS_ADDRESS" --print-reply --dest=org.vfiod1 "$1" \
        org.freedesktop.DBus.Properties.Get string:"$2" string:"$3" 2>&1 |
        sed -n 's/^Error \([^:]*\):.*/\1/p'
}
# Does the live object at PATH serve INTERFACE exactly as daemon/dbus/INTERFACE.xml declares it
# (properties, types, access, annotations; methods and signals)? Prints the differences. The
# Method.Async annotation tells sdbus-c++-xml2cpp what to generate and never reaches the bus.
xml_differences() {
    "${BUSCTL[@]}" --xml-interface introspect org.vfiod1 "$1" >"$WORK/live.xml" 2>&1
    python3 - "$WORK/live.xml" "$INTERFACES/$2.xml" "$2" <<'PY'
import sys
import xml.etree.ElementTree as ET

def members(path, name):
    for iface in ET.parse(path).getroot().iter("interface"):
        if iface.get("name") == name:
            return {(m.tag, m.get("name")): (sorted(m.attrib.items()),
                     sorted((a.tag, sorted(a.attrib.items())) for a in m
                            if a.get("name") != "org.freedesktop.DBus.Method.Async"))
                    for m in iface}
    return None

live, declared = members(sys.argv[1], sys.argv[3]), members(sys.argv[2], sys.argv[3])
if live is None:
    print("interface not served")
elif live != declared:
    for key in sorted(set(live) | set(declared)):
        if live.get(key) != declared.get(key):
            print(key, "live:", live.get(key), "xml:", declared.get(key))
PY
}
GROUP=org.vfiod1.Group DEVICE=org.vfiod1.Device MANAGER=org.vfiod1.Manager

# --- objects and properties for a multi-group host ---
tree=$("${BUSCTL[@]}" tree --list org.vfiod1 2>&1)
for path in /org/vfiod1 /org/vfiod1/group/13 /org/vfiod1/group/14 /org/vfiod1/group/15 \
            /org/vfiod1/device/0000_01_00_0 /org/vfiod1/device/0000_01_00_1 \
            /org/vfiod1/device/0000_02_00_0 /org/vfiod1/device/0000_03_00_0; do
    check_contains "object $path exported" "$path" "$tree"
done
# The iGPU (group 1) is protected and not allowlisted: neither its group nor its device appears.
if grep -qxE '/org/vfiod1/group/1|/org/vfiod1/device/0000_00_02_0' <<<"$tree"; then
    fail "protected iGPU not published" "$tree"
else
    pass "protected iGPU not published"
fi
check "Manager.Mode" 's "observe"' "$(prop /org/vfiod1 $MANAGER Mode)"
check "Manager.IommuEnabled" 'b true' "$(prop /org/vfiod1 $MANAGER IommuEnabled)"
check "Manager.Version" "s \"$("$VFIOD" --version | cut -d' ' -f2)\"" "$(prop /org/vfiod1 $MANAGER Version)"
check "group 13 pending in observe mode" 's "pending"' "$(prop /org/vfiod1/group/13 $GROUP State)"
check "group 13 Id" 'u 13' "$(prop /org/vfiod1/group/13 $GROUP Id)"
check "group 13 VfioPath" 's "/dev/vfio/13"' "$(prop /org/vfiod1/group/13 $GROUP VfioPath)"
check "group 13 Devices" 'ao 2 "/org/vfiod1/device/0000_01_00_0" "/org/vfiod1/device/0000_01_00_1"' \
    "$(prop /org/vfiod1/group/13 $GROUP Devices)"
check "group 14 refused" 's "refused"' "$(prop /org/vfiod1/group/14 $GROUP State)"
check "group 14 reason" 's "in-use-storage"' "$(prop /org/vfiod1/group/14 $GROUP Reason)"
check "group 14 blockers" 'as 1 "0000:02:00.0"' "$(prop /org/vfiod1/group/14 $GROUP Blockers)"
D=/org/vfiod1/device/0000_01_00_1
check "audio function Address" 's "0000:01:00.1"' "$(prop $D $DEVICE Address)"
check "audio function Vendor/Device" 's "10de" s "22a3"' "$(prop $D $DEVICE Vendor) $(prop $D $DEVICE Device)"
check "audio function Class" 's "040300"' "$(prop $D $DEVICE Class)"
check "audio function Driver" 's "snd_hda_intel"' "$(prop $D $DEVICE Driver)"
check "audio function Target" 's "vfio-pci"' "$(prop $D $DEVICE Target)"
check "audio function Role" 's "companion"' "$(prop $D $DEVICE Role)"
check "audio function IommuGroup" 'u 13' "$(prop $D $DEVICE IommuGroup)"
check "audio function NumaNode" 'i 0' "$(prop $D $DEVICE NumaNode)"
check "audio function Group" 'o "/org/vfiod1/group/13"' "$(prop $D $DEVICE Group)"
check "GPU ResourceName" 's "nvidia.com/GH100_H100_PCIE"' \
    "$(prop /org/vfiod1/device/0000_01_00_0 $DEVICE ResourceName)"
check "GPU Role" 's "allowlisted"' "$(prop /org/vfiod1/device/0000_01_00_0 $DEVICE Role)"
check "group 13 served as org.vfiod1.Group.xml declares" "" \
    "$(xml_differences /org/vfiod1/group/13 $GROUP)"
check "a function served as org.vfiod1.Device.xml declares" "" "$(xml_differences $D $DEVICE)"
check "the manager served as org.vfiod1.Manager.xml declares" "" \
    "$(xml_differences /org/vfiod1 $MANAGER)"
# Only a published object's own spelling names it: anything else under the prefixes is unknown.
for path in /org/vfiod1/device/bogus /org/vfiod1/device/0000_09_00_0 \
            /org/vfiod1/device/0000_01_00_1/x /org/vfiod1/device/0000_01_00_01 \
            /org/vfiod1/device/0000_01_00_A /org/vfiod1/device/0000_00_02_0; do
    check "Get on $path is UnknownObject" org.freedesktop.DBus.Error.UnknownObject \
        "$(get_error $path $DEVICE Driver)"
done
for path in /org/vfiod1/group/99 /org/vfiod1/group/013 /org/vfiod1/group/13/x \
            /org/vfiod1/group/4294967296 /org/vfiod1/group/1; do
    check "Get on $path is UnknownObject" org.freedesktop.DBus.Error.UnknownObject \
        "$(get_error $path $GROUP State)"
done
check "a group's property on a function is UnknownProperty" \
    org.freedesktop.DBus.Error.UnknownProperty "$(get_error $D $GROUP State)"
out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1/group/13 org.freedesktop.DBus.Properties Set \
    ssv $GROUP State s bound 2>&1)
check_contains "Set of a read-only property is refused" "not writable" "$out"
objects=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 org.freedesktop.DBus.ObjectManager \
    GetManagedObjects 2>&1)
check_contains "ObjectManager lists group objects" '"/org/vfiod1/group/15"' "$objects"
plan=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Plan 2>&1)
check_contains "Plan() has the GPU group's bind" '\"action\": \"bind\"' "$plan"
check_contains "Plan() has the NVMe refusal" '\"reason\": \"in-use-storage\"' "$plan"

# --- vfioctl as a client ---
out=$("$VFIOCTL" status 2>&1); rc=$?
check "vfioctl status exits 0" 0 "$rc"
check_contains "vfioctl status names group 13" "13" "$out"
out=$("$VFIOCTL" status --json 2>&1)
check_contains "vfioctl status --json has the state" '"state": "refused"' "$out"
check_contains "vfioctl status --json has the reason" '"reason": "in-use-storage"' "$out"

# --- malformed arguments and operator errors (as root: authorization passes) ---
if [ "$(id -u)" -eq 0 ]; then
    for bad in "../../../etc" "0000:01:00.0/" "0000:01:00.0 " "0000:1:0.0" "0000:01:00.8" \
               "0000:01:20.0" "0000:01:00:0" "0000:01:0A.0" "" "0000:01:00.0/../../x"; do
        check "Bind '$bad' is InvalidArgs" org.freedesktop.DBus.Error.InvalidArgs \
            "$(call_error Bind string:"$bad")"
    done
    check "Release 'x/y' is InvalidArgs" org.freedesktop.DBus.Error.InvalidArgs \
        "$(call_error Release string:x/y)"
    check "Bind of an absent function is NotFound" org.vfiod1.Error.NotFound \
        "$(call_error Bind string:0000:09:00.0)"
    check "Bind of a non-allowlisted function is NotAllowlisted" org.vfiod1.Error.NotAllowlisted \
        "$(call_error Bind string:0000:00:1f.6)"
    check "Bind of the protected, not allowlisted iGPU is NotAllowlisted" \
        org.vfiod1.Error.NotAllowlisted "$(call_error Bind string:0000:00:02.0)"
    check "Bind of a companion's group in observe mode is Failed (no writes)" \
        org.vfiod1.Error.Failed "$(call_error Bind string:0000:01:00.1)"
    check "Release in observe mode is Failed (no writes)" org.vfiod1.Error.Failed \
        "$(call_error Release string:0000:01:00.0)"
    out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Bind s 0000:02:00.0 2>&1)
    check_contains "a refusal's message starts with its reason" "Call failed: in-use-storage:" "$out"
    out=$("$VFIOCTL" bind 0000:00:1f.6 2>&1); rc=$?
    check "vfioctl bind of a non-allowlisted function exits 1" 1 "$rc"
    check_contains "vfioctl bind says not allowlisted" "allowlist" "$out"
    out=$("$VFIOCTL" bind 0000:02:00.0 2>&1); rc=$?
    check "vfioctl bind of a refused group exits 1" 1 "$rc"
    check_contains "vfioctl bind names the refusal reason" "in-use-storage" "$out"
    out=$("$VFIOCTL" bind '0000:01:00.0/../x' 2>&1); rc=$?
    check "vfioctl bind of a malformed address exits 2" 2 "$rc"
else
    echo "# not root: the privileged operator checks are skipped"
fi

# --- unprivileged callers: reads allowed, changes denied ---
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    out=$("${NOBODY[@]}" "${BUSCTL[@]}" get-property org.vfiod1 /org/vfiod1/group/13 $GROUP State 2>&1)
    check "uid 65534 may read State" 's "pending"' "$out"
    for call in "Bind s 0000:01:00.0" "Release s 0000:01:00.0" "Reload"; do
        # shellcheck disable=SC2086
        out=$("${NOBODY[@]}" "${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER $call 2>&1)
        check_contains "uid 65534 ${call%% *} is AccessDenied" "Access denied" "$out"
    done
    out=$("${NOBODY[@]}" "${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Bind s "../x" 2>&1)
    check_contains "uid 65534 is denied before its argument is looked at" "Access denied" "$out"
else
    echo "# not root: the setpriv checks are skipped"
fi

# --- Reload: PropertiesChanged and InterfacesRemoved for a config change ---
if [ "$(id -u)" -eq 0 ]; then
    dbus-monitor --address "$DBUS_SYSTEM_BUS_ADDRESS" \
        "type='signal',sender='org.vfiod1'" >"$WORK/monitor.log" 2>&1 &
    MON_PID=$!
    sleep 0.5
    # Protect the spare NIC, drop the NVMe entry.
    cat >"$CONFIG" <<'TOML'
[[device]]
selector = "10de:2331"
resource_name = "nvidia.com/GH100_H100_PCIE"

[[device]]
selector = "8086:1533"
resource_name = "intel.com/I210"

[[protect]]
address = "0000:00:02.0"

[[protect]]
address = "0000:03:00.0"
TOML
    out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Reload 2>&1); rc=$?
    check "Reload succeeds" 0 "$rc"
    check "group 15 refused after reload" 's "refused"' "$(prop /org/vfiod1/group/15 $GROUP State)"
    check "group 15 reason protected" 's "protected"' "$(prop /org/vfiod1/group/15 $GROUP Reason)"
    check "Bind of a protected, allowlisted function is Refused" org.vfiod1.Error.Refused \
        "$(call_error Bind string:0000:03:00.0)"
    out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Bind s 0000:03:00.0 2>&1)
    check_contains "the refusal starts with 'protected:'" "Call failed: protected:" "$out"
    tree=$("${BUSCTL[@]}" tree --list org.vfiod1 2>&1)
    case "$tree" in *group/14*) fail "group 14 gone after reload" "$tree" ;;
        *) pass "group 14 gone after reload" ;; esac
    sleep 0.5
    mon=$(cat "$WORK/monitor.log")
    check_contains "PropertiesChanged for group 15" \
        "path=/org/vfiod1/group/15; interface=org.freedesktop.DBus.Properties; member=PropertiesChanged" "$mon"
    check_contains "InterfacesRemoved for group 14" "member=InterfacesRemoved" "$mon"
    check_contains "InterfacesRemoved names group 14" 'object path "/org/vfiod1/group/14"' "$mon"
    # A function leaves before its group: its InterfacesRemoved comes first.
    order=$(grep -oE 'object path "/org/vfiod1/(group/14|device/0000_02_00_0)"' "$WORK/monitor.log" |
        head -2 | tr '\n' ' ')
    check "InterfacesRemoved: the function before its group" \
        'object path "/org/vfiod1/device/0000_02_00_0" object path "/org/vfiod1/group/14" ' "$order"
    check "Get on a removed function is UnknownObject" org.freedesktop.DBus.Error.UnknownObject \
        "$(get_error /org/vfiod1/device/0000_02_00_0 $DEVICE Driver)"
    check "Get on a removed group is UnknownObject" org.freedesktop.DBus.Error.UnknownObject \
        "$(get_error /org/vfiod1/group/14 $GROUP State)"

    # A bad config is rejected with FILE:LINE:COLUMN and the previous one keeps running.
    cp "$CONFIG" "$WORK/good.toml"
    printf '\n[daemon]\nmode = "sometimes"\n' >>"$CONFIG"
    out=$("${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Reload 2>&1); rc=$?
    check "bad Reload fails" 1 "$rc"
    check_contains "bad Reload names FILE:LINE" "$CONFIG:" "$out"
    check "old config still active" 's "protected"' "$(prop /org/vfiod1/group/15 $GROUP Reason)"
    check "group 13 unchanged" 's "pending"' "$(prop /org/vfiod1/group/13 $GROUP State)"
    grep -q "$CONFIG:[0-9]*:[0-9]*" "$WORK/vfiod.log" && pass "bad reload logged with FILE:LINE:COL" \
        || fail "bad reload logged with FILE:LINE:COL"
    kill -HUP "$VFIOD_PID"
    sleep 0.5
    check "SIGHUP with a bad config keeps the old one" 's "protected"' \
        "$(prop /org/vfiod1/group/15 $GROUP Reason)"
    cp "$WORK/original.toml" "$CONFIG"
    kill -HUP "$VFIOD_PID"
    sleep 0.5
    check "SIGHUP with a good config applies it" 's "pending"' \
        "$(prop /org/vfiod1/group/15 $GROUP State)"
    check_contains "group 14 is back (InterfacesAdded)" 'object path "/org/vfiod1/group/14"' \
        "$(grep -A1 InterfacesAdded "$WORK/monitor.log")"
fi

# --- idle is silent, and the daemon survived everything above ---
before=$(wc -l <"$WORK/vfiod.log")
sleep 3
after=$(wc -l <"$WORK/vfiod.log")
check "no log line while idle (3 s)" "$before" "$after"
if kill -0 "$VFIOD_PID" 2>/dev/null; then pass "vfiod alive"; else fail "vfiod alive"; fi
check "vfiod still answers" 'b true' "$(prop /org/vfiod1 $MANAGER IommuEnabled)"

# --- SR-IOV (DESIGN §11): a PF an [[sriov]] entry governs, as the bus and vfioctl show it ---
kill "$VFIOD_PID"; wait "$VFIOD_PID" 2>/dev/null
"$MKFIXTURE" sriov-host "$WORK/sriov" || { fail "sriov fixture"; exit 1; }
PF_CONFIG=$WORK/sriov.toml
printf '[[sriov]]\naddress = "0000:02:00.0"\nnum_vfs = 2\n' >"$PF_CONFIG"
"$VFIOD" --root "$WORK/sriov" --config "$PF_CONFIG" --observe >"$WORK/vfiod-sriov.log" 2>&1 &
VFIOD_PID=$!
PF=/org/vfiod1/pf/0000_02_00_0
PFI=org.vfiod1.PhysicalFunction
for _ in $(seq 100); do
    [ "$(prop $PF $PFI State 2>/dev/null)" = 's "pending"' ] && break
    sleep 0.1
done
check "PF pending in observe mode" 's "pending"' "$(prop $PF $PFI State)"
check "PF counts: total, now, wanted" 'u 2 u 0 u 2' \
    "$(prop $PF $PFI TotalVfs) $(prop $PF $PFI NumVfs) $(prop $PF $PFI WantedVfs)"
check "PF Address" 's "0000:02:00.0"' "$(prop $PF $PFI Address)"
check "PF served as org.vfiod1.PhysicalFunction.xml declares" "" "$(xml_differences $PF $PFI)"
check "vfioctl status --json pfs from the daemon" "0000:02:00.0 pending 0 2 2" \
    "$("$VFIOCTL" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(" ".join(str(p[k]) for k in ("address", "state", "num_vfs", "wanted_vfs", "total_vfs")) for p in d["pfs"]))')"
check_contains "vfioctl status shows the PF" "0000:02:00.0" "$("$VFIOCTL" status 2>&1)"
printf '[[sriov]]\naddress = "0000:02:00.0"\nnum_vfs = 3\n' >"$PF_CONFIG"
"${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Reload >/dev/null 2>&1
check "num_vfs above total: refused after Reload" 's "refused" s "vfs-exceed-total"' \
    "$(prop $PF $PFI State) $(prop $PF $PFI Reason)"
printf '[[device]]\naddress = "0000:02:00.1"\n' >"$PF_CONFIG"
"${BUSCTL[@]}" call org.vfiod1 /org/vfiod1 $MANAGER Reload >/dev/null 2>&1
check "no [[sriov]] entry: the PF object is gone" org.freedesktop.DBus.Error.UnknownObject \
    "$(get_error $PF $PFI State)"
check "no [[sriov]] entry: no pfs in status --json" "False" \
    "$("$VFIOCTL" status --json | python3 -c 'import json,sys; print("pfs" in json.load(sys.stdin))')"

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
