#!/bin/bash
# vfioctl kubevirt (DESIGN §9): the KubeVirt CR fragment validates (field names and types),
# YAML and JSON say the same, output is stable, --json-patch appends and keeps a cluster's
# entries, wildcards are expanded from the host, and a config without resource_name exits 1.
# With [[mdev]] entries (DESIGN §12), on a host with mdev parents: one external mediatedDevices
# entry per type named as the host names it, the gate that turns KubeVirt's mdev handling off,
# and vfioctl doctor --kubevirt-cr on a CR with and without them, and on each bad input.
# Usage: kubevirt_test.sh VFIOCTL MKFIXTURE
set -u
VFIOCTL=$1 MKFIXTURE=$2
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: python3-yaml not installed"; exit 77; }

source "$(dirname "$0")/lib.sh"
it_setup vfiod-kubevirt
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }
kv() { "$VFIOCTL" kubevirt --root "$WORK/root" "$@"; }

# validate KIND FILE: the fragment (yaml|json) or the patch, checked against KubeVirt's types.
validate() {
    python3 - "$1" "$2" <<'PY'
import json, re, sys, yaml
kind, path = sys.argv[1], sys.argv[2]
text = open(path).read()
doc = yaml.safe_load(text) if kind == "yaml" else json.loads(text)
def check_entry(e):
    assert isinstance(e, dict), e
    assert set(e) <= {"pciVendorSelector", "resourceName", "externalResourceProvider"}, e
    assert re.fullmatch(r"[0-9A-F]{4}:[0-9A-F]{4}", e["pciVendorSelector"]), e
    assert isinstance(e["resourceName"], str) and e["resourceName"], e
    assert isinstance(e.get("externalResourceProvider", False), bool), e
if kind == "patch":
    assert isinstance(doc, list) and doc
    for op in doc:
        assert set(op) == {"op", "path", "value"} and op["op"] == "add", op
        if op["path"] == "/spec/configuration/developerConfiguration/featureGates/-":
            assert op["value"] == "HostDevices"
        else:
            assert op["path"] == "/spec/configuration/permittedHostDevices/pciHostDevices/-", op
            check_entry(op["value"])
else:
    assert set(doc) == {"spec"} and set(doc["spec"]) == {"configuration"}
    c = doc["spec"]["configuration"]
    assert set(c) == {"developerConfiguration", "permittedHostDevices"}
    assert c["developerConfiguration"] == {"featureGates": ["HostDevices"]}
    assert set(c["permittedHostDevices"]) == {"pciHostDevices"}
    for e in c["permittedHostDevices"]["pciHostDevices"]:
        check_entry(e)
PY
}
# pairs FILE: "SELECTOR=RESOURCE[+ext]" per entry of a fragment (YAML or JSON).
pairs() {
    python3 -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
for e in d["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]:
    print(e["pciVendorSelector"] + "=" + e["resourceName"] + ("+ext" if e.get("externalResourceProvider") else ""))
' "$1" | tr '\n' ' '
}

kv > "$WORK/a.yaml" 2>"$WORK/err"; check "kubevirt exits 0" 0 $?
validate yaml "$WORK/a.yaml" && pass "YAML fragment validates" || fail "YAML fragment validates" "$(cat "$WORK/a.yaml")"
check "entries in config order, upper-case hex" \
    "10DE:2331=nvidia.com/GH100_H100_PCIE 8086:1533=intel.com/I210 144D:A808=samsung.com/PM9A1 " \
    "$(pairs "$WORK/a.yaml")"
kv --yaml > "$WORK/b.yaml" 2>/dev/null
check "output is stable (and --yaml is the default)" "$(cat "$WORK/a.yaml")" "$(cat "$WORK/b.yaml")"
kv --json --external > "$WORK/a.json" 2>/dev/null; check "--json exits 0" 0 $?
validate json "$WORK/a.json" && pass "JSON fragment validates" || fail "JSON fragment validates" "$(cat "$WORK/a.json")"
check "--external marks every entry" \
    "10DE:2331=nvidia.com/GH100_H100_PCIE+ext 8086:1533=intel.com/I210+ext 144D:A808=samsung.com/PM9A1+ext " \
    "$(pairs "$WORK/a.json")"

# --json-patch appends to a cluster's lists and keeps what was there.
kv --json-patch --external > "$WORK/patch.json" 2>"$WORK/err"; check "--json-patch exits 0" 0 $?
validate patch "$WORK/patch.json" && pass "patch validates" || fail "patch validates" "$(cat "$WORK/patch.json")"
kept=$(python3 - "$WORK/patch.json" <<'PY'
import json, sys
cr = {"spec": {"configuration": {
    "developerConfiguration": {"featureGates": ["LiveMigration"]},
    "permittedHostDevices": {"pciHostDevices": [{"pciVendorSelector": "1AF4:1041", "resourceName": "x.io/nic"}]}}}}
for op in json.load(open(sys.argv[1])):
    parts = op["path"].strip("/").split("/")
    node = cr
    for p in parts[:-1]:
        node = node[p]          # RFC 6902: the parent must exist
    assert parts[-1] == "-"
    node.append(op["value"])
c = cr["spec"]["configuration"]
print(c["developerConfiguration"]["featureGates"], len(c["permittedHostDevices"]["pciHostDevices"]),
      c["permittedHostDevices"]["pciHostDevices"][0]["resourceName"])
PY
)
check "patch keeps the cluster's gate and entry" "['LiveMigration', 'HostDevices'] 4 x.io/nic" "$kept"
check_contains "patch explains its precondition" "append" "$(cat "$WORK/err")"

# A wildcard is expanded to the pairs on the host, and said so.
cat > "$WORK/wild.toml" <<'TOML'
[[device]]
selector = "10de:*"
resource_name = "nvidia.com/any"
[[device]]
selector = "1af4:*"
resource_name = "virtio.io/none-here"
[[device]]
address = "0000:03:00.0"
resource_name = "intel.com/one"
TOML
kv --config "$WORK/wild.toml" > "$WORK/wild.yaml" 2>"$WORK/err"; check "wildcard exits 0" 0 $?
check "wildcard and address expanded from the host" \
    "10DE:22A3=nvidia.com/any 10DE:2331=nvidia.com/any 8086:1533=intel.com/one " "$(pairs "$WORK/wild.yaml")"
check_contains "expansion is said on stderr" "10de:* expanded from this host to 10DE:22A3, 10DE:2331" "$(cat "$WORK/err")"
check_contains "a wildcard matching nothing is explained" "1af4:* matches no device" "$(cat "$WORK/err")"

# No resource_name anywhere: exit 1 and what to add, naming the entry.
printf '[[device]]\nselector = "10de:2331"\n' > "$WORK/none.toml"
out=$(kv --config "$WORK/none.toml" 2>&1); rc=$?
check "no resource_name exits 1" 1 "$rc"
check_contains "no resource_name says what to add" 'resource_name = "' "$out"
check_contains "no resource_name names the entry" "none.toml:1" "$out"
printf '[[device]]\nselector = "10de:zz"\n' > "$WORK/bad.toml"
kv --config "$WORK/bad.toml" >/dev/null 2>&1; check "bad config exits 2" 2 $?
kv --json --yaml >/dev/null 2>&1; check "--json with --yaml exits 2" 2 $?
"$VFIOCTL" kubevirt --offline >/dev/null 2>&1; check "--offline does not apply" 2 $?

# --- [[mdev]] entries: mediatedDevices, named from the host ---
"$MKFIXTURE" mdev-host "$WORK/mroot" || { fail "mdev fixture"; exit 1; }
cat > "$WORK/mdev.toml" <<'TOML'
[[device]]
selector = "10de:2331"
resource_name = "nvidia.com/GH100_H100_PCIE"
[[mdev]]
selector = "10de:1eb8"
type = "nvidia-222"
count = 4
resource_name = "nvidia.com/GRID_T4"
[[mdev]]
selector = "10de:1eb8"
type = "nvidia-223"
count = 2
resource_name = "nvidia.com/GRID_T4"
[[mdev]]
parent = "mtty"
type = "mtty-1"
count = 2
[[mdev]]
parent = "0000:09:00.0"
type = "nvidia-300"
count = 1
resource_name = "nvidia.com/elsewhere"
TOML
mkv() { "$VFIOCTL" kubevirt --root "$WORK/mroot" --config "$WORK/mdev.toml" "$@"; }
# mdevs FILE: "SELECTOR=RESOURCE[+ext]" per mediatedDevices entry, and the gates.
mdevs() {
    python3 -c '
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))["spec"]["configuration"]
for e in d["permittedHostDevices"]["mediatedDevices"]:
    assert set(e) <= {"mdevNameSelector", "resourceName", "externalResourceProvider"}, e
    print(e["mdevNameSelector"] + "=" + e["resourceName"] + ("+ext" if e.get("externalResourceProvider") else ""))
print(*d["developerConfiguration"]["featureGates"])
' "$1" | tr '\n' ';'
}
mkv > "$WORK/m.yaml" 2>"$WORK/err"; check "kubevirt with [[mdev]] entries exits 0" 0 $?
check "one external entry per type, its name file (else its directory), and the gate" \
    "GRID T4-1Q=nvidia.com/GRID_T4+ext;GRID T4-2Q=nvidia.com/GRID_T4+ext;nvidia-300=nvidia.com/elsewhere+ext;Single port serial=vfiod.io/mtty-1+ext;HostDevices DisableMDEVConfiguration;" \
    "$(mdevs "$WORK/m.yaml")"
check "the PCI entries are as before" "10DE:2331=nvidia.com/GH100_H100_PCIE " "$(pairs "$WORK/m.yaml")"
check_contains "the gate's versions are said" "KubeVirt v1.0 to v1.9" "$(cat "$WORK/err")"
mkv --json > "$WORK/m.json" 2>/dev/null
check "JSON says what YAML says" "$(mdevs "$WORK/m.yaml")" "$(mdevs "$WORK/m.json")"
mkv --json-patch > "$WORK/mpatch.json" 2>"$WORK/err"; check "--json-patch with mdevs exits 0" 0 $?
check_contains "the patch note names mediatedDevices" "permittedHostDevices.mediatedDevices" \
    "$(cat "$WORK/err")"
kept=$(python3 - "$WORK/mpatch.json" <<'PY'
import json, sys
cr = {"spec": {"configuration": {
    "developerConfiguration": {"featureGates": ["LiveMigration"]},
    "permittedHostDevices": {"pciHostDevices": [], "mediatedDevices": [
        {"mdevNameSelector": "GRID T4-8Q", "resourceName": "x.io/q8"}]}}}}
for op in json.load(open(sys.argv[1])):
    assert op["op"] == "add" and op["path"].endswith("/-"), op
    node = cr
    for p in op["path"].strip("/").split("/")[:-1]:
        node = node[p]
    node.append(op["value"])
c = cr["spec"]["configuration"]
print(c["developerConfiguration"]["featureGates"],
      [e["mdevNameSelector"] for e in c["permittedHostDevices"]["mediatedDevices"]])
PY
)
check "the patch keeps the cluster's gate and mediatedDevices" \
    "['LiveMigration', 'HostDevices', 'DisableMDEVConfiguration'] ['GRID T4-8Q', 'GRID T4-1Q', 'GRID T4-2Q', 'nvidia-300', 'Single port serial']" \
    "$kept"
# Only [[mdev]] entries: no PCI list and no HostDevices gate.
printf '[[mdev]]\nparent = "mtty"\ntype = "mtty-1"\ncount = 2\n' > "$WORK/mtty.toml"
"$VFIOCTL" kubevirt --root "$WORK/mroot" --config "$WORK/mtty.toml" > "$WORK/mtty.yaml" 2>/dev/null
check "mdevs only: exit 0" 0 $?
check "mdevs only: mediatedDevices and the gate, no pciHostDevices" \
    "Single port serial=vfiod.io/mtty-1+ext;DisableMDEVConfiguration;False" \
    "$(mdevs "$WORK/mtty.yaml")$(python3 -c 'import sys, yaml
print("pciHostDevices" in yaml.safe_load(open(sys.argv[1]))["spec"]["configuration"]["permittedHostDevices"])' "$WORK/mtty.yaml")"

# --- doctor --kubevirt-cr: the fragment merged into a CR passes, an empty CR fails ---
doctor() { "$VFIOCTL" doctor --root "$WORK/mroot" --config "$WORK/mtty.toml" "$@"; }
python3 - "$WORK/mtty.yaml" "$WORK/good.yaml" "$WORK/good.json" <<'PY'
import json, sys, yaml
frag = yaml.safe_load(open(sys.argv[1]))
cr = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
      "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": frag["spec"]}
yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [cr]}, open(sys.argv[2], "w"))
json.dump(cr, open(sys.argv[3], "w"), indent=4)
PY
out=$(doctor --kubevirt-cr "$WORK/good.yaml" 2>&1); rc=$?
check "doctor passes the CR vfioctl kubevirt made (List, YAML)" 0 "$rc"
check_contains "doctor says the handling is off" "[ok]   kubevirt   KubeVirt's mdev handling is off" "$out"
doctor --kubevirt-cr "$WORK/good.json" >/dev/null 2>&1; check "the same CR as JSON passes" 0 $?
printf 'apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt}\nspec:\n  configuration: {}\n' \
    > "$WORK/empty.yaml"
out=$(doctor --kubevirt-cr "$WORK/empty.yaml" 2>&1); rc=$?
check "an empty configuration fails doctor" 1 "$rc"
check_contains "the failure names the type virt-handler would remove" \
    "[FAIL] kubevirt   virt-handler would remove vfiod's mdevs of type mtty-1 (\"Single port serial\")" "$out"
doctor --kubevirt-cr "$WORK/empty.yaml" --json > "$WORK/d.json" 2>/dev/null
check "doctor --json has the check" "False False" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(*[c["ok"] for c in d["checks"] if c["name"] == "kubevirt"], d["healthy"])' "$WORK/d.json")"
doctor --json > "$WORK/d0.json" 2>/dev/null
check "without --kubevirt-cr there is no such check" "[] True" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print([c for c in d["checks"] if c["name"] == "kubevirt"], d["healthy"])' "$WORK/d0.json")"

# The shipped example CR keeps the T4's GRID T4-1Q (nvidia-222), named as the host names it.
example=$(dirname "$0")/../../deploy/kubernetes/kubevirt-cr-example.yaml
printf '[[mdev]]\nselector = "10de:1eb8"\ntype = "nvidia-222"\ncount = 1\n' > "$WORK/t4.toml"
"$VFIOCTL" doctor --root "$WORK/mroot" --config "$WORK/t4.toml" --kubevirt-cr "$example" --json \
    > "$WORK/ex.json" 2>"$WORK/err"
check "doctor reads kubevirt-cr-example.yaml (a CR and a VMI) and it keeps the vGPU" "True" \
    "$(python3 -c 'import json, sys
print(*[c["ok"] for c in json.load(open(sys.argv[1]))["checks"] if c["name"] == "kubevirt"])' \
    "$WORK/ex.json")"

# --- doctor --kubevirt-cr: bad input exits 2 with the file (and line) named, before any report ---
bad() {  # bad NAME FILE EXPECTED-PART
    local out rc
    out=$(doctor --kubevirt-cr "$2" 2>&1); rc=$?
    check "$1: exit 2" 2 "$rc"
    check_contains "$1: says why" "$3" "$out"
    case "$out" in *"[ok]"*) fail "$1: no report is printed" "$out" ;; esac
}
bad "missing file" "$WORK/nope.yaml" "$WORK/nope.yaml: no such file"
bad "a directory" "$WORK" "$WORK: cannot read: not a regular file"
mkfifo "$WORK/fifo.yaml"
bad "a FIFO (never waited on)" "$WORK/fifo.yaml" "not a regular file"
printf 'kind: KubeVirt\nspec:\n  configuration: {\n    developerConfiguration: [\n' > "$WORK/broken.yaml"
bad "malformed YAML" "$WORK/broken.yaml" "$WORK/broken.yaml:5:1: not valid YAML or JSON"
printf '{"kind": "KubeVirt", "spec": ' > "$WORK/broken.json"
bad "malformed JSON" "$WORK/broken.json" "$WORK/broken.json:1:"
printf 'apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt}\n' > "$WORK/nospec.yaml"
bad "a CR without spec" "$WORK/nospec.yaml" "$WORK/nospec.yaml:1:1: the KubeVirt object has no spec"
printf 'apiVersion: v1\nkind: ConfigMap\n' > "$WORK/cm.yaml"
bad "no KubeVirt object" "$WORK/cm.yaml" "no KubeVirt object"
head -c $((4 * 1024 * 1024 + 1)) /dev/zero | tr '\0' '#' > "$WORK/huge.yaml"
bad "a file over 4 MiB" "$WORK/huge.yaml" "larger than 4 MiB"
if [ "$(id -u)" -ne 0 ]; then
    cp "$WORK/good.yaml" "$WORK/secret.yaml"; chmod 000 "$WORK/secret.yaml"
    bad "an unreadable file" "$WORK/secret.yaml" "cannot read"
fi
"$VFIOCTL" doctor --kubevirt-cr >/dev/null 2>&1; check "--kubevirt-cr without a file exits 2" 2 $?
"$VFIOCTL" plan --kubevirt-cr "$WORK/good.yaml" >/dev/null 2>&1
check "--kubevirt-cr does not apply to plan" 2 $?

# A large CR (many mediatedDevices entries, 3.9 MiB) is read within the bound, in good time.
python3 - "$WORK/large.yaml" <<'PY'
import sys
out = ["apiVersion: kubevirt.io/v1", "kind: KubeVirt", "metadata: {name: kubevirt}", "spec:",
       "  configuration:", "    permittedHostDevices:", "      mediatedDevices:"]
size, i = 0, 0
while size < 3_900_000:
    line = ("        - {mdevNameSelector: \"GRID T4-%dQ\", resourceName: \"nvidia.com/q%d\", "
            "externalResourceProvider: true}" % (i, i))
    out.append(line); size += len(line) + 1; i += 1
out.append("        - {mdevNameSelector: \"Single port serial\", resourceName: x.io/y, "
           "externalResourceProvider: true}")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
start=$(date +%s%N)
doctor --kubevirt-cr "$WORK/large.yaml" >/dev/null 2>&1; rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
check "a 3.9 MiB CR is read and passes" 0 "$rc"
echo "# doctor --kubevirt-cr on a $(stat -c %s "$WORK/large.yaml")-byte CR: $ms ms"
[ "$ms" -lt 30000 ] && pass "a 3.9 MiB CR takes under 30 s ($ms ms)" || fail "large CR time" "$ms ms"

[ "$failures" -eq 0 ]
