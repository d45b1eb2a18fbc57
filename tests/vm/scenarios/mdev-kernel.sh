# The mediated-device facts vfiod relies on, on the real 6.1 kernel with the kernel's sample
# parents (tests/vm/mdev-samples.sh): mbochs (three types on one memory budget, the driver's own
# ENOSPC), mtty (two types on one port budget) and mdpy (no get_available: the core's EUSERS).
# Each fact is an assertion; tests/unit/test_fake_mdev.cpp holds the fake kernel to the same list.
# The uevents are read with `udevadm monitor --kernel --udev --property`, and their order is the
# kernel's (udev may pass on events of different devices in another order). It loads and unloads
# the parents itself and leaves no mdev and no parent module behind.
# needs: mdev-samples
# checks: parents-load parent-class-links parent-virtual-dirs parent-subsystem-class
# checks: mbochs-types mtty-types type-files create-write-only device-api type-names
# checks: available-at-load registered-event registered-after-parent-add registered-udev
# checks: create-ok mdev-bus-link mdev-under-parent mdev-driver driver-lists-mdev mdev-type-link
# checks: type-devices-link mdev-iommu-group group-only-mdev group-name group-type vfio-node
# checks: vfio-class-device mdev-add-event mdev-add-no-driver vfio-group-add-event mdev-bind-event
# checks: vfio-dev-add-event
# checks: add-group-bind-order mdev-udev-events mdev-no-extra-properties mdev-files
# checks: budget-shared eexist eexist-other-case eexist-other-parent uuid-upper-made-lower
# checks: einval-short einval-no-hyphens einval-bad-digit einval-long accepts-no-newline
# checks: enospc-large enospc-no-mdev enospc-add-remove enospc-no-bind enospc-budget-kept
# checks: mtty-budget-shared mtty-enospc
# checks: eusers-mdpy eusers-available-zero eusers-no-event
# checks: remove-zero-noop remove-einval remove-ok remove-gone remove-budget-back remove-events
# checks: remove-event-order
# checks: group-held-remove-returns group-held-mdev-gone group-held-group-gone group-held-holder-alive
# checks: device-open-remove-blocks device-open-bus-link-gone device-open-dir-stays device-open-files
# checks: device-open-type-link-gone device-open-no-event
# checks: device-open-node-stays device-open-eexist device-open-budget-held
# checks: device-closed-remove-returns device-closed-gone device-closed-budget-back device-closed-events
# checks: unload-removes-mdevs unregistered-event unregistered-after-mdev-remove
# checks: unload-class-link-gone parent-remove-after-unregistered vfioctl-plan-reads vfiod-no-errors
. /vmtest/lib.sh

B=/sys/class/mdev_bus
T=$B/mbochs/mdev_supported_types
U1=8a6b2a65-1b1f-4e7e-a1c4-000000000001
U2=8a6b2a65-1b1f-4e7e-a1c4-000000000002
U3=8a6b2a65-1b1f-4e7e-a1c4-000000000003
U4=8a6b2a65-1b1f-4e7e-a1c4-000000000004
UX=8a6b2a65-1b1f-4e7e-a1c4-0000000000ff
UY=8a6b2a65-1b1f-4e7e-a1c4-0000000000fe
UD=8a6b2a65-1b1f-4e7e-a1c4-0000000000d0
UPPER=8A6B2A65-1B1F-4E7E-A1C4-0000000000AB
upper_made=8a6b2a65-1b1f-4e7e-a1c4-0000000000ab

# write_errno PATH VALUE: writes VALUE in one write(2), as it is (no newline added); prints "ok"
# or the errno's name (EEXIST, ENOSPC, ...).
write_errno() {
    python3 -c '
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY)
    try:
        os.write(fd, sys.argv[2].encode())
    finally:
        os.close(fd)
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))' "$1" "$2"
}
nl='
'
create() { write_errno "$T/$1/create" "$2$nl"; }
avail() { # PARENT: "type=N ..." for every type of the parent
    for _t in "$B/$1"/mdev_supported_types/*; do
        printf '%s=%s ' "$(basename "$_t")" "$(cat "$_t/available_instances")"
    done | sed 's/ $//'
}
mdev_group() { basename "$(readlink "/sys/bus/mdev/devices/$1/iommu_group")"; }

# The monitor's events, one line each: SOURCE ACTION DEVPATH SUBSYSTEM, then the properties the
# daemon reads (DRIVER, DEVNAME, MDEV_STATE; "-" when absent) and how many others there were.
parse_events() {
    awk '
        /^(KERNEL|UDEV) *\[/ { sub(/ *\[[0-9.]*\]/, ""); src = $1; act = $2; path = $3; ss = $4
                             gsub(/[()]/, "", ss); drv = "-"; dn = "-"; st = "-"; other = 0
                             on = 1; next }
        on && /^DRIVER=/ { drv = substr($0, 8); next }
        on && /^DEVNAME=/ { dn = substr($0, 9); next }
        on && /^MDEV_STATE=/ { st = substr($0, 12); next }
        on && /^(ACTION|DEVPATH|SUBSYSTEM|SEQNUM|USEC_INITIALIZED|MAJOR|MINOR|DEVMODE|TAGS|CURRENT_TAGS)=/ { next }
        on && /=/ { other++; next }
        on && /^$/ { print src, act, path, ss, "DRIVER=" drv, "DEVNAME=" dn, "MDEV_STATE=" st,
                     "other=" other; on = 0 }
    ' /run/mdev-events.log
}
# events: parse_events, parsed again only when the log has grown (the checks ask often).
events() {
    _size=$(stat -c %s /run/mdev-events.log)
    if [ "$_size" != "$(cat /run/mdev-events.size 2>/dev/null)" ]; then
        parse_events >/run/mdev-events.parsed
        echo "$_size" >/run/mdev-events.size
    fi
    cat /run/mdev-events.parsed
}
# event_line ERE: the line number (in events) of the first event after line $MARK matching ERE,
# else 0. mark_events sets MARK to the last event so far.
MARK=0
mark_events() { MARK=$(events | wc -l); }
event_line() {
    _n=$(events | awk -v m="$MARK" 'NR > m' | grep -n -m1 -E "$1" | cut -d: -f1)
    echo $((${_n:-0} > 0 ? _n + MARK : 0))
}
has_event() { [ "$(event_line "$1")" -gt 0 ]; }
no_event() { [ "$(event_line "$1")" -eq 0 ]; }
# before A B: the first event matching A comes before the first matching B (both present).
before() {
    _a=$(event_line "$1"); _b=$(event_line "$2")
    [ "$_a" -gt 0 ] && [ "$_b" -gt 0 ] && [ "$_a" -lt "$_b" ]
}
show_events() { events | grep -E "$1" | sed 's/ DRIVER=- / /; s/ DEVNAME=- / /; s/ MDEV_STATE=- / /' | tr '\n' ';'; }
gone() { for _p; do [ ! -e "$_p" ] && [ ! -L "$_p" ] || return 1; done; }
# remove_all UUID...: the kernel's remove of each, as a user would write it.
remove_all() { for _u; do echo 1 >"/sys/bus/mdev/devices/$_u/remove"; done; }

mark_journal /run/mdev-journal.cursor

# The monitor first, proven to listen (to the kernel's and udev's events) by a change on
# /dev/null's device, before anything loads.
udev_monitor /run/mdev-events.log --kernel --udev

modprobe -a vfio vfio_iommu_type1 mdev
check parents-load modprobe -a mbochs mtty mdpy

# Parents: /sys/class/mdev_bus/<name> links to the parent's device; a virtual parent is a class
# device in /sys/devices/virtual/<class>/<name>, its subsystem that class.
check parent-class-links sh -c "test -L $B/mbochs && test -L $B/mtty && test -L $B/mdpy"
expect_eq parent-virtual-dirs \
    "/sys/devices/virtual/mbochs/mbochs /sys/devices/virtual/mtty/mtty /sys/devices/virtual/mdpy/mdpy" \
    "$(readlink -f $B/mbochs) $(readlink -f $B/mtty) $(readlink -f $B/mdpy)"
expect_eq parent-subsystem-class "/sys/class/mbochs /sys/class/mtty" \
    "$(readlink -f $B/mbochs/subsystem) $(readlink -f $B/mtty/subsystem)"
note "link texts: mdev_bus/mbochs -> $(readlink $B/mbochs); subsystem -> $(readlink $B/mbochs/subsystem)"
note "parent files: $(ls $B/mbochs/ | xargs)"
expect_eq mbochs-types "mbochs-large mbochs-medium mbochs-small" "$(ls $T | xargs)"
expect_eq mtty-types "mtty-1 mtty-2" "$(ls $B/mtty/mdev_supported_types | xargs)"
expect_eq type-files "available_instances create description device_api devices name" \
    "$(ls $T/mbochs-small | xargs)"
expect_eq create-write-only "200 444 444 444" \
    "$(cd $T/mbochs-small && stat -c %a create name available_instances device_api | xargs)"
expect_eq device-api "vfio-pci vfio-pci vfio-pci" \
    "$(cat $T/mbochs-small/device_api $B/mtty/mdev_supported_types/mtty-2/device_api \
        $B/mdpy/mdev_supported_types/mdpy-vga/device_api | xargs)"
expect_eq type-names "mbochs-small|Dual port serial|mdpy-vga" \
    "$(cat $T/mbochs-small/name)|$(cat $B/mtty/mdev_supported_types/mtty-2/name)|$(cat $B/mdpy/mdev_supported_types/mdpy-vga/name)"
note "description of mbochs-small: $(cat $T/mbochs-small/description)"
expect_eq available-at-load \
    "mbochs-large=4 mbochs-medium=16 mbochs-small=64|mtty-1=24 mtty-2=12|mdpy-hd=4 mdpy-vga=4 mdpy-xga=4" \
    "$(avail mbochs)|$(avail mtty)|$(avail mdpy)"

# mdev_register_parent(): a change with MDEV_STATE=registered on the parent once its types exist,
# after the parent's own add; udev passes it on with the property.
reg='^KERNEL change /devices/virtual/mbochs/mbochs mbochs .*MDEV_STATE=registered'
wait_for 20 has_event '^UDEV change /devices/virtual/mdpy/mdpy mdpy .*MDEV_STATE=registered'
check registered-event has_event "$reg"
check registered-after-parent-add before '^KERNEL add /devices/virtual/mbochs/mbochs mbochs ' "$reg"
check registered-udev has_event '^UDEV change /devices/virtual/mbochs/mbochs mbochs .*MDEV_STATE=registered'
note "load events: $(show_events 'virtual/(mbochs|mtty)/(mbochs|mtty) ')"

mark_events
# create: /sys/bus/mdev/devices/<uuid> under the parent, bound to the parent's mdev driver, with
# an IOMMU group of its own and /dev/vfio/<N>; the mdev_type link and the type's devices/ entry.
expect_eq create-ok ok "$(create mbochs-small $U1)"
D=/sys/bus/mdev/devices/$U1
check mdev-bus-link test -L "$D"
expect_eq mdev-under-parent "/sys/devices/virtual/mbochs/mbochs/$U1" "$(readlink -f "$D")"
expect_eq mdev-driver mbochs "$(basename "$(readlink "$D/driver")")"
check driver-lists-mdev test -L "/sys/bus/mdev/drivers/mbochs/$U1"
expect_eq mdev-type-link "/sys/devices/virtual/mbochs/mbochs/mdev_supported_types/mbochs-small" \
    "$(readlink -f "$D/mdev_type")"
note "link texts: mdev_type -> $(readlink "$D/mdev_type"); driver -> $(readlink "$D/driver"); bus link -> $(readlink "$D")"
expect_eq type-devices-link "/sys/devices/virtual/mbochs/mbochs/$U1" \
    "$(readlink -f "$T/mbochs-small/devices/$U1")"
g1=$(mdev_group $U1)
check mdev-iommu-group test -n "$g1"
expect_eq group-only-mdev "$U1" "$(ls /sys/kernel/iommu_groups/$g1/devices | xargs)"
expect_eq group-name vfio-noiommu "$(cat /sys/kernel/iommu_groups/$g1/name 2>&1)"
expect_eq group-type unknown "$(cat /sys/kernel/iommu_groups/$g1/type 2>&1)"
check vfio-node test -c "/dev/vfio/$g1"
expect_eq vfio-class-device "/sys/devices/virtual/vfio/$g1" "$(readlink -f "/sys/class/vfio/$g1")"
note "group $g1; all groups: $(ls /sys/kernel/iommu_groups | sort -n | xargs)"
madd="^KERNEL add /devices/virtual/mbochs/mbochs/$U1 mdev "
mbind="^KERNEL bind /devices/virtual/mbochs/mbochs/$U1 mdev DRIVER=mbochs "
gadd="^KERNEL add /devices/virtual/vfio/$g1 vfio .*DEVNAME=/dev/vfio/$g1 "
vdadd="^KERNEL add /devices/virtual/mbochs/mbochs/$U1/vfio-dev/vfio[0-9]+ vfio-dev "
wait_for 20 has_event "^UDEV bind /devices/virtual/mbochs/mbochs/$U1 mdev "
check mdev-add-event has_event "$madd"
check mdev-add-no-driver has_event "${madd}DRIVER=- "
check vfio-group-add-event has_event "$gadd"
check mdev-bind-event has_event "$mbind"
check vfio-dev-add-event has_event "$vdadd"
la=$(event_line "$madd"); lg=$(event_line "$gadd"); lv=$(event_line "$vdadd"); lb=$(event_line "$mbind")
check add-group-bind-order test "$la" -gt 0 -a "$la" -lt "$lg" -a "$lg" -lt "$lv" -a "$lv" -lt "$lb"
udev_create() {
    has_event "^UDEV add /devices/virtual/mbochs/mbochs/$U1 mdev DRIVER=- " &&
        has_event "^UDEV bind /devices/virtual/mbochs/mbochs/$U1 mdev DRIVER=mbochs " &&
        has_event "^UDEV add /devices/virtual/vfio/$g1 vfio .*DEVNAME=/dev/vfio/$g1 "
}
check mdev-udev-events udev_create
note "create events: $(show_events "$U1|vfio/$g1 ")"
note "raw: $(grep -A9 "^KERNEL.*add .*/devices/virtual/vfio/$g1 " /run/mdev-events.log | tr '\n' ' ')"
note "raw: $(grep -A12 "^UDEV.*bind .*/$U1 " /run/mdev-events.log | tr '\n' ' ')"
check mdev-no-extra-properties has_event "${madd}DRIVER=- DEVNAME=- MDEV_STATE=- other=0"
note "mdev files: $(ls "$D" | xargs)"
check mdev-files sh -c "test -f $D/remove && test -f $D/uevent && test -d $D/vendor"
check vfioctl-plan-reads sh -c 'vfioctl plan >/dev/null'

# One budget for all of a parent's types (mbochs: 256 MB; small 4, medium 16, large 64).
expect_eq budget-shared "mbochs-large=3 mbochs-medium=15 mbochs-small=63" "$(avail mbochs)"

# create_store: EEXIST for a UUID any parent has (compared as a value, whatever its case); the
# device is named in lower case; the UUID must be 36 characters, a 37th (any) is ignored.
expect_eq eexist EEXIST "$(create mbochs-small $U1)"
expect_eq eexist-other-case EEXIST "$(create mbochs-medium "$(echo $U1 | tr a-f A-F)")"
expect_eq eexist-other-parent EEXIST "$(write_errno $B/mtty/mdev_supported_types/mtty-1/create "$U1$nl")"
expect_eq uuid-upper-made-lower "ok /sys/devices/virtual/mbochs/mbochs/$upper_made" \
    "$(create mbochs-small $UPPER) $(readlink -f /sys/bus/mdev/devices/$upper_made)"
expect_eq einval-short EINVAL "$(create mbochs-small 8a6b2a65-1b1f-4e7e-a1c4)"
expect_eq einval-no-hyphens EINVAL "$(create mbochs-small 8a6b2a651b1f4e7ea1c4000000000002)"
expect_eq einval-bad-digit EINVAL "$(create mbochs-small 8a6b2a65-1b1f-4e7e-a1c4-00000000000g)"
expect_eq einval-long EINVAL "$(write_errno $T/mbochs-small/create "$U2$nl$nl")"
expect_eq accepts-no-newline "ok ok" \
    "$(write_errno $T/mbochs-small/create "$U2") $(write_errno $T/mbochs-small/create "${U3}x")"
note "after those: $(ls /sys/bus/mdev/devices | xargs)"
remove_all $upper_made $U2 $U3

# The driver's own refusal (mbochs has get_available): its probe fails with ENOSPC once the budget
# is spent, after the core added the device: add, then remove, and no bind.
for u in $U2 $U3 $U4; do create mbochs-large $u >/dev/null; done
before_x="$(avail mbochs)"
expect_eq enospc-large ENOSPC "$(create mbochs-large $UX)"
check enospc-no-mdev gone /sys/bus/mdev/devices/$UX /sys/devices/virtual/mbochs/mbochs/$UX
wait_for 20 has_event "^UDEV remove /devices/virtual/mbochs/mbochs/$UX "
check enospc-add-remove before "^KERNEL add /devices/virtual/mbochs/mbochs/$UX mdev " \
    "^KERNEL remove /devices/virtual/mbochs/mbochs/$UX mdev "
check enospc-no-bind no_event "^[A-Z]+ bind /devices/virtual/mbochs/mbochs/$UX "
expect_eq enospc-budget-kept "mbochs-large=0 mbochs-medium=3 mbochs-small=15|$before_x" \
    "$before_x|$(avail mbochs)"
note "ENOSPC events: $(show_events "$UX")"
remove_all $U2 $U3 $U4

# mtty: 24 ports, mtty-1 takes one, mtty-2 two.
M=$B/mtty/mdev_supported_types
i=10
while [ $i -lt 22 ]; do echo "8a6b2a65-1b1f-4e7e-a1c4-0000000000$i" >$M/mtty-2/create; i=$((i + 1)); done
expect_eq mtty-budget-shared "mtty-1=0 mtty-2=0" "$(avail mtty)"
expect_eq mtty-enospc ENOSPC "$(write_errno $M/mtty-1/create "$UX$nl")"
i=10
while [ $i -lt 22 ]; do remove_all "8a6b2a65-1b1f-4e7e-a1c4-0000000000$i"; i=$((i + 1)); done

# mdpy has no get_available: the core counts (max_instances 4) and refuses with EUSERS before it
# adds anything, so there is no event.
P=$B/mdpy/mdev_supported_types
for u in $U2 $U3 $U4; do echo $u >$P/mdpy-vga/create; done
echo $upper_made >$P/mdpy-hd/create
expect_eq eusers-mdpy EUSERS "$(write_errno $P/mdpy-xga/create "$UY$nl")"
expect_eq eusers-available-zero "mdpy-hd=0 mdpy-vga=0 mdpy-xga=0" "$(avail mdpy)"
check eusers-no-event no_event "$UY"
remove_all $U2 $U3 $U4 $upper_made

# remove: "0" does nothing, a non-number is EINVAL, "1" removes the mdev, its group and node; the
# budget comes back.
mark_events
expect_eq remove-zero-noop "ok yes" "$(write_errno $D/remove "0$nl") $(test -L $D && echo yes)"
expect_eq remove-einval EINVAL "$(write_errno $D/remove "x$nl")"
expect_eq remove-ok ok "$(write_errno $D/remove "1$nl")"
check remove-gone gone "$D" "/sys/devices/virtual/mbochs/mbochs/$U1" "/dev/vfio/$g1" \
    "/sys/kernel/iommu_groups/$g1" "$T/mbochs-small/devices/$U1" "/sys/class/vfio/$g1"
expect_eq remove-budget-back "mbochs-large=4 mbochs-medium=16 mbochs-small=64" "$(avail mbochs)"
wait_for 20 has_event "^UDEV remove /devices/virtual/mbochs/mbochs/$U1 "
mremove="^KERNEL remove /devices/virtual/mbochs/mbochs/$U1 mdev "
munbind="^KERNEL unbind /devices/virtual/mbochs/mbochs/$U1 mdev "
gremove="^KERNEL remove /devices/virtual/vfio/$g1 vfio "
vdremove="^KERNEL remove /devices/virtual/mbochs/mbochs/$U1/vfio-dev/vfio[0-9]+ vfio-dev "
remove_events() {
    has_event "$vdremove" && has_event "$gremove" && has_event "$munbind" && has_event "$mremove"
}
check remove-events remove_events
rv=$(event_line "$vdremove"); rg=$(event_line "$gremove"); ru=$(event_line "$munbind")
rm_=$(event_line "$mremove")
check remove-event-order test "$rv" -gt 0 -a "$rv" -lt "$rg" -a "$rg" -lt "$ru" -a "$ru" -lt "$rm_"
note "remove events: $(show_events "$U1|vfio/$g1 ")"

# A process holding only the group (/dev/vfio/<N>, no device fd): remove does not wait for it. The
# mdev, its IOMMU group and the node all go while the holder keeps its file (of a dead group).
hold_group() {
    python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
print("held", flush=True)
time.sleep(600)' "$1" >/run/mdev-holder.out 2>&1 &
    holder=$!
    wait_for 20 grep -q held /run/mdev-holder.out
}
# hold_device GROUP UUID: a VM's way in: the container, the group in it (type1 IOMMU), the device
# fd by the mdev's name.
hold_device() {
    python3 -c '
import fcntl, os, struct, sys, time
container = os.open("/dev/vfio/vfio", os.O_RDWR)
group = os.open("/dev/vfio/" + sys.argv[1], os.O_RDWR)
fcntl.ioctl(group, 0x3b68, struct.pack("i", container))  # VFIO_GROUP_SET_CONTAINER
fcntl.ioctl(container, 0x3b66, 3)                         # VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU
name = bytearray(sys.argv[2].encode() + b"\0")
device = fcntl.ioctl(group, 0x3b6a, name, True)          # VFIO_GROUP_GET_DEVICE_FD
print("open", device, flush=True)
time.sleep(600)' "$1" "$2" >/run/mdev-holder.out 2>&1 &
    holder=$!
    wait_for 20 grep -q open /run/mdev-holder.out
}
release() { kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; }
# remove_bg UUID: writes remove in the background; $writer is the writing process.
remove_bg() { sh -c "echo 1 >/sys/bus/mdev/devices/$1/remove" & writer=$!; }
finished() { ! kill -0 "$writer" 2>/dev/null; }
in_vfio_wait() { grep -q vfio_unregister_group_dev "/proc/$writer/stack"; }

create mbochs-small $U2 >/dev/null
g2=$(mdev_group $U2)
hold_group "/dev/vfio/$g2"
remove_bg $U2
if wait_for 20 finished; then ok group-held-remove-returns
else not_ok group-held-remove-returns "$(cat /proc/$writer/stack 2>&1)"; fi
check group-held-mdev-gone gone /sys/bus/mdev/devices/$U2 /sys/devices/virtual/mbochs/mbochs/$U2
check group-held-group-gone gone /sys/kernel/iommu_groups/$g2 /dev/vfio/$g2
check group-held-holder-alive kill -0 "$holder"
release

# A VM's device fd open: remove waits in vfio_unregister_group_dev until it is closed. Meanwhile
# the bus link and the mdev's files are gone (the driver link, mdev_type, remove, uevent: only
# iommu_group and vfio-dev are left in its directory), no event is sent; its group node and its
# budget stay, and its UUID is still taken.
mark_events
create mbochs-small $UD >/dev/null
g3=$(mdev_group $UD)
hold_device "$g3" $UD
note "holder: $(cat /run/mdev-holder.out)"
remove_bg $UD
if wait_for 20 in_vfio_wait; then ok device-open-remove-blocks
else not_ok device-open-remove-blocks "writer: $(finished && echo finished); $(cat /proc/$writer/stack 2>&1)"; fi
check device-open-bus-link-gone gone /sys/bus/mdev/devices/$UD
check device-open-dir-stays test -d /sys/devices/virtual/mbochs/mbochs/$UD
expect_eq device-open-files "iommu_group vfio-dev" "$(ls /sys/devices/virtual/mbochs/mbochs/$UD | xargs)"
check device-open-type-link-gone gone "$T/mbochs-small/devices/$UD"
check device-open-no-event no_event "^KERNEL (unbind|remove) /devices/virtual/mbochs/mbochs/$UD mdev "
check device-open-node-stays test -c /dev/vfio/$g3
expect_eq device-open-eexist EEXIST "$(create mbochs-medium $UD)"
expect_eq device-open-budget-held "mbochs-large=3 mbochs-medium=15 mbochs-small=63" "$(avail mbochs)"
release
if wait_for 30 finished; then ok device-closed-remove-returns
else not_ok device-closed-remove-returns "$(cat /proc/$writer/stack 2>&1)"; fi
check device-closed-gone gone /sys/devices/virtual/mbochs/mbochs/$UD /dev/vfio/$g3
expect_eq device-closed-budget-back "mbochs-large=4 mbochs-medium=16 mbochs-small=64" "$(avail mbochs)"
wait_for 20 has_event "^UDEV remove /devices/virtual/mbochs/mbochs/$UD "
c="/devices/virtual/mbochs/mbochs/$UD"
cv=$(event_line "^KERNEL remove $c/vfio-dev/vfio[0-9]+ "); cg=$(event_line "^KERNEL remove /devices/virtual/vfio/$g3 ")
cu=$(event_line "^KERNEL unbind $c mdev "); cr=$(event_line "^KERNEL remove $c mdev ")
check device-closed-events test "$cv" -gt 0 -a "$cv" -lt "$cg" -a "$cg" -lt "$cu" -a "$cu" -lt "$cr"
note "device-open events: $(show_events "$UD|vfio/$g3 ")"

# Unloading a parent (mdev_unregister_parent) removes its mdevs first, then sends change with
# MDEV_STATE=unregistered.
echo $U4 >$M/mtty-1/create
modprobe -r mtty
check unload-removes-mdevs gone /sys/bus/mdev/devices/$U4
unreg='^KERNEL change /devices/virtual/mtty/mtty mtty .*MDEV_STATE=unregistered'
wait_for 20 has_event '^UDEV change /devices/virtual/mtty/mtty mtty .*MDEV_STATE=unregistered'
check unregistered-event has_event "$unreg"
check unregistered-after-mdev-remove before "^KERNEL remove /devices/virtual/mtty/mtty/$U4 mdev " "$unreg"
check unload-class-link-gone gone $B/mtty
wait_for 20 has_event '^KERNEL remove /devices/virtual/mtty/mtty mtty '
check parent-remove-after-unregistered before "$unreg" '^KERNEL remove /devices/virtual/mtty/mtty mtty '
note "unload events: $(show_events "virtual/mtty/mtty")"
modprobe -r mbochs mdpy

kill $monitor
errors=$(journal_since /run/mdev-journal.cursor -p err)
if [ -z "$errors" ]; then ok vfiod-no-errors; else not_ok vfiod-no-errors "$errors"; fi
