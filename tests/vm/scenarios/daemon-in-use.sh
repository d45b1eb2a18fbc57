# Scenario 4, in use by a VM: while a process holds /dev/vfio/N, Release is refused (in-use-vfio)
# and a restart of vfiod writes nothing: the group stays on vfio-pci and the held fd stays valid
# (VFIO_GROUP_GET_STATUS still answers "viable").
# overlay: overlays/e1000e-any
# checks: bound-at-boot holder-open holder-viable release-refused release-wrote-nothing
# checks: restart-active restart-still-bound restart-no-write holder-alive holder-still-viable
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-boot bound "$(group_state "$grp")"

# The "VM": holds the group fd and answers status queries (VFIO_GROUP_GET_STATUS = _IO(';', 103)).
python3 - "$grp" <<'PY' &
import fcntl, os, struct, sys, time
fd = os.open("/dev/vfio/" + sys.argv[1], os.O_RDWR)
open("/run/holder.ready", "w").close()
while True:
    if os.path.exists("/run/holder.ask"):
        os.remove("/run/holder.ask")
        try:
            argsz, flags = struct.unpack("II", fcntl.ioctl(fd, 0x3B67, struct.pack("II", 8, 0)))
            answer = "viable" if flags & 1 else "not-viable"
        except OSError as e:
            answer = "error-%d" % e.errno
        with open("/run/holder.answer.tmp", "w") as f:
            f.write(answer)
        os.rename("/run/holder.answer.tmp", "/run/holder.answer")
    time.sleep(0.05)
PY
holder=$!
ask_holder() {
    rm -f /run/holder.answer; touch /run/holder.ask
    wait_for 10 test -e /run/holder.answer && cat /run/holder.answer
}
wait_for 20 test -e /run/holder.ready
check holder-open test -e /run/holder.ready
expect_eq holder-viable viable "$(ask_holder)"

out=$(manager Release s $GPU 2>&1)
note "Release: $out"
check release-refused sh -c "echo '$out' | grep -q 'in-use-vfio'"
expect_eq release-wrote-nothing "vfio-pci vfio-pci bound" \
    "$(driver_of $GPU) $(driver_of $AUDIO) $(group_state "$grp")"

mark_journal /tmp/cursor
systemctl restart vfiod.service
check restart-active systemctl is-active --quiet vfiod.service
wait_for 30 state_is "$grp" bound
expect_eq restart-still-bound "bound vfio-pci vfio-pci" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
# Every write vfiod makes is announced ("pending: binding ...", "writing ...", "Release").
writes=$(journal_since /tmp/cursor | grep -i -E 'pending|writing|binding|unbind|releas')
if [ -z "$writes" ]; then ok restart-no-write; else not_ok restart-no-write "$writes"; fi
check holder-alive kill -0 $holder
expect_eq holder-still-viable viable "$(ask_holder)"
journal_since /tmp/cursor -o short-monotonic | while read -r line; do note "$line"; done
kill $holder
