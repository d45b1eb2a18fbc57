# Early binding from Debian's initramfs (docs/DESIGN.md §14), on the real kernel: the guest boots
# an initramfs that Debian's mkinitramfs built on the host with vfiod's hook (image mode, the
# test's initramfs-tools configuration tests/vm/initramfs: e1000e forced in). The GPU function and
# its audio function are early; the management NIC has the GPU's ID and must keep e1000e. Then, in
# the same guest, the hook again on the live guest: an early entry for a function that holds a
# mounted filesystem is left out with a warning. What the host saw of its builds (the init-top
# ORDER, the lists, the dracut image's listing) is in /vmtest/host.
# topology: e1000e-mgmt
# overlay: overlays/initramfs-early
# initramfs: debian
# checks: order-vfiod-before-udev image-list image-modules dracut-image early-log
# checks: gpu-never-e1000e monitor-saw-vfio-bind no-e1000e-bind-event monitor-saw-mgmt-bind
# checks: vfio-at-root-start mgmt-kept-e1000e vfiod-active group-bound status-json-bound
# checks: no-journal-write no-errors apply-refusals
# checks: rebuild-warns-mounted rebuild-leaves-out-nvme rebuild-record
. /vmtest/lib.sh
host=/vmtest/host
note "host: mkinitramfs $(cat $host/mkinitramfs.seconds) s, dracut $(cat $host/dracut.seconds) s"
measure mkinitramfs-host "$(cat $host/mkinitramfs.seconds)"
measure dracut-host "$(cat $host/dracut.seconds)"
measure boot-to-scenario "$(uptime_s)"

# init-top's ORDER as built: vfiod's script before udev's (and init runs all of init-top before
# the modules list loads).
line_of() { grep -n "^/scripts/init-top/$1 " $host/init-top-ORDER | cut -d: -f1; }
v=$(line_of 00-vfiod) u=$(line_of udev)
if [ -n "$v" ] && [ -n "$u" ] && [ "$v" -lt "$u" ]; then ok order-vfiod-before-udev
else not_ok order-vfiod-before-udev "$(grep -o 'init-top/[^ ]*' $host/init-top-ORDER)"; fi
expect_eq image-list "0000:01:00.0 8086 10d3 vfio-pci|0000:01:00.1 8086 293e vfio-pci" \
    "$(grep -v '^#' $host/debian-early | sort | paste -sd'|')"
check image-modules sh -c "grep -qx vfio-pci.ko $host/debian-modules &&
    grep -qx e1000e.ko $host/debian-modules"
# The dracut image (built, not booted): the list, the cmdline hook, the apply script, vfio-pci.
if grep -q '^0000:01:00.0 8086 10d3 vfio-pci$' $host/dracut-early &&
    grep -q 'usr/lib/dracut/hooks/cmdline/00-vfiod-early.sh$' $host/dracut-listing &&
    grep -q 'usr/lib/vfiod/early-apply$' $host/dracut-listing &&
    grep -q '/vfio-pci.ko' $host/dracut-listing; then ok dracut-image
else not_ok dracut-image "$(cat $host/dracut.err; grep -i vfio $host/dracut-listing)"; fi

dmesg | grep 'vfiod-early' | while read -r l; do note "$l"; done
check early-log sh -c "dmesg | grep -q 'vfiod-early: $GPU (8086:10d3): driver_override vfio-pci'"
# e1000e names each function it probes ("e1000e 0000:00:02.0: ..."): never the GPU.
if dmesg | grep -q "e1000e $GPU"; then not_ok gpu-never-e1000e "$(dmesg | grep "e1000e $GPU")"
else ok gpu-never-e1000e; fi

# The initramfs's uevent monitor (started before 00-vfiod): udevadm writes its file at exit.
pid=$(cat /run/vmtest-uevents.pid)
kill "$pid"
wait_for 10 sh -c "! kill -0 $pid"
# bind_events BDF: "DRIVER" of every kernel bind event of that function.
bind_events() {
    awk -v RS= -v f="/$1" '$0 ~ "ACTION=bind" && $0 ~ "DEVPATH=[^\n]*" f "\n" {
        if (match($0, /DRIVER=[^\n]*/)) print substr($0, RSTART + 7, RLENGTH - 7) }' \
        /run/vmtest-uevents.log | xargs
}
expect_eq monitor-saw-vfio-bind vfio-pci "$(bind_events $GPU)"
if bind_events $GPU | grep -qw e1000e; then not_ok no-e1000e-bind-event "$(bind_events $GPU)"
else ok no-e1000e-bind-event; fi
expect_eq monitor-saw-mgmt-bind e1000e "$(bind_events $MGMT)"
expect_eq vfio-at-root-start "$GPU vfio-pci|$AUDIO vfio-pci|$MGMT e1000e" \
    "$(paste -sd'|' /run/vmtest-initramfs-drivers)"
expect_eq mgmt-kept-e1000e "e1000e (null)" \
    "$(driver_of $MGMT) $(cat "$(pci_dev $MGMT)/driver_override")"

# vfiod adopts the group the initramfs bound: bound, and no journal entry (the executor records
# one before its first write, DESIGN §4; a group found bound gets none).
grp=$(group_of $GPU)
wait_for 60 systemctl is-active --quiet vfiod.service
check vfiod-active systemctl is-active --quiet vfiod.service
wait_for 30 state_is "$grp" bound
expect_eq group-bound bound "$(group_state "$grp")"
expect_eq status-json-bound bound "$(vfioctl status --json | python3 -c 'import json, sys
g = int(sys.argv[1])
print(*[x.get("state") for x in json.load(sys.stdin)["groups"] if x.get("group") == g])' "$grp")"
if [ -e "/run/vfiod/group-$grp" ]; then not_ok no-journal-write "$(cat "/run/vfiod/group-$grp")"
else ok no-journal-write; fi
errs=$(journalctl -u vfiod -p warning -q --no-pager)
if [ -z "$errs" ]; then ok no-errors; else not_ok no-errors "$errs"; fi
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done

# The apply script's refusals, on the live guest's real sysfs (they write nothing): a function
# whose ID is not the line's (a moved bus), one already on a driver, one that is not there, a
# line that is not one.
cat >/tmp/refused.list <<EOT
$NVME 1b36 ffff vfio-pci
$MGMT 8086 10d3 vfio-pci
0000:0a:00.0 8086 10d3 vfio-pci
$NVME 1b36 0010
EOT
before=$(cat "$(pci_dev $NVME)/driver_override" "$(pci_dev $MGMT)/driver_override" | xargs)
/usr/lib/vfiod/early-apply /tmp/refused.list
refusals=$(dmesg | grep 'vfiod-early:' | tail -n 4)
note "$refusals"
if echo "$refusals" | grep -q "$NVME is 0x1b36:0x0010, not 1b36:ffff: skipped" &&
    echo "$refusals" | grep -q "$MGMT is already on e1000e: left to vfiod" &&
    echo "$refusals" | grep -q "0000:0a:00.0: no such PCI function, skipped" &&
    echo "$refusals" | grep -q "not a line of ADDRESS VENDOR DEVICE DRIVER, skipped: $NVME" &&
    [ "$(cat "$(pci_dev $NVME)/driver_override" "$(pci_dev $MGMT)/driver_override" | xargs)" = \
        "$before" ]; then
    ok apply-refusals
else not_ok apply-refusals "$refusals"; fi

# The same hook on the live guest: $NVME holds a mounted filesystem, so its early entry is left
# out with a warning, and the record says so. The hook alone, as mkinitramfs runs it (its
# environment, a DESTDIR of its own): a whole `mkinitramfs -d /vmtest/initramfs-conf` took 97 s
# under TCG, the hook a few.
mkfs.ext4 -q -F /dev/nvme0n1 && mkdir -p /mnt/nvme && mount /dev/nvme0n1 /mnt/nvme
cat >>/etc/vfiod/vfiod.toml <<EOT

[[device]]
selector = "1b36:0010"
address = "$NVME"
resource_name = "vmtest/nvme"
early = true
EOT
kver=$(uname -r)
dest=/tmp/hook-destdir
mkdir -p $dest
t0=$(uptime_s)
DESTDIR=$dest version=$kver MODULESDIR=/usr/lib/modules/$kver CONFDIR=/vmtest/initramfs-conf \
    verbose=n /usr/share/initramfs-tools/hooks/vfiod 2>/tmp/rebuild.err
measure hook-guest "$(elapsed_since "$t0")"
while read -r l; do note "hook: $l"; done </tmp/rebuild.err
check rebuild-warns-mounted sh -c "grep $NVME /tmp/rebuild.err | grep -q mounted"
note "rebuilt list: $(grep -v '^#' $dest/etc/vfiod/early | paste -sd'|')"
if grep -q "^$GPU " $dest/etc/vfiod/early && ! grep -q "^$NVME " $dest/etc/vfiod/early &&
    [ -x $dest/usr/lib/vfiod/early-apply ]; then
    ok rebuild-leaves-out-nvme
else not_ok rebuild-leaves-out-nvme "$(cat $dest/etc/vfiod/early; find $dest -type f)"; fi
record=/var/lib/vfiod/initramfs-$kver.json
note "record: $(cat "$record")"
# The record: the NVMe left out as mounted, the GPU group carried, the host checked.
check rebuild-record python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
out = [l for l in r["left_out"] if l["address"] == sys.argv[2] and "mounted" in l["why"]]
carried = sorted(c["address"] for c in r["carried"])
assert out and r["host_checked"] and carried == sys.argv[3:], (out, carried)' \
    "$record" "$NVME" "$GPU" "$AUDIO"
umount /mnt/nvme
