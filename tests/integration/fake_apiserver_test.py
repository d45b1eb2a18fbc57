#!/usr/bin/env python3
"""The fake API server (tests/support/fake_apiserver.py) behaves as its contract says: TLS with
its own CA, bearer tokens and their rotation, Nodes, ResourceClaims, ResourceSlices (create,
get, list with field selectors, update with 409, delete, deletecollection, watch with 410),
validation as resource.k8s.io/v1 does, each fault kind, the write log, SIGTERM.

Usage: fake_apiserver_test.py PATH/TO/fake_apiserver.py
"""

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import traceback
from urllib.parse import quote, urlsplit

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
FAILURES = []


def check(cond, what):
    if not cond:
        what = what if len(what) < 400 else what[:400] + "..."
        FAILURES.append(what)
        print(f"FAIL: {what}", file=sys.stderr)
    return cond


class Client:
    def __init__(self, info):
        u = urlsplit(info["url"])
        self.host, self.port = u.hostname, u.port
        self.token_file = info["token_file"]
        self.ctx = ssl.create_default_context(cafile=info["ca_file"])

    def token(self):
        with open(self.token_file) as f:
            return f.read().strip()

    def conn(self, timeout=5, ctx=None):
        return http.client.HTTPSConnection(self.host, self.port, context=ctx or self.ctx, timeout=timeout)

    def req(self, method, path, body=None, token=None, timeout=5, content_type="application/json",
            fresh=False):
        # A kept-alive connection saves a TLS handshake a request; fault tests ask for fresh ones.
        keep = not fresh and timeout == 5
        c = self.kept if keep and getattr(self, "kept", None) else self.conn(timeout)
        headers = {}
        tok = self.token() if token is None else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            data = data.encode() if isinstance(data, str) else data
            headers["Content-Type"] = content_type
        try:
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            raw = r.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if keep and not r.will_close:
                self.kept, c = c, None
            return r.status, parsed, raw, r
        finally:
            if c is not None:
                c.close()
                if c is getattr(self, "kept", None):
                    self.kept = None

    def watch(self, path, timeout=5):
        """Opens a watch; returns (response, connection) for read_event."""
        c = self.conn(timeout)
        c.request("GET", path, headers={"Authorization": f"Bearer {self.token()}"})
        return c.getresponse(), c


def close_watch(resp, conn):
    # The response owns the socket once the server said "Connection: close".
    resp.close()
    conn.close()


def read_event(resp):
    line = resp.readline()
    if not line:
        return None
    return json.loads(line)


def slice_obj(node, driver, name=None, generate=None, devices=1, pool_gen=1):
    meta = {"name": name} if name else {"generateName": generate}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta,
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": pool_gen, "resourceSliceCount": 1},
                     "devices": [{"name": f"pci-0000-01-00-{i}", "attributes": {
                         "resource.kubernetes.io/pciBusID": {"string": f"0000:01:00.{i}"},
                         f"{driver}/iommuGroup": {"int": i}}} for i in range(devices)]}}


def start(script, d, *extra):
    if os.path.exists(os.path.join(d, "server.json")):
        os.unlink(os.path.join(d, "server.json"))
    p = subprocess.Popen([sys.executable, script, "--dir", d, *extra],
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "stderr.log"), "w"))
    deadline = time.monotonic() + 20
    path = os.path.join(d, "server.json")
    while time.monotonic() < deadline:
        if p.poll() is not None:
            sys.exit(f"FAIL: the server exited with {p.returncode}: "
                     + open(os.path.join(d, "stderr.log")).read())
        if os.path.exists(path):
            with open(path) as f:
                return p, json.load(f)
        time.sleep(0.02)
    p.kill()
    sys.exit("FAIL: no server.json within 20 s")


def test_files(d, info):
    for k in ("ca_file", "token_file", "kubeconfig"):
        check(os.path.isfile(info[k]), f"server.json's {k} exists")
    check(info["url"].startswith("https://127.0.0.1:"), "the URL is https on 127.0.0.1")
    kc = open(info["kubeconfig"]).read()
    check(info["url"] in kc and f"certificate-authority: {info['ca_file']}" in kc
          and f"tokenFile: {info['token_file']}" in kc, "the kubeconfig names server, CA and token file")


def test_tls(cl):
    st, obj, _, _ = cl.req("GET", "/api/v1/nodes/n1")
    check(st == 200 and obj["kind"] == "Node" and obj["metadata"]["name"] == "n1"
          and obj["metadata"]["uid"], f"node get with the test CA: {st} {obj}")
    c = cl.conn(ctx=ssl.create_default_context())
    try:
        c.request("GET", "/api/v1/nodes/n1")
        c.getresponse().read()
        check(False, "TLS without the test CA must fail")
    except ssl.SSLCertVerificationError:
        pass
    finally:
        c.close()
    # The certificate names localhost too.
    ctx = ssl.create_default_context(cafile=cl.ca_file)
    c = http.client.HTTPSConnection("localhost", cl.port, context=ctx, timeout=5)
    try:
        c.request("GET", "/api/v1/nodes/n1", headers={"Authorization": f"Bearer {cl.token()}"})
        check(c.getresponse().status == 200, "https://localhost verifies too")
    except OSError as e:
        check(False, f"https://localhost: {e}")
    finally:
        c.close()


def test_auth(cl):
    st, obj, _, _ = cl.req("GET", "/api/v1/nodes/n1", token="")
    check(st == 401 and obj["kind"] == "Status" and obj["reason"] == "Unauthorized",
          f"no token: 401 Unauthorized Status, got {st} {obj}")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1", token="wrong")
    check(st == 401, f"wrong token: 401, got {st}")
    old = cl.token()
    st, _, _, _ = cl.req("POST", "/_fake/rotate-token", body={})
    check(st == 200, f"rotate-token: {st}")
    check(cl.token() != old, "rotation wrote a new token")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1", token=old)
    check(st == 401, f"the old token is refused after rotation, got {st}")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1")
    check(st == 200, f"the new token is accepted, got {st}")
    # Rewriting the file is a rotation too (as the kubelet's projected tokens do).
    with open(cl.token_file + ".new", "w") as f:
        f.write("hand-written-token\n")
    os.rename(cl.token_file + ".new", cl.token_file)
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1", token="hand-written-token")
    check(st == 200, f"a token written into the file is accepted, got {st}")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1", token=old)
    check(st == 401, "a previous token stays refused")


def test_nodes(cl):
    st, obj, _, _ = cl.req("GET", "/api/v1/nodes/nope")
    check(st == 404 and obj["reason"] == "NotFound" and obj["code"] == 404, f"unknown node: 404, got {st} {obj}")
    st, obj, _, _ = cl.req("POST", "/_fake/nodes", body={"metadata": {"name": "n2", "labels": {"a": "b"}}})
    check(st == 201 and obj["metadata"]["uid"], f"_fake/nodes creates: {st}")
    st, got, _, _ = cl.req("GET", "/api/v1/nodes/n2")
    check(st == 200 and got["metadata"]["uid"] == obj["metadata"]["uid"]
          and got["metadata"]["labels"] == {"a": "b"}, "the node reads back")


def test_claims(cl):
    claim = {"metadata": {"name": "c1", "namespace": "ns1", "uid": "11111111-2222-3333-4444-555555555555",
                          "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}},
             "spec": {"devices": {"requests": [{"name": "r1", "exactly": {"deviceClassName": "vfio"}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "r1", "driver": "vfio.vfiod.io", "pool": "n1", "device": "pci-0000-01-00-0"}]}}}}
    st, _, _, _ = cl.req("POST", "/_fake/claims", body=claim)
    check(st == 201, f"claim upsert: {st}")
    path = "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1"
    st, obj, _, _ = cl.req("GET", path)
    check(st == 200 and obj["kind"] == "ResourceClaim" and obj["apiVersion"] == "resource.k8s.io/v1"
          and obj["metadata"]["uid"] == claim["metadata"]["uid"]
          and obj["status"]["allocation"]["devices"]["results"][0]["device"] == "pci-0000-01-00-0",
          f"claim get returns it with its UID and status: {st} {obj}")
    rv1 = obj["metadata"]["resourceVersion"]
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "pci-0000-01-00-1"
    st, _, _, _ = cl.req("POST", "/_fake/claims", body=claim)
    check(st == 200, f"claim upsert of an existing one: {st}")
    st, obj, _, _ = cl.req("GET", path)
    check(obj["status"]["allocation"]["devices"]["results"][0]["device"] == "pci-0000-01-00-1"
          and int(obj["metadata"]["resourceVersion"]) > int(rv1), "the upsert replaced it with a newer resourceVersion")
    st, lst, _, _ = cl.req("GET", "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims")
    check(st == 200 and lst["kind"] == "ResourceClaimList" and [i["metadata"]["name"] for i in lst["items"]] == ["c1"],
          f"claim list: {st} {lst}")
    st, _, _, _ = cl.req("GET", "/apis/resource.k8s.io/v1/namespaces/other/resourceclaims/c1")
    check(st == 404, "a claim is found in its own namespace only")
    st, _, _, _ = cl.req("DELETE", "/_fake/claims/ns1/c1")
    check(st == 200, f"_fake claim delete: {st}")
    st, obj, _, _ = cl.req("GET", path)
    check(st == 404 and obj["reason"] == "NotFound", f"a deleted claim: 404, got {st}")
    st, _, _, _ = cl.req("PUT", path, body=claim)
    check(st == 405, f"claims are read-only through the API, got {st}")


def test_slices(cl):
    st, obj, _, _ = cl.req("POST", SLICES, body=slice_obj("n1", "vfio.vfiod.io", generate="n1-vfio.vfiod.io-"))
    check(st == 201, f"slice create with generateName: {st} {obj}")
    name = obj["metadata"]["name"]
    check(name.startswith("n1-vfio.vfiod.io-") and len(name) == len("n1-vfio.vfiod.io-") + 5,
          f"generateName adds 5 characters: {name}")
    check(obj["metadata"]["uid"] and obj["metadata"]["creationTimestamp"] and obj["metadata"]["resourceVersion"],
          "server-set metadata")
    st, got, _, _ = cl.req("GET", f"{SLICES}/{name}")
    check(st == 200 and got == obj, "slice get returns what create returned")
    st, dup, _, _ = cl.req("POST", SLICES, body=slice_obj("n1", "vfio.vfiod.io", name=name))
    check(st == 409 and dup["reason"] == "AlreadyExists", f"create of an existing name: 409 AlreadyExists, got {st}")
    for node in ("n1", "n2"):
        for drv in ("a.example.com", "b.example.com"):
            st, _, _, _ = cl.req("POST", SLICES, body=slice_obj(node, drv, name=f"{node}-{drv}"))
            check(st == 201, f"create {node}-{drv}: {st}")
    sel = quote("spec.nodeName=n1,spec.driver=a.example.com")
    st, lst, _, _ = cl.req("GET", f"{SLICES}?fieldSelector={sel}")
    check(st == 200 and lst["kind"] == "ResourceSliceList" and lst["apiVersion"] == "resource.k8s.io/v1"
          and lst["metadata"]["resourceVersion"], f"list shape: {lst}")
    check([i["metadata"]["name"] for i in lst["items"]] == ["n1-a.example.com"], f"list by node and driver: {lst['items']}")
    st, lst, _, _ = cl.req("GET", f"{SLICES}?fieldSelector={quote('spec.nodeName=n2')}")
    check(sorted(i["metadata"]["name"] for i in lst["items"]) == ["n2-a.example.com", "n2-b.example.com"],
          "list by node")
    st, lst, _, _ = cl.req("GET", f"{SLICES}?fieldSelector={quote('spec.driver=vfio.vfiod.io')}")
    check([i["metadata"]["name"] for i in lst["items"]] == [name], "list by driver")
    st, bad, _, _ = cl.req("GET", f"{SLICES}?fieldSelector={quote('spec.devices=x')}")
    check(st == 400 and bad["reason"] == "BadRequest", f"an unknown selector field: 400, got {st}")
    st, lst, _, _ = cl.req("GET", f"{SLICES}?limit=2")
    check(len(lst["items"]) == 2 and lst["metadata"].get("continue"), "limit pages")
    st, rest, _, _ = cl.req("GET", f"{SLICES}?limit=10&continue={lst['metadata']['continue']}")
    check(len(rest["items"]) == 3, f"continue gives the rest: {len(rest['items'])}")

    # Update: current resourceVersion wins, a stale one is a 409 Conflict.
    upd = json.loads(json.dumps(obj))
    upd["spec"]["pool"]["generation"] = 2
    st, new, _, _ = cl.req("PUT", f"{SLICES}/{name}", body=upd)
    check(st == 200 and int(new["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
          and new["spec"]["pool"]["generation"] == 2 and new["metadata"]["uid"] == obj["metadata"]["uid"]
          and new["metadata"]["generation"] == 2, f"PUT with the current resourceVersion: {st} {new}")
    upd["spec"]["pool"]["generation"] = 3
    st, err, _, _ = cl.req("PUT", f"{SLICES}/{name}", body=upd)
    check(st == 409 and err["reason"] == "Conflict" and err["kind"] == "Status", f"PUT with a stale resourceVersion: 409, got {st}")
    st, cur, _, _ = cl.req("GET", f"{SLICES}/{name}")
    check(cur["spec"]["pool"]["generation"] == 2, "a refused update changed nothing")
    st, _, _, _ = cl.req("PUT", f"{SLICES}/nope", body=dict(upd, metadata={"name": "nope"}))
    check(st == 404, f"PUT of a missing slice: 404, got {st}")
    imm = json.loads(json.dumps(cur))
    imm["spec"]["nodeName"] = "n2"
    imm["spec"]["pool"]["name"] = "n2"
    st, err, _, _ = cl.req("PUT", f"{SLICES}/{name}", body=imm)
    check(st == 422, f"spec.nodeName is immutable: 422, got {st}")

    st, gone, _, _ = cl.req("DELETE", f"{SLICES}/{name}")
    check(st == 200 and gone["metadata"]["name"] == name, f"delete: {st}")
    st, _, _, _ = cl.req("GET", f"{SLICES}/{name}")
    check(st == 404, "deleted slice: 404")
    st, _, _, _ = cl.req("DELETE", f"{SLICES}/{name}")
    check(st == 404, "delete again: 404")
    st, lst, _, _ = cl.req("DELETE", f"{SLICES}?fieldSelector={quote('spec.nodeName=n2')}")
    check(st == 200 and sorted(i["metadata"]["name"] for i in lst["items"]) == ["n2-a.example.com", "n2-b.example.com"],
          f"deletecollection by field selector returns what it deleted: {st} {lst}")
    st, lst, _, _ = cl.req("GET", SLICES)
    check(sorted(i["metadata"]["name"] for i in lst["items"]) == ["n1-a.example.com", "n1-b.example.com"],
          "deletecollection deleted only the selected slices")
    return name


def test_validation(cl):
    def refused(body, field, what):
        st, err, _, _ = cl.req("POST", SLICES, body=body)
        ok = check(st == 422 and err["reason"] == "Invalid"
                   and any(c["field"].startswith(field) for c in err["details"]["causes"]),
                   f"{what}: 422 naming {field}, got {st} {err}")
        return ok
    refused(slice_obj("n1", "d.example.com", name="big", devices=129), "spec.devices", "129 devices")
    st, _, _, _ = cl.req("POST", SLICES, body=slice_obj("n1", "d.example.com", name="max", devices=128))
    check(st == 201, f"128 devices are fine, got {st}")
    s = slice_obj("n1", "d.example.com", name="long")
    s["spec"]["devices"][0]["attributes"]["d.example.com/resourceName"] = {"string": "x" * 65}
    refused(s, "spec.devices[0].attributes", "a 65-character string attribute")
    s["spec"]["devices"][0]["attributes"]["d.example.com/resourceName"] = {"string": "x" * 64}
    st, _, _, _ = cl.req("POST", SLICES, body=s)
    check(st == 201, f"a 64-character string attribute is fine, got {st}")
    s = slice_obj("n1", "d.example.com", name="badname")
    s["spec"]["devices"][0]["name"] = "0000:01:00.0"
    refused(s, "spec.devices[0].name", "a device name that is not a DNS label")
    for field in ("driver", "nodeName"):
        s = slice_obj("n1", "d.example.com", name=f"no-{field.lower()}")
        del s["spec"][field]
        refused(s, "spec", f"missing spec.{field}")
    s = slice_obj("n1", "d.example.com", name="no-pool-name")
    del s["spec"]["pool"]["name"]
    refused(s, "spec.pool.name", "missing spec.pool.name")
    s = slice_obj("n1", "d.example.com", name="no-count")
    del s["spec"]["pool"]["resourceSliceCount"]
    refused(s, "spec.pool.resourceSliceCount", "missing spec.pool.resourceSliceCount")
    s = slice_obj("n1", "d.example.com", name="two-values")
    s["spec"]["devices"][0]["attributes"]["d.example.com/x"] = {"int": 1, "string": "a"}
    refused(s, "spec.devices[0].attributes", "an attribute with two values")
    s = slice_obj("n1", "d.example.com", name="rv-set")
    s["metadata"]["resourceVersion"] = "5"
    st, _, _, _ = cl.req("POST", SLICES, body=s)
    check(st == 500, f"create with resourceVersion set: 500 as the API answers, got {st}")
    st, err, _, _ = cl.req("POST", SLICES, body=b"{not json")
    check(st == 400, f"a body that is not JSON: 400, got {st}")
    st, _, _, r = cl.req("POST", SLICES, body=b"x" * (4 * 1024 * 1024))
    check(st == 413, f"a 4 MiB body: 413, got {st}")
    for n in ("max", "long"):
        cl.req("DELETE", f"{SLICES}/{n}")


def tainted(name, devices=1, taints=None):
    s = slice_obj("n1", "d.example.com", name=name, devices=devices)
    s["spec"]["devices"][0]["taints"] = taints if taints is not None else [
        {"key": "vfiod.io/unhealthy", "value": "aer-fatal", "effect": "NoSchedule"}]
    return s


# Device taints as resource.k8s.io/v1 at 1.37 validates them, and timeAdded as the server sets it.
def test_taints(cl):
    def refused(body, field, what):
        st, err, _, _ = cl.req("POST", SLICES, body=body)
        check(st == 422 and any(c["field"].startswith(field) for c in err["details"]["causes"]),
              f"{what}: 422 naming {field}, got {st} {err}")
    st, obj, _, _ = cl.req("POST", SLICES, body=tainted("t-ok"))
    taint = obj["spec"]["devices"][0]["taints"][0] if st == 201 else {}
    check(st == 201 and taint.get("key") == "vfiod.io/unhealthy" and taint.get("value") == "aer-fatal"
          and taint.get("effect") == "NoSchedule", f"a taint is kept: {st} {obj}")
    added = taint.get("timeAdded", "")
    check(isinstance(added, str) and len(added) == 20 and added.endswith("Z"),
          f"the server sets timeAdded: {taint}")
    # The same taint written again without timeAdded keeps the stored time: no write at all.
    again = tainted("t-ok")
    again["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
    time.sleep(1.1)
    st, obj2, _, _ = cl.req("PUT", f"{SLICES}/t-ok", body=again)
    check(st == 200 and obj2["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
          and obj2["spec"]["devices"][0]["taints"][0].get("timeAdded") == added,
          f"a rewrite of the same taint changes nothing: {st} {obj2}")
    st, _, _, _ = cl.req("POST", SLICES, body=tainted("t-64", devices=64))
    check(st == 201, f"64 devices with a taint are fine, got {st}")
    refused(tainted("t-65", devices=65), "spec.devices", "65 devices, one tainted")
    for effect in ("NoExecute", "None"):
        st, _, _, _ = cl.req("POST", SLICES, body=tainted(f"t-{effect.lower()}", taints=[
            {"key": "vfiod.io/unhealthy", "effect": effect}]))
        check(st == 201, f"effect {effect} without a value is fine, got {st}")
    bad = [({"key": "vfiod.io/unhealthy", "value": "aer-fatal"}, "effect", "no effect"),
           ({"key": "vfiod.io/unhealthy", "effect": "PreferNoSchedule"}, "effect", "PreferNoSchedule"),
           ({"value": "x", "effect": "NoSchedule"}, "key", "no key"),
           ({"key": "vfiod.io/un healthy", "effect": "NoSchedule"}, "key", "a key with a space"),
           ({"key": "Bad_Domain/x", "effect": "NoSchedule"}, "key", "a key whose prefix is no DNS name"),
           ({"key": "k", "value": "aer-fatal: recovery failed", "effect": "NoSchedule"}, "value",
            "a value with ': '"),
           ({"key": "k", "value": "v" * 64, "effect": "NoSchedule"}, "value", "a 64-character value")]
    for i, (t, field, what) in enumerate(bad):
        refused(tainted(f"t-bad-{i}", taints=[t]), f"spec.devices[0].taints[0].{field}", what)
    many = [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)]
    refused(tainted("t-17", taints=many), "spec.devices[0].taints", "17 taints")
    st, _, _, _ = cl.req("POST", SLICES, body=tainted("t-16", taints=many[:16]))
    check(st == 201, f"16 taints are fine, got {st}")
    for n in ("t-ok", "t-64", "t-noexecute", "t-none", "t-16"):
        cl.req("DELETE", f"{SLICES}/{n}")


# --drop-device-taints: the slice is taken, its taints dropped without a word, as by an API
# server with the DRADeviceTaints feature gate off.
def test_dropped_taints(script):
    with tempfile.TemporaryDirectory(prefix="fake-apiserver-test.") as d:
        proc, info = start(script, d, "--drop-device-taints")
        try:
            cl = Client(info)
            st, obj, _, _ = cl.req("POST", SLICES, body=tainted("t-off"))
            check(st == 201 and "taints" not in obj["spec"]["devices"][0],
                  f"the gate off: created without its taints: {st} {obj}")
            again = tainted("t-off")
            again["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            st, obj, _, _ = cl.req("PUT", f"{SLICES}/t-off", body=again)
            check(st == 200 and "taints" not in obj["spec"]["devices"][0],
                  f"the gate off: updated without its taints: {st} {obj}")
            st, _, _, _ = cl.req("POST", SLICES, body=tainted("t-off-65", devices=65))
            check(st == 201, f"the gate off: 65 devices, the taint dropped, are fine: {st}")
        finally:
            proc.kill()
            proc.wait()


def test_watch(cl, d):
    st, lst, _, _ = cl.req("GET", SLICES)
    rv0 = lst["metadata"]["resourceVersion"]
    sel = quote("spec.nodeName=w1")
    # A live watch, open before the changes.
    live, live_conn = cl.watch(f"{SLICES}?watch=true&resourceVersion={rv0}&fieldSelector={sel}")
    check(live.status == 200 and live.getheader("Transfer-Encoding") == "chunked", "watch answers 200, chunked")
    st, a, _, _ = cl.req("POST", SLICES, body=slice_obj("w1", "vfio.vfiod.io", name="w1-a"))
    cl.req("POST", SLICES, body=slice_obj("w2", "vfio.vfiod.io", name="w2-a"))  # not selected
    a["spec"]["pool"]["generation"] = 5
    st, m, _, _ = cl.req("PUT", f"{SLICES}/w1-a", body=a)
    st, _, _, _ = cl.req("DELETE", f"{SLICES}/w1-a")
    want = [("ADDED", "w1-a", 1), ("MODIFIED", "w1-a", 5), ("DELETED", "w1-a", 5)]
    got = []
    for _ in want:
        ev = read_event(live)
        got.append((ev["type"], ev["object"]["metadata"]["name"], ev["object"]["spec"]["pool"]["generation"]))
    check(got == want, f"the live watch saw {got}, expected {want}")
    close_watch(live, live_conn)
    # The same from the resourceVersion after the fact.
    replay, rc = cl.watch(f"{SLICES}?watch=true&resourceVersion={rv0}&fieldSelector={sel}")
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in (read_event(replay) for _ in want)]
    check(got == [(t, n) for t, n, _ in want], f"a watch from an old resourceVersion replays {got}")
    close_watch(replay, rc)
    # Bookmarks and timeoutSeconds: the stream ends by itself.
    bm, bc = cl.watch(f"{SLICES}?watch=true&resourceVersion={rv0}&fieldSelector={quote('spec.nodeName=none')}"
                      "&allowWatchBookmarks=true&timeoutSeconds=1")
    types = []
    while True:
        ev = read_event(bm)
        if ev is None:
            break
        types.append(ev["type"])
    check(types and set(types) == {"BOOKMARK"}, f"an idle watch with bookmarks gets BOOKMARKs and ends: {types}")
    close_watch(bm, bc)
    # resourceVersion 0: the current objects as ADDED first.
    cl.req("POST", SLICES, body=slice_obj("w1", "vfio.vfiod.io", name="w1-b"))
    z, zc = cl.watch(f"{SLICES}?watch=true&resourceVersion=0&fieldSelector={sel}")
    ev = read_event(z)
    check(ev["type"] == "ADDED" and ev["object"]["metadata"]["name"] == "w1-b", f"resourceVersion=0 starts with ADDED: {ev}")
    close_watch(z, zc)
    # Compaction: an older resourceVersion is gone, as kube-apiserver says it (200, ERROR 410).
    st, _, _, _ = cl.req("POST", "/_fake/compact", body={})
    check(st == 200, "compact")
    old, oc = cl.watch(f"{SLICES}?watch=true&resourceVersion={rv0}")
    ev = read_event(old)
    check(old.status == 200 and ev["type"] == "ERROR" and ev["object"]["code"] == 410
          and ev["object"]["reason"] == "Expired", f"watch from a compacted resourceVersion: ERROR 410, got {ev}")
    check(read_event(old) is None, "the stream ends after the 410")
    close_watch(old, oc)
    # A watch closed by the client ends its thread on the server.
    w, wc = cl.watch(f"{SLICES}?watch=true&resourceVersion=0&fieldSelector={quote('spec.nodeName=none')}")
    close_watch(w, wc)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        _, state, _, _ = cl.req("GET", "/_fake/state")
        if not state["watchers"]:
            break
        time.sleep(0.05)
    check(not state["watchers"], f"watchers end when the client disconnects: {state['watchers']}")


def test_extras(cl):
    # PATCH (merge patch) keeps what it does not name and bumps the resourceVersion.
    st, cur, _, _ = cl.req("GET", f"{SLICES}/n1-a.example.com")
    st, new, _, _ = cl.req("PATCH", f"{SLICES}/n1-a.example.com", body={"metadata": {"labels": {"x": "y"}}},
                           content_type="application/merge-patch+json")
    check(st == 200 and new["metadata"]["labels"] == {"x": "y"} and new["spec"] == cur["spec"]
          and int(new["metadata"]["resourceVersion"]) > int(cur["metadata"]["resourceVersion"]),
          f"merge patch: {st} {new}")
    st, lst, _, _ = cl.req("GET", f"{SLICES}?labelSelector=x%3Dy")
    check([i["metadata"]["name"] for i in lst["items"]] == ["n1-a.example.com"], "labelSelector")
    st, _, _, _ = cl.req("POST", SLICES, body=b"a: b", content_type="application/yaml")
    check(st == 415, f"a YAML body: 415, got {st}")
    # Claims watch, in one namespace.
    st, lst, _, _ = cl.req("GET", "/apis/resource.k8s.io/v1/namespaces/ns2/resourceclaims")
    w, wc = cl.watch("/apis/resource.k8s.io/v1/namespaces/ns2/resourceclaims?watch=true&resourceVersion="
                     + lst["metadata"]["resourceVersion"])
    cl.req("POST", "/_fake/claims", body={"metadata": {"name": "c9", "namespace": "other"}})
    cl.req("POST", "/_fake/claims", body={"metadata": {"name": "c2", "namespace": "ns2"}})
    cl.req("DELETE", "/_fake/claims/ns2/c2")
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in (read_event(w) for _ in range(2))]
    check(got == [("ADDED", "c2"), ("DELETED", "c2")], f"claims watch in ns2: {got}")
    # close-watches ends an open watch (as an API server restart does).
    st, _, _, _ = cl.req("POST", "/_fake/close-watches", body={})
    check(read_event(w) is None, "close-watches ends the stream")
    close_watch(w, wc)
    st, reqs, _, _ = cl.req("GET", "/_fake/requests")
    check(st == 200 and any(r["method"] == "GET" and r["path"].startswith(SLICES + "?labelSelector") for r in reqs),
          "/_fake/requests lists API requests")


def test_faults(cl):
    def fault(**f):
        st, _, _, _ = cl.req("POST", "/_fake/faults", body=f)
        check(st == 201, f"fault {f}: {st}")
    name = "n1-a.example.com"
    st, cur, _, _ = cl.req("GET", f"{SLICES}/{name}")
    reasons = {"401": "Unauthorized", "403": "Forbidden", "409": "Conflict", "429": "TooManyRequests",
               "500": "InternalError"}
    for action, reason in reasons.items():
        fault(method="PUT", path_prefix=SLICES, action=action, count=2)
        for i in range(2):
            st, err, _, r = cl.req("PUT", f"{SLICES}/{name}", body=cur)
            check(st == int(action) and err and err["reason"] == reason,
                  f"fault {action} #{i}: got {st} {err}")
            if action == "429":
                check(r.getheader("Retry-After") == "1", "429 carries Retry-After")
        st, _, _, _ = cl.req("PUT", f"{SLICES}/{name}", body=cur)
        check(st == 200, f"after 2 {action} faults the third PUT succeeds, got {st}")
    fault(method="GET", path_prefix=SLICES, action="500", count=1)
    st, _, _, _ = cl.req("PUT", f"{SLICES}/{name}", body=cur)
    check(st == 200, "a GET fault leaves PUT alone")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1")
    check(st == 200, "a fault for one prefix leaves others alone")
    st, _, _, _ = cl.req("GET", SLICES)
    check(st == 500, "the GET fault hits a GET")
    # hang: no answer until the client gives up.
    fault(method="*", path_prefix=SLICES, action="hang")
    t0 = time.monotonic()
    try:
        cl.req("GET", SLICES, timeout=0.5)
        check(False, "hang answered")
    except (socket.timeout, TimeoutError):
        check(time.monotonic() - t0 < 5, "hang held the request until the client's timeout")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and cl.req("GET", "/_fake/state")[1]["hanging"]:
        time.sleep(0.05)
    check(cl.req("GET", "/_fake/state")[1]["hanging"] == 0, "a hung request ends when its client gives up")
    # drop: connection closed with no answer.
    fault(method="*", path_prefix=SLICES, action="drop")
    try:
        cl.req("GET", SLICES, fresh=True)
        check(False, "drop answered")
    except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError):
        pass
    # A drop on a kept-alive connection is not counted (clients re-send there): the re-sent
    # request on a fresh connection is dropped too, and only then is the fault used up.
    c = cl.conn()
    try:
        hdr = {"Authorization": f"Bearer {cl.token()}"}
        c.request("GET", SLICES, headers=hdr)
        c.getresponse().read()
        fault(method="GET", path_prefix=SLICES, action="drop", count=1)
        c.request("GET", SLICES, headers=hdr)
        try:
            c.getresponse().read()
            check(False, "drop on a reused connection answered")
        except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError):
            pass
    finally:
        c.close()
    try:
        cl.req("GET", SLICES, fresh=True)
        check(False, "the drop after a reused-connection drop answered")
    except (http.client.RemoteDisconnected, ConnectionError, ssl.SSLError):
        pass
    check(cl.req("GET", SLICES)[0] == 200, "then the drop fault is used up")
    # garbage: 200 and not JSON.
    fault(method="GET", path_prefix=SLICES, action="garbage")
    st, parsed, raw, _ = cl.req("GET", SLICES)
    check(st == 200 and parsed is None and raw, f"garbage: 200 with a body that is not JSON, got {st} {raw[:40]}")
    # expired: a watch answered 200 and then ERROR 410 (after a BOOKMARK when asked).
    for bookmark in (False, True):
        fault(method="GET", path_prefix=SLICES, action="expired", watch=True, bookmark=bookmark)
        w, wc = cl.watch(f"{SLICES}?watch=true&resourceVersion=1")
        ev = read_event(w)
        if bookmark:
            check(ev and ev["type"] == "BOOKMARK", f"expired with bookmark: a BOOKMARK first, got {ev}")
            ev = read_event(w)
        check(w.status == 200 and ev and ev["type"] == "ERROR" and ev["object"]["code"] == 410,
              f"expired: 200 then ERROR 410, got {w.status} {ev}")
        check(read_event(w) is None, "expired: the stream ends after the ERROR")
        close_watch(w, wc)
    # Unlimited faults until cleared.
    fault(method="*", path_prefix="/api/v1/nodes", action="503", count=-1)
    check(all(cl.req("GET", "/api/v1/nodes/n1")[0] == 503 for _ in range(3)), "count -1: every request")
    st, _, _, _ = cl.req("DELETE", "/_fake/faults")
    st, _, _, _ = cl.req("GET", "/api/v1/nodes/n1")
    check(st == 200, f"DELETE /_fake/faults clears them, got {st}")
    st, _, _, _ = cl.req("GET", SLICES)
    check(st == 200, "the server still answers after every fault kind")


def test_writes(cl, d, generated):
    with open(os.path.join(d, "writes.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    st, arr, _, _ = cl.req("GET", "/_fake/writes")
    check(st == 200 and arr == lines, "GET /_fake/writes equals writes.jsonl")
    check(all(w["method"] in ("POST", "PUT", "PATCH", "DELETE") for w in lines), "only writes are logged")
    creates = [w for w in lines if w["method"] == "POST" and w["status"] == 201
               and (w["body"] or {}).get("metadata", {}).get("generateName") == "n1-vfio.vfiod.io-"]
    check(len(creates) == 1 and creates[0]["body"]["spec"]["devices"][0]["name"] == "pci-0000-01-00-0",
          "the generateName create is logged with its body")
    check(any(w["method"] == "PUT" and w["status"] == 409 for w in lines), "the 409 PUT is logged")
    check(any(w["method"] == "DELETE" and w["path"] == f"{SLICES}/{generated}" and w["status"] == 200
              for w in lines), "the delete is logged")
    check(any(w.get("fault") == "500" and w["status"] == 500 for w in lines), "faulted writes say so")


def test_sigterm(proc, cl):
    names = sorted(i["metadata"]["name"] for i in cl.req("GET", SLICES)[1]["items"])
    # A hung request and an open watch do not hold up SIGTERM.
    cl.req("POST", "/_fake/faults", body={"method": "*", "path_prefix": "/api/v1/nodes", "action": "hang"})
    hung = cl.conn(timeout=30)
    hung.request("GET", "/api/v1/nodes/n1", headers={"Authorization": f"Bearer {cl.token()}"})
    w, wc = cl.watch(f"{SLICES}?watch=true&resourceVersion=0", timeout=30)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=5)
        check(rc == 0, f"SIGTERM: exit 0, got {rc}")
        check(time.monotonic() - t0 < 3, "SIGTERM ends the server quickly")
    except subprocess.TimeoutExpired:
        check(False, "SIGTERM did not end the server within 5 s")
        proc.kill()
    hung.close()
    close_watch(w, wc)
    return names


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    script = os.path.abspath(sys.argv[1])
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fake-apiserver-test.") as d:
        proc, info = start(script, d, "--node", "n1", "--bookmark-interval", "0.3")
        try:
            cl = Client(info)
            cl.ca_file = info["ca_file"]
            steps = [("files", lambda: test_files(d, info)), ("tls", lambda: test_tls(cl)),
                     ("auth", lambda: test_auth(cl)), ("nodes", lambda: test_nodes(cl)),
                     ("claims", lambda: test_claims(cl)), ("slices", lambda: test_slices(cl)),
                     ("validation", lambda: test_validation(cl)), ("taints", lambda: test_taints(cl)),
                     ("dropped taints", lambda: test_dropped_taints(script)),
                     ("watch", lambda: test_watch(cl, d)),
                     ("extras", lambda: test_extras(cl)), ("faults", lambda: test_faults(cl)),
                     ("writes", lambda: test_writes(cl, d, generated)),
                     ("sigterm", lambda: test_sigterm(proc, cl))]
            generated = None
            for name, step in steps:
                t = time.monotonic()
                result = step()
                if name == "slices":
                    generated = result
                if name == "sigterm":
                    before = result
                print(f"  {name}: {time.monotonic() - t:.2f} s")
            # --restart: the same server comes back with its objects, port, CA and token.
            t = time.monotonic()
            proc, again = start(script, d, "--restart")
            cl2 = Client(again)
            check(again["url"] == info["url"], f"--restart keeps the URL: {again['url']}")
            st, lst, _, _ = cl2.req("GET", SLICES)
            check(st == 200 and sorted(i["metadata"]["name"] for i in lst["items"]) == before,
                  f"--restart keeps the slices: {st} {[i['metadata']['name'] for i in lst['items']]}")
            st, _, _, _ = cl2.req("GET", "/api/v1/nodes/n2")
            check(st == 200, "--restart keeps the nodes")
            w, wc = cl2.watch(f"{SLICES}?watch=true&resourceVersion=2")
            ev = read_event(w)
            check(ev and ev["type"] == "ERROR" and ev["object"]["code"] == 410, f"after --restart an old resourceVersion is gone: {ev}")
            close_watch(w, wc)
            n = len(cl2.req("GET", "/_fake/writes")[1])
            cl2.req("DELETE", f"{SLICES}/n1-b.example.com")
            st, writes, _, _ = cl2.req("GET", "/_fake/writes")
            check(len(writes) == n + 1 and writes[-1]["seq"] > writes[-2]["seq"], "the write log continues")
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=5)
            print(f"  restart: {time.monotonic() - t:.2f} s")
        except Exception:
            traceback.print_exc()
            FAILURES.append("an exception")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if FAILURES:
                sys.stderr.write("server stderr:\n" + open(os.path.join(d, "stderr.log")).read())
    print(f"fake_apiserver_test: {len(FAILURES)} failure(s) in {time.monotonic() - t0:.1f} s")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
