#!/bin/bash
# vfioctl kubevirt (DESIGN §9): the KubeVirt CR fragment validates (field names and types),
# YAML and JSON say the same, output is stable, --json-patch appends and keeps a cluster's
# entries, wildcards are expanded from the host, and a config without resource_name exits 1.
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

[ "$failures" -eq 0 ]
