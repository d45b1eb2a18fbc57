#!/usr/bin/env python3
# The JSON work of the VM scenarios that drive vfiod-dra-plugin (dra-plugin, plugin-mdev), as the
# guest program vfiod-vmtest-dra: the fake API server's objects, the CDI spec, the metadata file.
#   vfiod-vmtest-dra slices | attributes DEVICE | claim NAME UID REQUEST DEVICE |
#                    answer FILE UID [DEVICE] | cdi CDI_ID | kubevirt CDI_ID CLAIM REQUEST |
#                    withdrawn T0 DEVICE | writes T0 | taints DEVICE | tainted T0 DEVICE |
#                    stream FILE DEVICE HEALTH [T0]
import json, os, ssl, sys, urllib.parse, urllib.request

API, CDI_DIR, DRIVER, NODE = "/tmp/api", "/var/run/cdi", "vfio.vfiod.io", "vmtest"
PCI = "resource.kubernetes.io/pciBusID"
MDEV_UUID = "mdevUUID"
METADATA_BASE = "/var/run/kubernetes.io/dra-device-attributes"


def api(method, path, body=None):
    srv = json.load(open(API + "/server.json"))
    ctx = ssl.create_default_context(cafile=srv["ca_file"])
    token = open(srv["token_file"]).read().strip()
    req = urllib.request.Request(srv["url"] + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        return json.loads(r.read() or b"null")


def slices():
    """One line per published device of the node's slices: DRIVER POOL NAME ID, ID the pciBusID
    of a function, the mdevUUID of an mdev."""
    sel = urllib.parse.quote("spec.nodeName=" + NODE)
    for s in api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + sel)["items"]:
        spec = s["spec"]
        for d in spec.get("devices", []):
            attrs = d.get("attributes", {})
            ident = attrs.get(MDEV_UUID, attrs.get(PCI, {})).get("string", "-")
            print(spec.get("driver"), spec.get("pool", {}).get("name"), d["name"], ident)


def attributes(device):
    """The attributes of DEVICE in the node's slices, one NAME=VALUE a line."""
    sel = urllib.parse.quote("spec.nodeName=" + NODE)
    for s in api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + sel)["items"]:
        for d in s["spec"].get("devices", []):
            if d["name"] == device:
                for name, value in sorted(d.get("attributes", {}).items()):
                    print(f"{name}={next(iter(value.values()), '')}")
                return
    sys.exit(f"no device {device} in the node's slices")


def claim(name, uid, request, device):
    """A ResourceClaim allocated DEVICE of the node's pool (test_dra_scenarios.cpp's shape)."""
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    api("POST", "/_fake/claims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": request, "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": request, "driver": DRIVER, "pool": NODE, "device": device}]},
            "nodeSelector": selector},
            "reservedFor": [{"resource": "pods", "name": "virt-launcher-" + name,
                             "uid": uid + "-pod"}]}})


def answer(path, uid, device=None):
    """The fake kubelet's answer for UID, without errors (and, for Prepare, exactly DEVICE of
    the node's pool): its CDI IDs, one a line. Exits 1 otherwise."""
    a = json.load(open(path))
    c = a["claims"].get(uid)
    if a["code"] != 0 or c is None or c["error"]:
        sys.exit(f"code {a['code']} {a['message']!r}; claim: {c}")
    if device is None:
        return
    devs = [(d["pool_name"], d["device_name"]) for d in c["devices"]]
    if devs != [(NODE, device)]:
        sys.exit(f"devices {devs}")
    for d in c["devices"]:
        for i in d["cdi_device_ids"]:
            print(i)


def cdi_lines(cdi_id):
    """The CDI spec naming CDI_ID: "spec FILE VERSION", "node PATH", "mount HOSTPATH CONTAINERPATH"
    (the device's edits and the spec's own)."""
    kind, _, name = cdi_id.partition("=")
    for f in sorted(os.listdir(CDI_DIR)):
        spec = json.load(open(os.path.join(CDI_DIR, f)))
        if spec.get("kind") != kind:
            continue
        for d in spec.get("devices", []):
            if d.get("name") != name:
                continue
            out = [f"spec {os.path.join(CDI_DIR, f)} {spec.get('cdiVersion')}"]
            for edits in (d.get("containerEdits", {}), spec.get("containerEdits", {})):
                out += ["node " + n.get("hostPath", n["path"]) for n in edits.get("deviceNodes", [])]
                out += [f"mount {m['hostPath']} {m['containerPath']}" for m in edits.get("mounts", [])]
            return out
    sys.exit(f"no CDI spec in {CDI_DIR} names {cdi_id}: {os.listdir(CDI_DIR)}")


def cdi(cdi_id):
    print("\n".join(cdi_lines(cdi_id)))


def kubevirt(cdi_id, claim_name, request):
    """KubeVirt's pkg/dra (GetPCIAddressForClaim): in the container, exactly one *-metadata.json
    in resourceclaims/CLAIM/REQUEST, read as a JSON stream whose first object of a known
    apiVersion counts, the request by name with exactly one device, its mdevUUID string if it has
    one (a vGPU), else its pciBusID string. The container is the spec's mounts: each container
    path read from its host path."""
    mounts = {l.split()[2]: l.split()[1] for l in cdi_lines(cdi_id) if l.startswith("mount ")}
    want = f"{METADATA_BASE}/resourceclaims/{claim_name}/{request}"
    found = [c for c in mounts if os.path.dirname(c) == want and c.endswith("-metadata.json")]
    if len(found) != 1:
        sys.exit(f"{len(found)} metadata files in {want} (KubeVirt wants 1): {mounts}")
    text, dec, at = open(mounts[found[0]]).read(), json.JSONDecoder(), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            sys.exit("no metadata object of a known version")
        obj, at = dec.raw_decode(text, at)
        if obj.get("apiVersion") != "metadata.resource.k8s.io/v1alpha1":
            continue
        for req in obj.get("requests", []):
            if req.get("name") == request:
                if len(req.get("devices", [])) != 1:
                    sys.exit(f"request {request}: {len(req.get('devices', []))} devices")
                attrs = req["devices"][0]["attributes"]
                print(attrs.get(MDEV_UUID, attrs.get(PCI, {})).get("string"), mounts[found[0]])
                return
        sys.exit(f"request {request} not in {mounts[found[0]]}")


def withdrawn(t0, device):
    """The time of the API server's first slice write after T0 that leaves DEVICE out."""
    for line in open(API + "/writes.jsonl"):
        w = json.loads(line)
        if w["time"] <= float(t0) or "/resourceslices" not in w["path"] or w["status"] >= 300:
            continue
        body = w.get("body")
        if w["method"] == "DELETE" or (isinstance(body, dict) and device not in
                                       [d.get("name") for d in body.get("spec", {}).get("devices", [])]):
            print(f"{w['time']:.3f}")
            return
    sys.exit(1)


def writes(t0):
    """The slice writes after T0, one a line: seconds after T0, method, name, status, devices."""
    for line in open(API + "/writes.jsonl"):
        w = json.loads(line)
        if w["time"] > float(t0) and "/resourceslices" in w["path"]:
            body = w.get("body")
            devs = [d.get("name") for d in body.get("spec", {}).get("devices", [])] \
                if isinstance(body, dict) else []
            print(f"+{w['time'] - float(t0):.3f} {w['method']} {w['path'].rsplit('/', 1)[-1]} "
                  f"{w['status']} {','.join(devs) or '-'}")


def node_devices():
    sel = urllib.parse.quote("spec.nodeName=" + NODE)
    for s in api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=" + sel)["items"]:
        yield from s["spec"].get("devices", [])


def taints(device):
    """The taints of DEVICE in the node's slices, one KEY=VALUE:EFFECT a line (none: nothing)."""
    for d in node_devices():
        if d["name"] == device:
            for t in d.get("taints", []):
                print(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}")
            return
    sys.exit(f"no device {device} in the node's slices")


def tainted(t0, device):
    """The time of the API server's first slice write after T0 that gives DEVICE a taint."""
    for line in open(API + "/writes.jsonl"):
        w = json.loads(line)
        body = w.get("body")
        if w["time"] <= float(t0) or "/resourceslices" not in w["path"] or w["status"] >= 300 \
                or not isinstance(body, dict):
            continue
        for d in body.get("spec", {}).get("devices", []):
            if d.get("name") == device and d.get("taints"):
                print(f"{w['time']:.3f}")
                return
    sys.exit(1)


def stream(path, device, health, t0="0"):
    """The time (unix seconds) of the first message of the fake kubelet's health stream (its
    watch-health lines in PATH) received after T0 in which DEVICE's health is HEALTH."""
    for line in open(path):
        try:
            m = json.loads(line)
        except ValueError:
            continue
        at = m.get("received_ms", 0) / 1000.0
        if at > float(t0) and m.get("devices", {}).get(f"{NODE}/{device}", {}).get("health") == health:
            print(f"{at:.3f}")
            return
    sys.exit(1)


cmd, args = sys.argv[1], sys.argv[2:]
{"slices": slices, "attributes": attributes, "claim": claim, "answer": answer, "cdi": cdi, "kubevirt": kubevirt,
 "withdrawn": withdrawn, "writes": writes, "taints": taints, "tainted": tainted, "stream": stream}[cmd](*args)
