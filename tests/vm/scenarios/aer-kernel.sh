# What Debian's 6.1 kernel sends for each kind of PCIe error, on the two-function group behind
# root port rp1: the signals of device health (docs/DESIGN.md §13), recorded as assertions. The
# kernel's aer_inject sends each error through the AER driver as if the port had received it, from
# $GPU; vfiod-aer-inject also records the kernel's uevents (no udevadm here).
# topology: default
# The boot's SR-IOV PF (kernel-facts) is left alone here.
# nvme-sriov: yes
# checks: aer-files-on-gpu audio-no-aer-capability inject-refused-exit-1
# With the host drivers (e1000e has error handlers, snd_hda_intel none): a non-fatal error.
# checks: host-nonfatal-uevents host-nonfatal-counted host-drivers-kept
# Both functions on vfio-pci through driver_override, as vfiod binds them:
# checks: vfio-bound cor-counted cor-rxerr-counted cor-port-counted cor-no-uevent
# checks: nonfatal-uevents nonfatal-counted nonfatal-cmplto-counted nonfatal-fatal-unmoved
# checks: nonfatal-port-counted nonfatal-drivers-kept
# checks: uesvrt-dlp-fatal fatal-uevents fatal-counters-unmoved fatal-port-counted
# checks: fatal-config-reads fatal-drivers-kept
. /payload/lib.sh

modprobe -a e1000e snd-hda-intel vfio-pci aer_inject
PORT=0000:00:03.0
LOG=/tmp/aer-uevents

# total BDF KIND: the TOTAL_ line of aer_dev_KIND (correctable, nonfatal, fatal); count BDF KIND
# NAME: that file's line for one error bit, e.g. RxErr.
total() { awk '/^TOTAL_/ { print $2 }' "$(pci_dev "$1")/aer_dev_$2"; }
count() { awk -v n="$3" '$1 == n { print $2 }' "$(pci_dev "$1")/aer_dev_$2"; }
port_total() { cat "$(pci_dev $PORT)/aer_rootport_total_err_$1"; }
# The PCI uevents for the port and the functions below it after line $1 of the log, one word each:
# BDF:ACTION:ERROR_EVENT:DEVICE_ONLINE:DRIVER ("-" for a key the event lacks).
events_since() {
    tail -n +$(($1 + 1)) "$LOG" | awk -v port=$PORT '
        { act = ""; path = ""; sub_ = ""; ev = "-"; on = "-"; drv = "-"
          for (i = 2; i <= NF; i++) {
              k = substr($i, 1, index($i, "=") - 1); v = substr($i, index($i, "=") + 1)
              if (k == "ACTION") act = v; else if (k == "DEVPATH") path = v
              else if (k == "SUBSYSTEM") sub_ = v; else if (k == "ERROR_EVENT") ev = v
              else if (k == "DEVICE_ONLINE") on = v; else if (k == "DRIVER") drv = v }
          n = split(path, p, "/")
          if (sub_ == "pci" && index(path, "/" port))
              print p[n] ":" act ":" ev ":" on ":" drv }' | xargs
}
# Any uevent at all (a netdev's too) under the port after line $1.
any_since() { tail -n +$(($1 + 1)) "$LOG" | grep "DEVPATH=[^ ]*/$PORT" | xargs; }
lines() { wc -l <"$LOG"; }
# has_events N PREFIX...: every PREFIX (e.g. BDF:change:FAILED_RECOVERY) begins a word of
# events_since N.
has_events() {
    _got=" $(events_since "$1") "; shift
    for _w; do case $_got in *" $_w:"*) ;; *) return 1 ;; esac; done
}
# inject ARGS...: injects, keeps the time of the write in $injected_at.
inject() {
    _out=$(vfiod-aer-inject inject $GPU "$@") || { note "inject $*: failed"; return 1; }
    injected_at=${_out%% *}
}
# measure_since NAME N EVENT: time from the last injection to the last uevent with EVENT after N.
measure_since() {
    _t=$(tail -n +$(($2 + 1)) "$LOG" |
        awk -v e="ERROR_EVENT=$3" 'index($0, e) { t = $1 } END { print t }')
    [ -n "$_t" ] &&
        measure "$1" "$(awk -v a="$injected_at" -v b="$_t" 'BEGIN { printf "%.3f", b - a }')"
}
# recover LABEL SECONDS EVENT ARGS...: injects ARGS into $GPU, waits until both functions got
# ERROR_EVENT=EVENT, gives a stray event 0.2 s more, then notes the events in $got and times the
# last BEGIN_RECOVERY (aer-LABEL-begin) and the last EVENT (aer-LABEL-end).
recover() {
    _label=$1 _secs=$2 _event=$3; shift 3
    _n=$(lines)
    inject "$@"
    wait_for "$_secs" has_events "$_n" "$GPU:change:$_event" "$AUDIO:change:$_event"
    sleep 0.2
    got=$(events_since "$_n")
    note "$_label: $got"
    measure_since "aer-$_label-begin" "$_n" BEGIN_RECOVERY
    measure_since "aer-$_label-end" "$_n" "$_event"
}
# cfg_dword BDF OFFSET: a config-space dword in hex, read live from the device (not cached).
cfg_dword() { od -An -tx4 -j "$2" -N4 "$(pci_dev "$1")/config" | tr -d ' '; }
# aer_cap BDF: the offset of the AER extended capability (ID 1), empty without one.
aer_cap() {
    _off=256 _i=0
    while [ "$_off" -ge 256 ] && [ $_i -lt 64 ]; do
        _h=$((0x$(cfg_dword "$1" $_off)))
        [ $((_h & 0xffff)) -eq 1 ] && { echo $_off; return; }
        _off=$(((_h >> 20) & 0xffc)) _i=$((_i + 1))
    done
}

vfiod-aer-inject listen 240 >"$LOG" 2>&1 &
listener=$!
wait_for 10 grep -q '^listening' "$LOG" || note "the uevent listener did not start: $(cat "$LOG")"

check aer-files-on-gpu test -r "$(pci_dev $GPU)/aer_dev_correctable"
# QEMU's ich9-intel-hda has no AER capability: no aer_dev_* files and no injection (vfiod's
# "unknown"); the kernel's recovery still reaches it through the port.
if [ -z "$(aer_cap $AUDIO)" ] && ! [ -e "$(pci_dev $AUDIO)/aer_dev_correctable" ]; then
    ok audio-no-aer-capability
else
    not_ok audio-no-aer-capability \
        "AER at '$(aer_cap $AUDIO)'; $(ls "$(pci_dev $AUDIO)" | grep aer)"
fi
vfiod-aer-inject inject $AUDIO --cor 1 2>/tmp/aer-err; rc=$?
note "inject into $AUDIO: exit $rc: $(cat /tmp/aer-err)"
expect_eq inject-refused-exit-1 1 $rc

# Host drivers (as kernel-facts leaves them): e1000e asks for a reset, snd_hda_intel has no
# error_detected, so the kernel gives the whole recovery up (err.c's NO_AER_DRIVER), sends no
# BEGIN_RECOVERY to the function without a handler, and FAILED_RECOVERY to both.
before=$(total $GPU nonfatal)
recover host-nonfatal 10 FAILED_RECOVERY --uncor 0x4000
expect_eq host-nonfatal-uevents "$GPU:change:BEGIN_RECOVERY:0:e1000e \
$GPU:change:FAILED_RECOVERY:0:e1000e $AUDIO:change:FAILED_RECOVERY:0:snd_hda_intel" "$got"
expect_eq host-nonfatal-counted $((before + 1)) "$(total $GPU nonfatal)"
expect_eq host-drivers-kept "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"

pci_move $GPU vfio-pci
pci_move $AUDIO vfio-pci
expect_eq vfio-bound "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"

# Correctable (RxErr): counted on the function and the port, no uevent at all.
n=$(lines); before=$(total $GPU correctable); rx=$(count $GPU correctable RxErr)
port=$(port_total cor)
inject --cor 0x1
cor_seen() { [ "$(total $GPU correctable)" -gt "$before" ]; }
wait_for 10 cor_seen
expect_eq cor-counted $((before + 1)) "$(total $GPU correctable)"
expect_eq cor-rxerr-counted $((rx + 1)) "$(count $GPU correctable RxErr)"
expect_eq cor-port-counted $((port + 1)) "$(port_total cor)"
sleep 0.5
expect_eq cor-no-uevent "" "$(any_since "$n")"

# Non-fatal (completion timeout): vfio-pci's error_detected says it can recover, so every
# function below the port gets BEGIN_RECOVERY, then SUCCESSFUL_RECOVERY.
before=$(total $GPU nonfatal); fatal=$(total $GPU fatal)
cto=$(count $GPU nonfatal CmpltTO); port=$(port_total nonfatal)
recover nonfatal 10 SUCCESSFUL_RECOVERY --uncor 0x4000
expect_eq nonfatal-uevents "$GPU:change:BEGIN_RECOVERY:0:vfio-pci \
$AUDIO:change:BEGIN_RECOVERY:0:vfio-pci $GPU:change:SUCCESSFUL_RECOVERY:1:vfio-pci \
$AUDIO:change:SUCCESSFUL_RECOVERY:1:vfio-pci" "$got"
expect_eq nonfatal-counted $((before + 1)) "$(total $GPU nonfatal)"
expect_eq nonfatal-cmplto-counted $((cto + 1)) "$(count $GPU nonfatal CmpltTO)"
expect_eq nonfatal-fatal-unmoved "$fatal" "$(total $GPU fatal)"
expect_eq nonfatal-port-counted $((port + 1)) "$(port_total nonfatal)"
expect_eq nonfatal-drivers-kept "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"

# Fatal (data link protocol error, fatal by the function's own severity register): every function
# is told the channel is frozen (BEGIN_RECOVERY), then the port's link is reset. Here that reset
# fails (QEMU's port never shows Data Link Layer Link Active again within the kernel's wait), so
# FAILED_RECOVERY with DEVICE_ONLINE=0 to both; a port whose link comes back would recover. The
# endpoint's status is not read for a fatal error (its link may be down): its counters stay, and
# only the port's total moves.
aer=$(aer_cap $GPU)
sev=$((0x$(cfg_dword $GPU $((aer + 12)))))
note "UESVRT of $GPU: $(printf '0x%08x' $sev)"
check uesvrt-dlp-fatal test $((sev & 0x10)) -ne 0
nf=$(total $GPU nonfatal); fatal=$(total $GPU fatal); port=$(port_total fatal)
recover fatal 15 FAILED_RECOVERY --uncor 0x10
expect_eq fatal-uevents "$GPU:change:BEGIN_RECOVERY:0:vfio-pci \
$AUDIO:change:BEGIN_RECOVERY:0:vfio-pci $GPU:change:FAILED_RECOVERY:0:vfio-pci \
$AUDIO:change:FAILED_RECOVERY:0:vfio-pci" "$got"
expect_eq fatal-counters-unmoved "$nf $fatal" "$(total $GPU nonfatal) $(total $GPU fatal)"
expect_eq fatal-port-counted $((port + 1)) "$(port_total fatal)"
# aer_inject fakes only the AER registers: the emulated function is alive, so its live config
# still reads the cached vendor (a real dead function reads all ones there; §13).
live=$(od -An -tx2 -N2 "$(pci_dev $GPU)/config" | tr -d ' ')
note "after the fatal error: config vendor $live, cached vendor $(cat "$(pci_dev $GPU)/vendor")"
expect_eq fatal-config-reads "0x$live" "$(cat "$(pci_dev $GPU)/vendor")"
expect_eq fatal-drivers-kept "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"
note "$(dmesg | grep -E 'AER|aer_inject|pcieport' | tail -n 12)"

kill $listener
