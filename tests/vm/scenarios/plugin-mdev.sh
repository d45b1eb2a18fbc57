# Scenario: both kubelet plugins serve vfiod's mediated devices on the real 6.1 kernel (issue 41,
# DESIGN §12), after device-plugin and dra-plugin in their boot (those parts leave both plugins
# stopped). vfiod makes two mbochs-small mdevs of resource vmtest/vgpu (the kernel's sample parent,
# tests/vm/mdev-samples.sh). The device plugin lists them by UUID, and Allocate answers KubeVirt's
# MDEV_PCI_RESOURCE_ variable with the UUID and the mdev's own /dev/vfio/N, which opens viable as
# QEMU opens it. The DRA plugin publishes mdev-<uuid> devices with their mdevUUID, and a prepared
# claim's metadata file yields the UUID in KubeVirt's reading order. Lowering the count to 1
# removes index 1, which both plugins withdraw (timed from the Reload call to the fake kubelet's
# list and to the API server's slice write: the goal, 1 s, is judged in bench/; the check here only
# catches a poll or a timer: 5 s), and Allocate refuses it afterwards. It leaves no mdev, no
# parent module and the configuration as it found them.
# overlay: overlays/e1000e-any
# needs: mdev-samples
# checks: mdev-ready dp-registered dp-listed dp-allocate-env dp-allocate-nodes dp-paths-exist
# checks: dp-group-viable dra-mdev-published dra-mdev-attributes dra-mdev-prepare-ok
# checks: dra-mdev-cdi-node dra-mdev-metadata-uuid dra-mdev-unprepare-ok dp-withdrawn-within-5s
# checks: dra-mdev-withdrawn-within-5s dp-withdrawn-refused plugins-no-errors
. /vmtest/lib.sh

t_begin=$(uptime_s)
RES=vmtest/vgpu
ENV=MDEV_PCI_RESOURCE_VMTEST_VGPU
D=/sys/bus/mdev/devices
KDIR=/var/lib/kubelet/device-plugins
OUT=/tmp/mdev-kubelet.out
NODE=vmtest
DRIVER=vfio.vfiod.io
API=/tmp/api
LOG=/tmp/mdev-dra-plugin.log
CLAIM=vm-vgpu
UID_=uid-vm-vgpu
dra() { vfiod-vmtest-dra "$@"; }
reload() { manager Reload >/dev/null; }
mdev_group() { basename "$(readlink "$D/$1/iommu_group")"; }
mdev_state() {
    busctl get-property org.vfiod1 "/org/vfiod1/mdev/$(echo "$1" | tr - _)" \
        org.vfiod1.MediatedDevice State 2>/dev/null | sed 's/^[a-z]* //'
}
ready2() { [ "$(mdev_state "$S0") $(mdev_state "$S1")" = '"ready" "ready"' ]; }

# vfiod's UUIDs of mbochs/mbochs-small/0 and /1 (DESIGN §12), computed with python's uuid5.
set -- $(python3 -c 'import sys, uuid
ns = uuid.uuid5(uuid.NAMESPACE_DNS, "vfiod.io")
print(*(uuid.uuid5(ns, text) for text in sys.argv[1:]))' \
    mbochs/mbochs-small/0 mbochs/mbochs-small/1)
S0=${1:-}; S1=${2:-}

cp /etc/vfiod/vfiod.toml /run/pmdev-base.toml 2>/dev/null || : >/run/pmdev-base.toml
mdev_config() {
    { cat /run/pmdev-base.toml
      printf '\n[[mdev]]\nparent = "mbochs"\ntype = "mbochs-small"\ncount = %s\n' "$1"
      printf 'resource_name = "%s"\n' "$RES"; } | write_config
}
modprobe -a vfio vfio_iommu_type1 mdev mbochs
mdev_config 2
reload
if wait_for 60 ready2; then ok mdev-ready
else not_ok mdev-ready "$(mdev_state "$S0") $(mdev_state "$S1"); mdevs: $(ls $D | xargs)"; fi
g0=$(mdev_group "$S0")
note "mdevs: $S0 group $g0, $S1 group $(mdev_group "$S1")"

# The device plugin (the installed unit) with a fake kubelet of its own, in the kubelet's
# directories (device-plugin made them earlier in the boot; this part may also run alone).
mkdir -p $KDIR /var/lib/kubelet/pod-resources
rm -f /tmp/mdev-kubelet.in; mkfifo /tmp/mdev-kubelet.in
vfiod-fake-kubelet $KDIR /var/lib/kubelet/pod-resources/kubelet.sock </tmp/mdev-kubelet.in \
    >$OUT 2>&1 &
kubelet=$!
exec 8>/tmp/mdev-kubelet.in
wait_for 10 test -S $KDIR/kubelet.sock
since=$(date '+%Y-%m-%d %H:%M:%S')
systemctl restart vfiod-device-plugin.service
registered() { grep -q "^register .* $RES " $OUT; }
if wait_for 20 registered; then ok dp-registered; else not_ok dp-registered "$(tail -5 $OUT)"; fi
last_list() { grep "^list .* $RES " $OUT | tail -1; }
listed2() { last_list | grep -q " $S0=Healthy" && last_list | grep -q " $S1=Healthy"; }
if wait_for 10 listed2; then ok dp-listed; else not_ok dp-listed "$(last_list)"; fi
note "$(last_list)"

echo "allocate $RES $S0" >&8
answer() { grep "^allocate " $OUT | tail -1 | grep .; }
wait_for 10 answer
a=$(answer)
note "$a"
case "$a" in
    "allocate ok $ENV=$S0 "*) ok dp-allocate-env ;;
    *) not_ok dp-allocate-env "$a" ;;
esac
# (/dev/iommu and /dev/vfio/devices/vfio<M> too, where the kernel has them: not 6.1.)
nodes=$(echo "$a" | tr ' ' '\n' | grep '^/dev/' |
    grep -v -e '^/dev/iommu$' -e '^/dev/vfio/devices/' | xargs)
expect_eq dp-allocate-nodes "/dev/vfio/vfio /dev/vfio/$g0" "$nodes"
missing=
for p in $(echo "$a" | tr ' ' '\n' | grep '^/dev/'); do [ -e "$p" ] || missing="$missing $p"; done
expect_eq dp-paths-exist "" "$missing"
expect_eq dp-group-viable viable "$(group_viable "/dev/vfio/$g0")"

# The DRA plugin with the fake API server, as dra-plugin runs them.
rm -rf $API
vfiod-fake-apiserver --dir $API --node $NODE >/tmp/mdev-apiserver.log 2>&1 &
apiserver=$!
wait_for 60 test -s $API/server.json || note "fake API server: $(tail -5 /tmp/mdev-apiserver.log)"
url=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' $API/server.json)
env -u INVOCATION_ID -u JOURNAL_STREAM vfiod-dra-plugin --node-name $NODE --api-server "$url" \
    --token-file $API/token --ca-file $API/ca.crt >$LOG 2>&1 &
plugin=$!
slices_have() { dra slices >/tmp/mdev-slices 2>&1 && grep -q "$1" /tmp/mdev-slices; }
slices_lack() { dra slices >/tmp/mdev-slices 2>&1 && ! grep -q "$1" /tmp/mdev-slices; }
both() { slices_have " mdev-$S0 $S0\$" && grep -q " mdev-$S1 $S1\$" /tmp/mdev-slices; }
if wait_for 60 both; then ok dra-mdev-published
else not_ok dra-mdev-published "slices: $(cat /tmp/mdev-slices); plugin: $(tail -3 $LOG)"; fi
note "slices: $(cat /tmp/mdev-slices | tr '\n' ';')"
# Its attributes as published, never a pciBusID (that would name the parent).
attrs=$(dra attributes "mdev-$S0" 2>&1)
note "mdev-$S0: $attrs"
case "$attrs" in
    *"mdevUUID=$S0"*"type=mbochs-small"*) case "$attrs" in
        *pciBusID*) not_ok dra-mdev-attributes "a pciBusID: $attrs" ;;
        *) ok dra-mdev-attributes ;; esac ;;
    *) not_ok dra-mdev-attributes "$attrs" ;;
esac

dra claim $CLAIM $UID_ vgpu "mdev-$S0"
vfiod-fake-dra-kubelet prepare /var/lib/kubelet/plugins/$DRIVER/dra.sock default/$CLAIM/$UID_ \
    >/tmp/mdev-prepare.json 2>&1
if ids=$(dra answer /tmp/mdev-prepare.json $UID_ "mdev-$S0" 2>&1) && [ -n "$ids" ]; then
    ok dra-mdev-prepare-ok
else not_ok dra-mdev-prepare-ok "$ids; $(cat /tmp/mdev-prepare.json)"; fi
id=$(echo "$ids" | head -1)
edits=$(dra cdi "$id" 2>&1)
note "CDI $id: $edits"
if echo "$edits" | grep -qx "node /dev/vfio/$g0"; then ok dra-mdev-cdi-node
else not_ok dra-mdev-cdi-node "want /dev/vfio/$g0: $edits"; fi
md=$(dra kubevirt "$id" $CLAIM vgpu 2>&1)
note "metadata: $md"
expect_eq dra-mdev-metadata-uuid "$S0" "${md%% *}"
vfiod-fake-dra-kubelet unprepare /var/lib/kubelet/plugins/$DRIVER/dra.sock \
    default/$CLAIM/$UID_ >/tmp/mdev-unprepare.json 2>&1
check dra-mdev-unprepare-ok dra answer /tmp/mdev-unprepare.json $UID_

# count 2 -> 1: index 1 goes, and both plugins withdraw it. Timed from the Reload call.
mdev_config 1
t_reload=$(now_s)
reload
# The first list after the Reload without S1 (the fake kubelet's clock is the guest's).
dp_gone_time() {
    awk -v t0="$t_reload" -v id=" $S1=" -v res=" $RES " \
        '$1 == "list" && $2 > t0 && index($0, res) && !index($0, id) { print $2; found = 1; exit }
         END { exit !found }' $OUT
}
if wait_for 10 dp_gone_time; then
    latency=$(awk -v a="$t_reload" -v b="$(dp_gone_time)" 'BEGIN { printf "%.3f", b - a }')
    measure dp-reload-to-withdrawn "$latency"
    check dp-withdrawn-within-5s awk -v l="$latency" 'BEGIN { exit !(l >= 0 && l <= 5.0) }'
else not_ok dp-withdrawn-within-5s "$(last_list)"; fi
gone() { slices_lack " mdev-$S1 "; }
if wait_for 10 gone && t_gone=$(dra withdrawn "$t_reload" "mdev-$S1"); then
    latency=$(awk -v a="$t_reload" -v b="$t_gone" 'BEGIN { printf "%.3f", b - a }')
    measure dra-reload-to-withdrawn "$latency"
    check dra-mdev-withdrawn-within-5s awk -v l="$latency" 'BEGIN { exit !(l >= 0 && l <= 5.0) }'
else not_ok dra-mdev-withdrawn-within-5s "slices: $(cat /tmp/mdev-slices); $(tail -3 $LOG)"; fi
echo "allocate $RES $S1" >&8
refused() { answer | grep -q "^allocate error .*$S1"; }
if wait_for 10 refused; then ok dp-withdrawn-refused
else not_ok dp-withdrawn-refused "$(answer)"; fi
note "$(answer)"

# (The refusal of the withdrawn mdev's Allocate above is the one warning expected.)
errs=$(journalctl -u vfiod-device-plugin -p warning -q --no-pager --since "$since" |
    grep -v "Allocate refused: .*$S1")
errs="$errs$(grep -E '^[0-9-]+ [0-9:.]+ (warning|error|critical) ' $LOG)"
expect_eq plugins-no-errors "" "$errs"

# As found: the plugins stopped, the configuration without [[mdev]], no mdev, no parent module.
kill $plugin $apiserver $kubelet 2>/dev/null
wait $plugin $apiserver $kubelet 2>/dev/null
exec 8>&-
systemctl stop vfiod-device-plugin.service
cp /run/pmdev-base.toml /etc/vfiod/vfiod.toml
reload
for m in "$D"/*; do [ -e "$m/remove" ] && echo 1 >"$m/remove"; done
modprobe -r mbochs
measure plugin-mdev-guest-seconds "$(elapsed_since "$t_begin")"
