# Scenario: vfiod-dra-plugin on the real kernel, after device-plugin in its boot (that part leaves
# the GPU group bound and its own plugin stopped). The fake API server (tests/support/
# fake_apiserver.py, as vfiod-fake-apiserver; python3 and openssl come with the host's /) and the
# fake DRA kubelet stand in for the cluster: the GPU function is published in the node's pool,
# a claim allocated it is prepared, the CDI spec names the group's /dev/vfio/N (viable, opened as
# QEMU opens it) and mounts the metadata file where KubeVirt's pkg/dra finds the pciBusID,
# Unprepare removes both, and `vfioctl release` withdraws the device. The latency of that last one
# is measured from the release call to the API server's write; its goal (1 s) is judged by
# benchmarks, and the check only catches a regression to a poll or a timer: 5 s.
# overlay: overlays/e1000e-any
# checks: dra-published dra-registered dra-prepare-ok dra-cdi-group-node dra-group-viable
# checks: dra-metadata-pciBusID dra-unprepare-clean dra-release-withdrawn-within-5s
# checks: dra-plugin-no-errors
. /vmtest/lib.sh

NODE=vmtest
DRIVER=vfio.vfiod.io
DEV=pci-0000-01-00-0
API=/tmp/api
LOG=/tmp/dra-plugin.log
REG=/var/lib/kubelet/plugins_registry/$DRIVER-reg.sock
DRA=/var/lib/kubelet/plugins/$DRIVER/dra.sock
CLAIM=vm-gpu
UID_=uid-vm-gpu
grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
note "GPU group $grp: $(group_state "$grp"), $(driver_of $GPU)"

# The JSON work (the API server's objects, the CDI spec, the metadata file): tests/vm/vmtest_dra.py.
dra() { vfiod-vmtest-dra "$@"; }

# The cluster: the fake API server (a Node "vmtest"), then the plugin as a plain process on the
# default kubelet directories, logging to a file (not to the journal, as it would under this
# unit's INVOCATION_ID).
rm -rf $API
vfiod-fake-apiserver --dir $API --node $NODE >/tmp/apiserver.log 2>&1 &
apiserver=$!
if ! wait_for 60 test -s $API/server.json; then note "fake API server: $(tail -5 /tmp/apiserver.log)"; fi
url=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' $API/server.json)
note "fake API server at $url"
mkdir -p /var/lib/kubelet/plugins_registry
t_start=$(uptime_s)
env -u INVOCATION_ID -u JOURNAL_STREAM vfiod-dra-plugin --node-name $NODE --api-server "$url" \
    --token-file $API/token --ca-file $API/ca.crt >$LOG 2>&1 &
plugin=$!

# slices_have PATTERN: the node's slices (saved in /tmp/dra-slices) have a line matching PATTERN;
# slices_lack PATTERN: they were listed, and none matches.
slices_have() { dra slices >/tmp/dra-slices 2>&1 && grep -q "$1" /tmp/dra-slices; }
slices_lack() { dra slices >/tmp/dra-slices 2>&1 && ! grep -q "$1" /tmp/dra-slices; }
published() { slices_have "^$DRIVER $NODE $DEV $GPU\$"; }
if wait_for 60 published; then
    measure dra-start-to-published "$(elapsed_since "$t_start")"
    s=$(cat /tmp/dra-slices)
    note "slices: $s"
    if echo "$s" | grep -q -e " pci-$(echo $MGMT | tr ':.' '--') " -e " $MGMT\$"; then
        not_ok dra-published "the management NIC is published: $s"
    else ok dra-published; fi
else
    not_ok dra-published "slices: $(cat /tmp/dra-slices); plugin: $(tail -3 $LOG)"
fi

# The kubelet's plugin watcher: GetInfo on the registration socket, the DRA socket dialled.
reg() { vfiod-fake-dra-kubelet --timeout 5 register $REG >/tmp/dra-reg.json 2>&1; }
if wait_for 30 reg && grep -q "\"dra_socket\":\"$DRA\"" /tmp/dra-reg.json; then ok dra-registered
else not_ok dra-registered "$(cat /tmp/dra-reg.json)"; fi

dra claim $CLAIM $UID_ gpu $DEV
t0=$(uptime_s)
vfiod-fake-dra-kubelet prepare $DRA default/$CLAIM/$UID_ >/tmp/dra-prepare.json 2>&1
measure dra-prepare "$(elapsed_since "$t0")"
note "prepare: $(cat /tmp/dra-prepare.json)"
if ids=$(dra answer /tmp/dra-prepare.json $UID_ $DEV 2>&1) && [ -n "$ids" ]; then ok dra-prepare-ok
else not_ok dra-prepare-ok "$ids"; fi

id=$(echo "$ids" | head -1)
edits=$(dra cdi "$id" 2>&1)
note "CDI $id: $edits"
spec=$(echo "$edits" | sed -n 's/^spec \([^ ]*\) .*/\1/p')
if echo "$edits" | grep -qx "node /dev/vfio/$grp" && [ -c /dev/vfio/$grp ]; then ok dra-cdi-group-node
else not_ok dra-cdi-group-node "want /dev/vfio/$grp (exists: $(ls /dev/vfio | xargs)): $edits"; fi
expect_eq dra-group-viable viable "$(group_viable /dev/vfio/$grp)"

md=$(dra kubevirt "$id" $CLAIM gpu 2>&1)
note "metadata: $md"
expect_eq dra-metadata-pciBusID $GPU "${md%% *}"
md_file=${md#* }

vfiod-fake-dra-kubelet unprepare $DRA default/$CLAIM/$UID_ >/tmp/dra-unprepare.json 2>&1
note "unprepare: $(cat /tmp/dra-unprepare.json)"
left=
[ -n "$spec" ] && [ -e "$spec" ] && left="$left $spec"
[ -n "$md_file" ] && [ -e "$md_file" ] && left="$left $md_file"
if dra answer /tmp/dra-unprepare.json $UID_ && [ -n "$spec" ] && [ -n "$md_file" ] && [ -z "$left" ]
then ok dra-unprepare-clean
else not_ok dra-unprepare-clean "left:$left; spec '$spec', metadata '$md_file'"; fi

# Timed from the release call (an upper bound: it includes vfiod's own unbind) to the API
# server's write that leaves the device out.
t_release=$(now_s)
vfioctl release $GPU >/dev/null 2>&1
gone() { slices_lack " $DEV "; }
if wait_for 10 gone && t_gone=$(dra withdrawn "$t_release" $DEV); then
    latency=$(awk -v a="$t_release" -v b="$t_gone" 'BEGIN { printf "%.3f", b - a }')
    measure dra-release-call-to-withdrawn "$latency"
    check dra-release-withdrawn-within-5s awk -v l="$latency" 'BEGIN { exit !(l <= 5.0) }'
else
    not_ok dra-release-withdrawn-within-5s \
        "state $(group_state "$grp"); slices: $(cat /tmp/dra-slices); $(tail -3 $LOG)"
fi
# Tidy: the group bound again, as the boot had it, and published again.
vfioctl bind $GPU >/dev/null 2>&1
wait_for 30 state_is "$grp" bound
if wait_for 10 published; then note "bound and published again"
else note "after bind: state $(group_state "$grp"), slices: $(cat /tmp/dra-slices)"; fi
dra writes "$t_release" | while read -r line; do note "slice write after the release: $line"; done

errs=$(grep -E '^[0-9-]+ [0-9:.]+ (warning|error|critical) ' $LOG)
expect_eq dra-plugin-no-errors "" "$errs"
kill $plugin
wait $plugin
note "plugin exit status on SIGTERM: $?"
kill $apiserver
wait $apiserver
while read -r line; do note "plugin: $line"; done <$LOG
