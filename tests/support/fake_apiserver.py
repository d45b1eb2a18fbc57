#!/usr/bin/env python3
"""A fake Kubernetes API server for the vfiod-dra-plugin tests (DESIGN §10).

HTTPS on 127.0.0.1 with a throw-away CA, bearer-token auth read from DIR/token on every request
(so rewriting the file rotates it), Nodes, ResourceClaims and ResourceSlices (resource.k8s.io/v1)
with Kubernetes' JSON shapes and semantics: one resourceVersion counter for all objects, list,
watch with fieldSelector, 410 for a compacted resourceVersion, 409 on a stale update, 422 for what
the API's validation refuses (device taints included: key, value, effect, at most 16 a device,
at most 64 devices in a slice that has one; timeAdded is set where a write leaves it out).
--drop-device-taints drops every written taint silently, as a server with the DRADeviceTaints
feature gate off does. Debian python3 stdlib and the openssl CLI only.

Usage: fake_apiserver.py --dir DIR [--node NAME]... ; writes DIR/ca.crt, DIR/token,
DIR/kubeconfig, DIR/writes.jsonl and last DIR/server.json
{"url","ca_file","token_file","kubeconfig","pid"}. SIGTERM ends it at once.

API (errors are v1 Status objects with reason and code):
  GET /api/v1/nodes[/{name}]
  GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims[/{name}] (list, watch too)
  /apis/resource.k8s.io/v1/resourceslices[/{name}]: POST (name or generateName), GET, list
    (fieldSelector metadata.name, spec.nodeName, spec.driver; labelSelector; limit/continue),
    PUT (409 on a stale metadata.resourceVersion; no-op updates write nothing), PATCH
    (merge-patch), DELETE (preconditions), DELETE on the collection (fieldSelector).
  Watch: ?watch=true&resourceVersion=RV: events after RV as chunked JSON lines; RV absent or
    "0" (or sendInitialEvents=true): ADDED for what exists first. allowWatchBookmarks=true:
    BOOKMARK every --bookmark-interval s. timeoutSeconds ends the stream. A compacted RV: as
    kube-apiserver does, 200 then one ERROR event {code 410, reason Expired} and the end
    (--gone-as-http: an HTTP 410 instead).
Control (same token): POST /_fake/nodes (upsert a Node), POST /_fake/claims (upsert a whole
  ResourceClaim; its uid is kept as given), DELETE /_fake/claims/{ns}/{name}, POST
  /_fake/slices (upsert a ResourceSlice unvalidated: what a broken or hostile server holds),
  POST /_fake/faults {"method": "PUT"|"*", "path_prefix": "/apis/...", "action": "401"|"403"|
  "409"|"410"|"429"|"500"|"503"|any 3-digit code|"hang"|"drop"|"garbage"|"delay"|"expired"|"huge",
  "count": N (default 1, negative: until cleared), optional "watch": bool, "delay_ms",
  "seconds", "bookmark": bool, "bytes"} for the next N matching requests (path_prefix is matched
  against path and query);
  "hang" holds the request until the client gives up (or 60 s, or "seconds") and then closes;
  "drop" closes without an answer (a drop on a reused keep-alive connection is not counted,
  since clients such as libcurl silently re-send there); "garbage" is a 200 whose body is not
  JSON; "expired" is a 200 whose stream is one ERROR event {code 410, reason Expired} (after a
  BOOKMARK when "bookmark" is true) and the end, as a compacted resourceVersion; "huge" is a 200
  whose body streams without a Content-Length, so only a client that counts can stop it:
  "bytes" of it (default 256 MiB), a JSON object that never closes, its bytes counted in
  /_fake/state as they go out; DELETE /_fake/faults, GET /_fake/faults; GET /_fake/writes[?since=SEQ] (writes.jsonl
  as an array), GET /_fake/requests[?since=SEQ] (every API request: method, path, status);
  POST /_fake/rotate-token; POST /_fake/compact (every older resourceVersion becomes 410);
  POST /_fake/close-watches (ends every open watch, as an API server restart would);
  GET /_fake/state (resourceVersion, open watches, object names, hung requests, "huge_sent"
  bytes of every "huge" body so far and "huge_streaming" answers now).
"""

import argparse
import base64
import bisect
import copy
import datetime
import json
import os
import random
import re
import secrets
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_API = "resource.k8s.io/v1"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS_ALL_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
CLAIMS_NS_RE = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims(?:/([^/]+))?$")
SLICE_RE = re.compile(r"^/apis/resource\.k8s\.io/v1/resourceslices(?:/([^/]+))?$")
NODE_RE = re.compile(r"^/api/v1/nodes(?:/([^/]+))?$")

# The API server's own bounds (k8s.io/apiserver MaxRequestBodyBytes is 3 MiB; resource.k8s.io/v1
# ResourceSliceMaxDevices, DeviceAttributeMaxValueLength, ResourceSliceMaxAttributesAndCapacitiesPerDevice,
# DeviceMaxIDLength, DeviceMaxDomainLength).
MAX_BODY = 3 * 1024 * 1024
MAX_DEVICES = 128
MAX_ATTR_VALUE = 64
MAX_ATTRS_PER_DEVICE = 32
MAX_ID_LEN = 32
MAX_DOMAIN_LEN = 63
# Device taints (resource.k8s.io/v1 at 1.37: DeviceTaintsMaxLength,
# ResourceSliceMaxDevicesWithAdvancedFeatures, the effects validDeviceTaintEffects holds).
MAX_TAINTS_PER_DEVICE = 16
MAX_DEVICES_WITH_TAINTS = 64
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
DRAIN_LIMIT = 32 * 1024 * 1024  # a refused body up to this size is read before the 413
MAX_CONNECTIONS = 2048         # beyond this, new connections are closed at once
MAX_HISTORY_BYTES = 64 << 20   # watch history kept, in JSON bytes
HANG_SECONDS = 60              # the "hang" fault's bound
HUGE_BYTES = 256 << 20         # the "huge" fault's default body
DEFAULT_WATCH_SECONDS = 1800   # a watch without timeoutSeconds ends after this
MAX_WATCH_SECONDS = 3600

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")  # a label name's, a value's
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
                    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")

REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Gone",
    411: "LengthRequired", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_obj(code, message, reason=None, details=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason or REASONS.get(code, ""), "code": code}
    if details:
        s["details"] = details
    return s


class ApiError(Exception):
    def __init__(self, code, message, reason=None, details=None, headers=None):
        super().__init__(message)
        self.status = status_obj(code, message, reason, details)
        self.code = code
        self.headers = headers or {}


def not_found(resource, name):
    return ApiError(404, f'{resource} "{name}" not found', "NotFound",
                    {"name": name, "group": resource.split(".", 1)[1] if "." in resource else "",
                     "kind": resource.split(".", 1)[0]})


def invalid(kind, resource, name, causes):
    msg = f'{kind}.{RESOURCE_GROUP} "{name}" is invalid: ' + "; ".join(
        f'{c["field"]}: {c["message"]}' for c in causes)
    return ApiError(422, msg, "Invalid",
                    {"name": name, "group": RESOURCE_GROUP, "kind": kind,
                     "causes": [{"reason": c.get("reason", "FieldValueInvalid"),
                                 "message": c["message"], "field": c["field"]} for c in causes]})


def conflict(resource, name, why="the object has been modified; please apply your changes to "
                                 "the latest version and try again"):
    return ApiError(409, f'Operation cannot be fulfilled on {resource} "{name}": {why}', "Conflict",
                    {"name": name, "group": RESOURCE_GROUP, "kind": resource.split(".", 1)[0]})


# ---------------------------------------------------------------------------------------------
# Field selectors: "a=b,c!=d" (also "=="), on the fields the real API lets you select.

def parse_field_selector(sel, allowed):
    reqs = []
    if not sel:
        return reqs
    for term in sel.split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", term)
        if not m:
            raise ApiError(400, f'invalid field selector: "{term}"', "BadRequest")
        field, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if field not in allowed:
            raise ApiError(400, f'field label not supported: {field}', "BadRequest")
        reqs.append((field, op != "!=", value))
    return reqs


def field_value(obj, dotted):
    cur = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    return "" if cur is None else str(cur)


def fields_match(obj, reqs):
    return all((field_value(obj, f) == v) == eq for f, eq, v in reqs)


def parse_label_selector(sel):
    reqs = []
    if not sel:
        return reqs
    for term in sel.split(","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", term)
        if m:
            reqs.append(("eq" if m.group(2) != "!=" else "ne", m.group(1).strip(), m.group(3).strip()))
        elif term.startswith("!"):
            reqs.append(("absent", term[1:].strip(), None))
        elif re.match(r"^[A-Za-z0-9_./-]+$", term):
            reqs.append(("present", term, None))
        else:
            raise ApiError(400, f'unable to parse requirement: "{term}"', "BadRequest")
    return reqs


def labels_match(obj, reqs):
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    for op, k, v in reqs:
        if op == "eq" and labels.get(k) != v:
            return False
        if op == "ne" and labels.get(k) == v:
            return False
        if op == "present" and k not in labels:
            return False
        if op == "absent" and k in labels:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Validation as resource.k8s.io/v1's (the parts a DRA driver's slices can get wrong).

def _qualified_name_errors(key, path):
    errs = []
    if "/" in key:
        domain, ident = key.split("/", 1)
        if not domain or len(domain) > MAX_DOMAIN_LEN or not DNS_SUBDOMAIN.match(domain):
            errs.append({"field": path, "message": f'Invalid value: "{key}": the domain must be a '
                         f'DNS subdomain of at most {MAX_DOMAIN_LEN} characters'})
    else:
        ident = key
    if not ident or len(ident) > MAX_ID_LEN or not C_IDENTIFIER.match(ident):
        errs.append({"field": path, "message": f'Invalid value: "{key}": the name must be a C '
                     f'identifier of at most {MAX_ID_LEN} characters'})
    return errs


def _attribute_errors(value, path):
    if not isinstance(value, dict):
        return [{"field": path, "message": "Invalid value: must be an object", "reason": "FieldValueTypeInvalid"}]
    kinds = [k for k in ("int", "bool", "string", "version") if k in value]
    unknown = [k for k in value if k not in ("int", "bool", "string", "version")]
    errs = []
    if unknown:
        errs.append({"field": f"{path}.{unknown[0]}", "message": "Unsupported value: unknown field",
                     "reason": "FieldValueNotSupported"})
    if len(kinds) != 1:
        errs.append({"field": path, "message": "Invalid value: exactly one value must be specified",
                     "reason": "FieldValueRequired" if not kinds else "FieldValueInvalid"})
        return errs
    k = kinds[0]
    v = value[k]
    if k == "int" and (not isinstance(v, int) or isinstance(v, bool)):
        errs.append({"field": f"{path}.int", "message": "Invalid value: must be an integer", "reason": "FieldValueTypeInvalid"})
    elif k == "bool" and not isinstance(v, bool):
        errs.append({"field": f"{path}.bool", "message": "Invalid value: must be a boolean", "reason": "FieldValueTypeInvalid"})
    elif k == "string":
        if not isinstance(v, str):
            errs.append({"field": f"{path}.string", "message": "Invalid value: must be a string", "reason": "FieldValueTypeInvalid"})
        elif len(v) > MAX_ATTR_VALUE:
            errs.append({"field": f"{path}.string", "reason": "FieldValueTooLong",
                         "message": f"Too long: may not be more than {MAX_ATTR_VALUE} bytes"})
    elif k == "version":
        if not isinstance(v, str) or not SEMVER.match(v):
            errs.append({"field": f"{path}.version", "message": "Invalid value: must be a semantic version"})
        elif len(v) > MAX_ATTR_VALUE:
            errs.append({"field": f"{path}.version", "reason": "FieldValueTooLong",
                         "message": f"Too long: may not be more than {MAX_ATTR_VALUE} bytes"})
    return errs


def _meta_errors(meta, name_check=DNS_SUBDOMAIN):
    if not isinstance(meta, dict):
        return [{"field": "metadata", "message": "Invalid value: must be an object",
                 "reason": "FieldValueTypeInvalid"}]
    errs = []
    name = meta.get("name", "")
    gen = meta.get("generateName")
    if gen is not None and not isinstance(gen, str):
        errs.append({"field": "metadata.generateName", "message": "Invalid value: must be a string"})
    if name and not isinstance(name, str):
        errs.append({"field": "metadata.name", "message": "Invalid value: must be a string",
                     "reason": "FieldValueTypeInvalid"})
    elif not name:
        errs.append({"field": "metadata.name", "reason": "FieldValueRequired",
                     "message": "Required value: name or generateName is required"})
    elif len(name) > 253 or not name_check.match(name):
        errs.append({"field": "metadata.name", "message": f'Invalid value: "{name}": a lowercase '
                     "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"})
    labels = meta.get("labels")
    if labels is not None and (not isinstance(labels, dict)
                               or any(not isinstance(v, str) for v in labels.values())):
        errs.append({"field": "metadata.labels", "message": "Invalid value: must map strings to strings"})
    refs = meta.get("ownerReferences")
    if refs is not None:
        if not isinstance(refs, list):
            errs.append({"field": "metadata.ownerReferences", "message": "Invalid value: must be a list"})
        else:
            for i, r in enumerate(refs):
                for f in ("apiVersion", "kind", "name", "uid"):
                    if not isinstance(r, dict) or not r.get(f):
                        errs.append({"field": f"metadata.ownerReferences[{i}].{f}",
                                     "reason": "FieldValueRequired", "message": "Required value"})
    return errs


def _label_name_errors(key, path):
    """metav1validation.ValidateLabelName: [prefix/]name, the prefix a DNS subdomain of at most
    253, the name at most 63 of [-A-Za-z0-9_.] starting and ending alphanumeric."""
    if not isinstance(key, str) or not key:
        return [{"field": path, "reason": "FieldValueRequired", "message": "Required value"}]
    prefix, _, name = key.rpartition("/")
    if ("/" in key and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix))) \
            or len(name) > 63 or not LABEL_PART.match(name):
        return [{"field": path, "message": f'Invalid value: "{key}": name part must consist of '
                 "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character; an optional prefix must be a DNS subdomain"}]
    return []


def _taint_errors(taints, path):
    if not isinstance(taints, list):
        return [{"field": path, "message": "Invalid value: must be a list", "reason": "FieldValueTypeInvalid"}]
    errs = []
    if len(taints) > MAX_TAINTS_PER_DEVICE:
        errs.append({"field": path, "reason": "FieldValueTooMany", "message": f"Too many: "
                     f"{len(taints)}: must have at most {MAX_TAINTS_PER_DEVICE} items"})
    for i, t in enumerate(taints):
        p = f"{path}[{i}]"
        if not isinstance(t, dict):
            errs.append({"field": p, "message": "Invalid value: must be an object"})
            continue
        errs += _label_name_errors(t.get("key"), f"{p}.key")
        value = t.get("value", "")
        if not isinstance(value, str) or (value and (len(value) > 63 or not LABEL_PART.match(value))):
            errs.append({"field": f"{p}.value", "message": f'Invalid value: "{value}": a valid label '
                         "must be 63 characters or less, of alphanumeric characters, '-', '_' or '.', "
                         "starting and ending with an alphanumeric character"})
        effect = t.get("effect")
        if not effect:
            errs.append({"field": f"{p}.effect", "reason": "FieldValueRequired", "message": "Required value"})
        elif effect not in TAINT_EFFECTS:
            errs.append({"field": f"{p}.effect", "reason": "FieldValueNotSupported", "message":
                         f'Unsupported value: "{effect}": supported values: '
                         + ", ".join(f'"{e}"' for e in TAINT_EFFECTS)})
        added = t.get("timeAdded")
        if added is not None and not isinstance(added, str):
            errs.append({"field": f"{p}.timeAdded", "message": "Invalid value: must be a time",
                         "reason": "FieldValueTypeInvalid"})
    return errs


def _has_taints(spec):
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return isinstance(devices, list) and any(
        isinstance(d, dict) and d.get("taints") for d in devices)


def prepare_taints(obj, old, drop):
    """What the API server does to taints before validation: with the DRADeviceTaints gate off
    (drop) it drops them silently, unless the stored object already has some; otherwise it sets
    timeAdded where it is absent (an unchanged taint keeps the stored one's)."""
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, list):
        return
    old_spec = (old or {}).get("spec")
    if drop and not _has_taints(old_spec):
        for d in devices:
            if isinstance(d, dict):
                d.pop("taints", None)
        return
    before = {}
    for d in (old_spec or {}).get("devices") or []:
        for t in (d.get("taints") or []) if isinstance(d, dict) else []:
            if isinstance(t, dict):
                before[(d.get("name"), t.get("key"), t.get("value"), t.get("effect"))] = t.get("timeAdded")
    for d in devices:
        taints = d.get("taints") if isinstance(d, dict) else None
        for t in taints if isinstance(taints, list) else []:
            if isinstance(t, dict) and t.get("timeAdded") is None:
                kept = before.get((d.get("name"), t.get("key"), t.get("value"), t.get("effect")))
                t["timeAdded"] = kept or now_rfc3339()


def validate_slice(obj, old=None):
    errs = _meta_errors(obj.get("metadata") or {})
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return errs + [{"field": "spec", "reason": "FieldValueRequired", "message": "Required value"}]
    driver = spec.get("driver")
    if not driver:
        errs.append({"field": "spec.driver", "reason": "FieldValueRequired", "message": "Required value"})
    elif not isinstance(driver, str) or len(driver) > 63 or not DNS_SUBDOMAIN.match(driver):
        errs.append({"field": "spec.driver", "message": f'Invalid value: "{driver}": must be a DNS '
                     "subdomain of at most 63 characters"})
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        errs.append({"field": "spec.pool", "reason": "FieldValueRequired", "message": "Required value"})
    else:
        pname = pool.get("name")
        if not pname:
            errs.append({"field": "spec.pool.name", "reason": "FieldValueRequired", "message": "Required value"})
        elif not isinstance(pname, str) or len(pname) > 253 or not all(
                DNS_SUBDOMAIN.match(seg) for seg in pname.split("/")):
            errs.append({"field": "spec.pool.name", "message": f'Invalid value: "{pname}": must be '
                         "DNS subdomains separated by '/'"})
        gen = pool.get("generation", 0)
        if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
            errs.append({"field": "spec.pool.generation", "message": f"Invalid value: {gen!r}: must be greater than or equal to 0"})
        count = pool.get("resourceSliceCount")
        if count is None:
            errs.append({"field": "spec.pool.resourceSliceCount", "reason": "FieldValueRequired", "message": "Required value"})
        elif not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errs.append({"field": "spec.pool.resourceSliceCount", "message": f"Invalid value: {count!r}: must be greater than zero"})
    selectors = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
                 if spec.get(k) not in (None, "", False)]
    if not selectors:
        errs.append({"field": "spec", "reason": "FieldValueRequired", "message": "Required value: "
                     "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"})
    elif len(selectors) > 1:
        errs.append({"field": "spec", "message": "Invalid value: exactly one of `nodeName`, "
                     "`nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"})
    node = spec.get("nodeName")
    if node and (not isinstance(node, str) or not DNS_SUBDOMAIN.match(node)):
        errs.append({"field": "spec.nodeName", "message": f'Invalid value: "{node}": must be a DNS subdomain'})
    devices = spec.get("devices", [])
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        errs.append({"field": "spec.devices", "message": "Invalid value: must be a list", "reason": "FieldValueTypeInvalid"})
        devices = []
    max_devices = MAX_DEVICES_WITH_TAINTS if _has_taints(spec) else MAX_DEVICES
    if len(devices) > max_devices:
        errs.append({"field": "spec.devices", "reason": "FieldValueTooMany",
                     "message": f"Too many: {len(devices)}: must have at most {max_devices} items"})
    seen = set()
    for i, d in enumerate(devices):
        p = f"spec.devices[{i}]"
        if not isinstance(d, dict):
            errs.append({"field": p, "message": "Invalid value: must be an object"})
            continue
        name = d.get("name")
        if not name:
            errs.append({"field": f"{p}.name", "reason": "FieldValueRequired", "message": "Required value"})
        elif not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            errs.append({"field": f"{p}.name", "message": f'Invalid value: "{name}": a lowercase RFC '
                         "1123 label must consist of lower case alphanumeric characters or '-', and must "
                         "start and end with an alphanumeric character"})
        elif name in seen:
            errs.append({"field": f"{p}.name", "reason": "FieldValueDuplicate", "message": f'Duplicate value: "{name}"'})
        else:
            seen.add(name)
        attrs = d.get("attributes") or {}
        caps = d.get("capacity") or {}
        if not isinstance(attrs, dict):
            errs.append({"field": f"{p}.attributes", "message": "Invalid value: must be a map"})
            attrs = {}
        if len(attrs) + (len(caps) if isinstance(caps, dict) else 0) > MAX_ATTRS_PER_DEVICE:
            errs.append({"field": p, "reason": "FieldValueTooMany", "message": "Too many: must have at most "
                         f"{MAX_ATTRS_PER_DEVICE} attributes and capacities combined"})
        for key, value in attrs.items():
            ap = f"{p}.attributes[{key}]"
            errs += _qualified_name_errors(key, ap)
            errs += _attribute_errors(value, ap)
        if d.get("taints") is not None:
            errs += _taint_errors(d["taints"], f"{p}.taints")
    if old is not None:
        for f in ("driver", "nodeName"):
            if (old.get("spec") or {}).get(f) != spec.get(f):
                errs.append({"field": f"spec.{f}", "message": "Invalid value: field is immutable"})
    return errs


# ---------------------------------------------------------------------------------------------
# State: every object, one resourceVersion counter, a bounded event history for watches.

def selectable(obj):
    """The parts of an object that field and label selectors look at."""
    if obj is None:
        return None
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta},
            "spec": {k: spec[k] for k in ("nodeName", "driver") if k in spec}}


class Store:
    def __init__(self, history_limit):
        self.lock = threading.Condition()
        self.rv = 1
        self.nodes = {}                # name -> obj
        self.claims = {}               # (ns, name) -> obj
        self.slices = {}               # name -> obj
        self.history = []              # [(rv, resource, type, obj, old)]
        self.history_rvs = []
        self.history_bytes = 0
        self.compacted = 1             # events with rv <= compacted are gone
        self.history_limit = history_limit
        self.watch_epoch = 0           # bumped by /_fake/close-watches
        self.watchers = {}             # id -> description
        self.stopping = False

    def next_rv(self):
        self.rv += 1
        return self.rv

    def record(self, rv, resource, etype, obj, old):
        # Stored objects are replaced, never changed in place, so the history shares them. Of
        # the previous version only what selectors look at is kept, and the history is bounded
        # in events and in bytes: a watch from before what it holds gets 410.
        size = len(json.dumps(obj))
        self.history.append((rv, resource, etype, obj, selectable(old), size))
        self.history_rvs.append(rv)
        self.history_bytes += size
        drop = 0
        while (len(self.history) - drop > self.history_limit
               or self.history_bytes > MAX_HISTORY_BYTES) and drop < len(self.history) - 1:
            self.history_bytes -= self.history[drop][5]
            drop += 1
        if drop:
            self.compacted = self.history_rvs[drop - 1]
            del self.history[:drop]
            del self.history_rvs[:drop]
        self.lock.notify_all()

    def compact(self):
        self.compacted = self.rv
        self.history.clear()
        self.history_rvs.clear()
        self.history_bytes = 0
        self.lock.notify_all()

    def events_after(self, rv):
        i = bisect.bisect_right(self.history_rvs, rv)
        return self.history[i:]


def stamp_new(obj, rv, kind, api_version, namespace=None):
    # kind and apiVersion first, as the API prints them.
    rest = {k: obj.pop(k) for k in list(obj) if k not in ("kind", "apiVersion")}
    obj["kind"] = kind
    obj["apiVersion"] = api_version
    obj.update(rest)
    meta = obj.setdefault("metadata", {})
    if namespace is not None:
        meta["namespace"] = namespace
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("creationTimestamp", now_rfc3339())
    meta["resourceVersion"] = str(rv)
    meta.setdefault("generation", 1)
    return obj


# ---------------------------------------------------------------------------------------------

class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, ctx, opts, port=0):
        super().__init__(("127.0.0.1", port), Handler)
        self.ctx = ctx
        self.opts = opts
        self.dir = opts.dir
        self.token_path = os.path.join(opts.dir, "token")
        self.writes_path = os.path.join(opts.dir, "writes.jsonl")
        self.store = Store(opts.history)
        self.faults = []
        self.faults_lock = threading.Lock()
        self.hanging = 0               # requests held by a "hang" fault right now
        self.huge_sent = 0             # bytes of "huge" bodies written to clients
        self.huge_streaming = 0        # "huge" answers being written now
        self.log_lock = threading.Lock()
        self.requests = []
        self.seq = 0
        self.conn_sem = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.token_cache = (None, "")

    # The TLS handshake happens in the connection's own thread, so a client that connects and
    # says nothing holds up nobody else.
    def process_request(self, request, client_address):
        if not self.conn_sem.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            request.settimeout(10)
            # Headers and body go out in separate writes: without this, Nagle and the client's
            # delayed ACK add 40 ms to every answer.
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                tls = self.ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                request.close()
                return
            super().process_request_thread(tls, client_address)
        finally:
            self.conn_sem.release()

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, BrokenPipeError)):
            return
        super().handle_error(request, client_address)

    def current_token(self):
        try:
            st = os.stat(self.token_path)
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self.token_cache[0] != key:
                with open(self.token_path) as f:
                    self.token_cache = (key, f.read().strip())
        except OSError:
            return None
        return self.token_cache[1] or None

    def rotate_token(self):
        write_atomic(self.token_path, secrets.token_urlsafe(32) + "\n")

    def take_fault(self, method, target, is_watch, reused):
        with self.faults_lock:
            for f in self.faults:
                if f["method"] not in ("*", method):
                    continue
                if not target.startswith(f["path_prefix"]):
                    continue
                if "watch" in f and bool(f["watch"]) != is_watch:
                    continue
                # HTTP clients (libcurl among them) silently send a request again on a new
                # connection when a kept-alive one closes before any answer, so a drop there
                # is not counted: "count" drops are all seen by the client.
                if f["action"] == "drop" and reused:
                    return dict(f)
                if f["remaining"] > 0:
                    f["remaining"] -= 1
                if f["remaining"] == 0:
                    self.faults.remove(f)
                return dict(f)
        return None

    def log_request(self, method, target, status, body, is_write, fault=None):
        with self.log_lock:
            self.seq += 1
            entry = {"seq": self.seq, "time": time.time(), "method": method, "path": target,
                     "status": status}
            if fault:
                entry["fault"] = fault
            self.requests.append(dict(entry))
            if len(self.requests) > 100000:
                del self.requests[:50000]
            if not is_write:
                return
            if body:
                try:
                    entry["body"] = json.loads(body)
                except ValueError:
                    entry["body"] = body.decode("utf-8", "replace")
            else:
                entry["body"] = None
            with open(self.writes_path, "a") as f:
                f.write(json.dumps(entry) + "\n")


def write_atomic(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


class Dropped(Exception):
    """The answer is no answer: the connection is closed."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-apiserver"
    timeout = 120  # an idle keep-alive connection ends after this
    error_content_type = "application/json"

    def log_message(self, fmt, *args):
        if self.server.opts.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    # -- plumbing --------------------------------------------------------------------------

    def send_error(self, code, message=None, explain=None):
        # http.server's own refusals (bad request line, 414, 431, 501) as v1 Status JSON too.
        self.close_connection = True
        self.status_sent = 0
        try:
            self.send_json(code, status_obj(code, message or explain or "bad request",
                                            REASONS.get(code, "BadRequest")))
        except OSError:
            pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def send_json(self, code, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_raw(code, body, headers)

    def send_raw(self, code, body, headers=None, content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.status_sent = code
        self.flush_log()
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline(100)
                try:
                    n = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise ApiError(400, "malformed chunked request body")
                if n == 0:
                    self.rfile.readline(100)
                    return data
                if len(data) + n > MAX_BODY:
                    self.close_connection = True
                    raise ApiError(413, "Request entity too large: limit is 3145728")
                data += self.rfile.read(n)
                self.rfile.readline(100)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            n = int(length)
        except ValueError:
            self.close_connection = True
            raise ApiError(400, "invalid Content-Length")
        if n < 0:
            self.close_connection = True
            raise ApiError(400, "invalid Content-Length")
        if n > MAX_BODY:
            # Read and discard a moderately large body so the client sees the answer rather than
            # a broken pipe; beyond that the connection is simply not read any further.
            self.close_connection = True
            left = n if n <= DRAIN_LIMIT else 0
            while left > 0:
                chunk = self.rfile.read(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
            raise ApiError(413, f"Request entity too large: limit is {MAX_BODY}")
        return self.rfile.read(n)

    def client_gone(self):
        """True when the client closed its side (or sent something) while we hold its request."""
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):
            return True
        if not r:
            return False
        try:
            if self.connection.pending():
                return False
            self.connection.setblocking(False)
            try:
                data = self.connection.recv(1)
            finally:
                self.connection.setblocking(True)
                self.connection.settimeout(self.timeout)
            return not data
        except ssl.SSLWantReadError:
            return False
        except (OSError, ssl.SSLError):
            return True

    def drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise Dropped()

    def dispatch(self, method):
        self.status_sent = 0
        self.served = getattr(self, "served", 0) + 1   # requests on this connection
        target = self.path
        parts = urlsplit(target)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        is_watch = query.get("watch", "") in ("true", "1") or "/watch/" in path
        body = b""
        fault = None
        is_write = method in ("POST", "PUT", "PATCH", "DELETE") and not path.startswith("/_fake/")
        # Logged (writes.jsonl too) before the answer goes out: a client that has its answer
        # finds its request in the log.
        self.pending_log = None if path.startswith("/_fake/") else {
            "method": method, "target": target, "body": b"", "is_write": is_write, "fault": None}
        try:
            try:
                body = self.read_body()
                if self.pending_log:
                    self.pending_log["body"] = body
                token = self.server.current_token()
                auth = self.headers.get("Authorization", "")
                if not token or auth != f"Bearer {token}":
                    raise ApiError(401, "Unauthorized", "Unauthorized")
                if path.startswith("/_fake/"):
                    self.control(method, path, query, body)
                    return
                fault = self.server.take_fault(method, target, is_watch, self.served > 1)
                if fault:
                    self.pending_log["fault"] = fault["action"]
                if fault:
                    self.apply_fault(fault, is_watch)
                    if fault["action"] != "delay":
                        return
                self.api(method, path, query, body, is_watch)
            except ApiError as e:
                if e.code in (413, 411):
                    self.close_connection = True
                self.send_json(e.code, e.status, e.headers)
            except (Dropped, OSError, ssl.SSLError):
                raise
            except Exception as e:  # a bug here must show as a 500 naming it, not a dead socket
                import traceback
                traceback.print_exc()
                self.close_connection = True
                if not self.status_sent:
                    self.send_json(500, status_obj(500, f"Internal error occurred: fake server: {e!r}"))
        except Dropped:
            pass
        finally:
            self.flush_log()   # no answer was sent (dropped), or a watch's stream ended

    def flush_log(self):
        p = getattr(self, "pending_log", None)
        if p:
            self.pending_log = None
            self.server.log_request(p["method"], p["target"], self.status_sent, p["body"],
                                    p["is_write"], p["fault"])

    def apply_fault(self, fault, is_watch):
        action = fault["action"]
        if action == "drop":
            self.drop()
        if action == "hang":
            deadline = time.monotonic() + min(HANG_SECONDS, fault.get("seconds", HANG_SECONDS))
            with self.server.faults_lock:
                self.server.hanging += 1
            try:
                while time.monotonic() < deadline and not self.client_gone():
                    time.sleep(0.05)
            finally:
                with self.server.faults_lock:
                    self.server.hanging -= 1
            self.drop()
        if action == "delay":
            time.sleep(min(max(fault.get("delay_ms", 1000), 0), HANG_SECONDS * 1000) / 1000.0)
            return
        if action == "huge":
            self.stream_huge(min(max(int(fault.get("bytes", HUGE_BYTES)), 0), 1 << 40))
            return
        if action == "garbage":
            junk = b'{"kind": "ResourceSliceList", "items": [{"metadata": \x00\xff garbage'
            if is_watch:
                self.start_chunked()
                self.write_chunk(junk + b"\n")
                self.end_chunked()
            else:
                self.send_raw(200, junk)
            return
        if action == "expired":
            self.start_chunked()
            if fault.get("bookmark"):
                self.send_event("BOOKMARK", {"kind": "ResourceSlice", "apiVersion": RESOURCE_API,
                                             "metadata": {"resourceVersion": str(self.server.store.rv)}})
            self.send_event("ERROR", status_obj(410, "too old resource version (injected fault)", "Expired"))
            self.end_chunked()
            return
        code = int(action)
        headers = {}
        details = None
        msg = {401: "Unauthorized",
               403: 'resourceslices.resource.k8s.io is forbidden: User "system:serviceaccount:'
                    'kube-system:vfiod-dra-plugin" cannot do this (injected fault)',
               409: "Operation cannot be fulfilled: the object has been modified; please apply "
                    "your changes to the latest version and try again (injected fault)",
               410: "too old resource version (injected fault)",
               429: "Too many requests, please try again later. (injected fault)",
               500: "Internal error occurred: injected fault",
               503: "service unavailable (injected fault)"}.get(code, f"injected fault {code}")
        if code == 429:
            headers["Retry-After"] = "1"
            details = {"retryAfterSeconds": 1}
        self.send_json(code, status_obj(code, msg, REASONS.get(code, "InternalError"), details), headers)

    def stream_huge(self, total):
        self.start_chunked()
        with self.server.faults_lock:
            self.server.huge_streaming += 1
        try:
            data = b'{"kind":"ResourceClaim","metadata":{"name":"huge","annotations":{"a":"'
            data += b"a" * ((64 << 10) - len(data))
            sent = 0
            while sent < total:
                n = min(len(data), total - sent)
                self.write_chunk(data[:n])
                sent += n
                data = b"a" * (64 << 10)
                with self.server.faults_lock:
                    self.server.huge_sent += n
            self.end_chunked()
        except (OSError, ssl.SSLError):
            pass  # the client stopped reading: what a bounded one does
        finally:
            with self.server.faults_lock:
                self.server.huge_streaming -= 1

    # -- chunked streaming (watch) -----------------------------------------------------------

    def start_chunked(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Connection", "close")
        self.end_headers()
        self.status_sent = 200
        self.close_connection = True

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self):
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    # -- test control -------------------------------------------------------------------------

    def control(self, method, path, query, body):
        srv = self.server
        st = srv.store
        if method == "POST" and path == "/_fake/nodes":
            obj = self.json_body(body)
            name = control_name(obj)
            if not name:
                raise ApiError(422, "node needs metadata.name")
            self.upsert(st.nodes, name, obj, "nodes", "Node", "v1")
        elif method == "POST" and path == "/_fake/claims":
            obj = self.json_body(body)
            name = control_name(obj)
            ns = (obj["metadata"].get("namespace") or "default") if name else None
            if not name or not isinstance(ns, str):
                raise ApiError(422, "claim needs metadata.name")
            self.upsert(st.claims, (ns, name), obj, "resourceclaims", "ResourceClaim", RESOURCE_API, ns)
        elif method == "POST" and path == "/_fake/slices":
            obj = self.json_body(body)
            name = control_name(obj)
            if not name:
                raise ApiError(422, "slice needs metadata.name")
            self.upsert(st.slices, name, obj, "resourceslices", "ResourceSlice", RESOURCE_API)
        elif method == "DELETE" and path.startswith("/_fake/claims/"):
            rest = path[len("/_fake/claims/"):].split("/")
            if len(rest) != 2:
                raise ApiError(400, "use /_fake/claims/{namespace}/{name}")
            with st.lock:
                old = st.claims.pop((rest[0], rest[1]), None)
                if not old:
                    raise not_found("resourceclaims.resource.k8s.io", rest[1])
                rv = st.next_rv()
                gone = copy.deepcopy(old)
                gone["metadata"]["resourceVersion"] = str(rv)
                st.record(rv, "resourceclaims", "DELETED", gone, old)
            self.send_json(200, gone)
        elif method == "POST" and path == "/_fake/faults":
            f = self.json_body(body)
            action = str(f.get("action", ""))
            if action not in ("hang", "drop", "garbage", "delay", "expired", "huge") and not re.match(r"^[1-5]\d\d$", action):
                raise ApiError(400, f'unknown fault action "{action}"')
            count = f.get("count", 1)
            if not isinstance(count, int) or isinstance(count, bool):
                raise ApiError(400, "count must be an integer (negative: every request)")
            fault = {"method": str(f.get("method", "*")).upper(), "path_prefix": str(f.get("path_prefix", "/")),
                     "action": action, "remaining": count if count != 0 else 1}
            for k, types in (("watch", (bool,)), ("bookmark", (bool,)), ("delay_ms", (int, float)),
                             ("seconds", (int, float)), ("bytes", (int,))):
                if k in f:
                    if not isinstance(f[k], types) or (k not in ("watch", "bookmark") and isinstance(f[k], bool)):
                        raise ApiError(400, f"fault field {k} has the wrong type")
                    fault[k] = f[k]
            with srv.faults_lock:
                srv.faults.append(fault)
            self.send_json(201, fault)
        elif method == "DELETE" and path == "/_fake/faults":
            with srv.faults_lock:
                srv.faults.clear()
            self.send_json(200, {"faults": []})
        elif method == "GET" and path == "/_fake/faults":
            with srv.faults_lock:
                self.send_json(200, list(srv.faults))
        elif method == "GET" and path == "/_fake/writes":
            since = int_param(query, "since")
            # From the file, not memory: slice bodies of a big inventory add up.
            with srv.log_lock:
                out = [w for w in read_jsonl(srv.writes_path) if w.get("seq", 0) > since]
            self.send_json(200, out)
        elif method == "GET" and path == "/_fake/requests":
            since = int_param(query, "since")
            with srv.log_lock:
                out = [r for r in srv.requests if r["seq"] > since]
            self.send_json(200, out)
        elif method == "POST" and path == "/_fake/rotate-token":
            srv.rotate_token()
            self.send_json(200, {"token_file": srv.token_path})
        elif method == "POST" and path == "/_fake/compact":
            with st.lock:
                st.compact()
                rv = st.rv
            self.send_json(200, {"compacted": str(rv)})
        elif method == "POST" and path == "/_fake/close-watches":
            with st.lock:
                st.watch_epoch += 1
                st.lock.notify_all()
            self.send_json(200, {})
        elif method == "GET" and path == "/_fake/state":
            with st.lock:
                state = {"resourceVersion": str(st.rv), "compacted": str(st.compacted),
                         "watchers": list(st.watchers.values()),
                         "slices": sorted(st.slices), "claims": sorted(f"{a}/{b}" for a, b in st.claims),
                         "nodes": sorted(st.nodes)}
            with srv.faults_lock:
                state["hanging"] = srv.hanging
                state["huge_sent"] = srv.huge_sent
                state["huge_streaming"] = srv.huge_streaming
            self.send_json(200, state)
        else:
            raise ApiError(404, f"no control endpoint {method} {path}", "NotFound")

    # A control upsert: stored as given (a replaced object keeps its uid unless one is given)
    # and told to the watches.
    def upsert(self, objects, key, obj, resource, kind, api_version, ns=None):
        st = self.server.store
        with st.lock:
            old = objects.get(key)
            rv = st.next_rv()
            if old and not obj["metadata"].get("uid"):
                obj["metadata"]["uid"] = old["metadata"]["uid"]
            stamp_new(obj, rv, kind, api_version, ns)
            objects[key] = obj
            st.record(rv, resource, "MODIFIED" if old else "ADDED", obj, old)
        self.send_json(200 if old else 201, obj)

    @staticmethod
    def json_body(body):
        try:
            obj = json.loads(body or b"null")
        except ValueError as e:
            raise ApiError(400, f"couldn't parse the request body as JSON: {e}", "BadRequest")
        if not isinstance(obj, dict):
            raise ApiError(400, "the request body must be a JSON object", "BadRequest")
        return obj

    # -- the API --------------------------------------------------------------------------------

    def api(self, method, path, query, body, is_watch):
        if path.startswith("/apis/resource.k8s.io/v1/watch/") or path.startswith("/api/v1/watch/"):
            path = path.replace("/watch/", "/", 1)
            is_watch = True
        m = NODE_RE.match(path)
        if m:
            return self.nodes_api(method, m.group(1), query, is_watch)
        m = SLICE_RE.match(path)
        if m:
            return self.slices_api(method, m.group(1), query, body, is_watch)
        m = CLAIMS_NS_RE.match(path)
        if m:
            return self.claims_api(method, m.group(1), m.group(2), query, is_watch)
        if path == CLAIMS_ALL_PATH:
            return self.claims_api(method, None, None, query, is_watch)
        raise ApiError(404, "the server could not find the requested resource", "NotFound",
                       {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})

    def nodes_api(self, method, name, query, is_watch):
        st = self.server.store
        if method != "GET":
            raise ApiError(405, f"the server does not allow this method on the requested resource ({method})", "MethodNotAllowed")
        if name:
            with st.lock:
                obj = st.nodes.get(name)
                if obj is None:
                    raise not_found("nodes", name)
                obj = copy.deepcopy(obj)
            return self.send_json(200, obj)
        sel = parse_field_selector(query.get("fieldSelector"), ("metadata.name",))
        lsel = parse_label_selector(query.get("labelSelector"))
        match = lambda o: fields_match(o, sel) and labels_match(o, lsel)  # noqa: E731
        if is_watch:
            return self.watch("nodes", match, query, "Node", "v1")
        with st.lock:
            items = [copy.deepcopy(o) for _, o in sorted(st.nodes.items()) if match(o)]
            rv = st.rv
        self.send_json(200, {"kind": "NodeList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(rv)}, "items": items})

    def claims_api(self, method, ns, name, query, is_watch):
        st = self.server.store
        if method != "GET":
            raise ApiError(405, f"the fake server only serves ResourceClaims for reading ({method}); "
                                "use POST /_fake/claims", "MethodNotAllowed")
        if name:
            with st.lock:
                obj = st.claims.get((ns, name))
                if obj is None:
                    raise not_found("resourceclaims.resource.k8s.io", name)
                obj = copy.deepcopy(obj)
            return self.send_json(200, obj)
        sel = parse_field_selector(query.get("fieldSelector"), ("metadata.name", "metadata.namespace"))
        lsel = parse_label_selector(query.get("labelSelector"))
        match = lambda o: ((ns is None or o["metadata"].get("namespace") == ns)  # noqa: E731
                           and fields_match(o, sel) and labels_match(o, lsel))
        if is_watch:
            return self.watch("resourceclaims", match, query, "ResourceClaim", RESOURCE_API)
        with st.lock:
            items = [copy.deepcopy(o) for _, o in sorted(st.claims.items()) if match(o)]
            rv = st.rv
        self.send_json(200, {"kind": "ResourceClaimList", "apiVersion": RESOURCE_API,
                             "metadata": {"resourceVersion": str(rv)}, "items": items})

    def slices_api(self, method, name, query, body, is_watch):
        st = self.server.store
        if name is None:
            sel = parse_field_selector(query.get("fieldSelector"),
                                       ("metadata.name", "spec.nodeName", "spec.driver"))
            lsel = parse_label_selector(query.get("labelSelector"))
            match = lambda o: fields_match(o, sel) and labels_match(o, lsel)  # noqa: E731
            if method == "GET" and is_watch:
                return self.watch("resourceslices", match, query, "ResourceSlice", RESOURCE_API)
            if method == "GET":
                return self.list_slices(match, query)
            if method == "POST":
                return self.create_slice(body)
            if method == "DELETE":
                with st.lock:
                    doomed = [n for n, o in sorted(st.slices.items()) if match(o)]
                    out = [self.delete_locked(n) for n in doomed]
                    rv = st.rv
                return self.send_json(200, {"kind": "ResourceSliceList", "apiVersion": RESOURCE_API,
                                            "metadata": {"resourceVersion": str(rv)}, "items": out})
            raise ApiError(405, f"method {method} not allowed on resourceslices", "MethodNotAllowed")
        if method == "GET":
            with st.lock:
                obj = st.slices.get(name)
                if obj is None:
                    raise not_found("resourceslices.resource.k8s.io", name)
                obj = copy.deepcopy(obj)
            return self.send_json(200, obj)
        if method == "PUT":
            return self.update_slice(name, self.decode_slice(body))
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(415, f'the body of the request was in an unknown format - accepted media '
                               f'types include: application/merge-patch+json (fake server); got "{ctype}"',
                               "UnsupportedMediaType")
            patch = self.json_body(body)
            with st.lock:
                cur = st.slices.get(name)
                if cur is None:
                    raise not_found("resourceslices.resource.k8s.io", name)
                merged = merge_patch(copy.deepcopy(cur), patch)
                if not (patch.get("metadata") or {}).get("resourceVersion"):
                    merged["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                return self.update_slice(name, merged)
        if method == "DELETE":
            opts = self.json_body(body) if body.strip() else {}
            pre = opts.get("preconditions") or {}
            with st.lock:
                cur = st.slices.get(name)
                if cur is None:
                    raise not_found("resourceslices.resource.k8s.io", name)
                if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                    raise conflict("resourceslices.resource.k8s.io", name,
                                   f'Precondition failed: UID in precondition: {pre["uid"]}, UID in object meta: {cur["metadata"]["uid"]}')
                if pre.get("resourceVersion") and pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
                    raise conflict("resourceslices.resource.k8s.io", name,
                                   f'Precondition failed: ResourceVersion in precondition: {pre["resourceVersion"]}, '
                                   f'ResourceVersion in object meta: {cur["metadata"]["resourceVersion"]}')
                out = self.delete_locked(name)
            return self.send_json(200, out)
        raise ApiError(405, f"method {method} not allowed on a resourceslice", "MethodNotAllowed")

    def list_slices(self, match, query):
        st = self.server.store
        try:
            limit = int(query.get("limit", "0") or 0)
        except ValueError:
            raise ApiError(400, "limit must be an integer")
        after = ""
        if query.get("continue"):
            try:
                after = json.loads(base64.urlsafe_b64decode(query["continue"]))["start"]
            except (ValueError, KeyError, TypeError):
                raise ApiError(400, "continue key is not valid: invalid encoding", "BadRequest")
        with st.lock:
            items = [copy.deepcopy(o) for n, o in sorted(st.slices.items()) if n > after and match(o)]
            rv = st.rv
        meta = {"resourceVersion": str(rv)}
        if limit > 0 and len(items) > limit:
            items = items[:limit]
            token = json.dumps({"start": items[-1]["metadata"]["name"], "rv": rv}).encode()
            meta["continue"] = base64.urlsafe_b64encode(token).decode()
        self.send_json(200, {"kind": "ResourceSliceList", "apiVersion": RESOURCE_API,
                             "metadata": meta, "items": items})

    def decode_slice(self, body):
        ctype = self.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if ctype not in ("application/json", ""):
            raise ApiError(415, f'the body of the request was in an unknown format - accepted media '
                           f'types include: application/json; got "{ctype}"', "UnsupportedMediaType")
        obj = self.json_body(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != RESOURCE_API:
            raise ApiError(400, f"the API version in the data ({api_version}) does not match the "
                           f"expected API version ({RESOURCE_API})", "BadRequest")
        if kind and kind != "ResourceSlice":
            raise ApiError(400, f"the kind in the data ({kind}) does not match the expected kind "
                           "(ResourceSlice)", "BadRequest")
        if not isinstance(obj.get("metadata", {}), dict):
            raise ApiError(400, "metadata must be an object", "BadRequest")
        obj.setdefault("metadata", {})
        obj.pop("status", None)
        return obj

    def create_slice(self, body):
        st = self.server.store
        obj = self.decode_slice(body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise ApiError(500, "Internal error occurred: resourceVersion should not be set on "
                           "objects to be created", "InternalError")
        for f in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(f, None)
        with st.lock:
            if not meta.get("name") and isinstance(meta.get("generateName"), str):
                alphabet = "bcdfghjklmnpqrstvwxz2456789"
                base = meta["generateName"][:253 - 5]
                for _ in range(100):
                    cand = base + "".join(random.choice(alphabet) for _ in range(5))
                    if cand not in st.slices:
                        meta["name"] = cand
                        break
            name = meta.get("name", "")
            prepare_taints(obj, None, self.server.opts.drop_device_taints)
            errs = validate_slice(obj)
            if errs:
                raise invalid("ResourceSlice", "resourceslices", name, errs)
            if name in st.slices:
                raise ApiError(409, f'resourceslices.resource.k8s.io "{name}" already exists',
                               "AlreadyExists", {"name": name, "group": RESOURCE_GROUP, "kind": "resourceslices"})
            rv = st.next_rv()
            stamp_new(obj, rv, "ResourceSlice", RESOURCE_API)
            st.slices[name] = obj
            st.record(rv, "resourceslices", "ADDED", obj, None)
            out = copy.deepcopy(obj)
        self.send_json(201, out)

    def update_slice(self, name, obj):
        st = self.server.store
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object", "BadRequest")
        if meta.get("name") and meta["name"] != name:
            raise ApiError(400, f"the name of the object ({meta['name']}) does not match the name on "
                           f"the URL ({name})", "BadRequest")
        meta["name"] = name
        with st.lock:
            cur = st.slices.get(name)
            if cur is None:
                raise not_found("resourceslices.resource.k8s.io", name)
            want_rv = meta.get("resourceVersion")
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                raise conflict("resourceslices.resource.k8s.io", name)
            if meta.get("uid") and meta["uid"] != cur["metadata"]["uid"]:
                raise conflict("resourceslices.resource.k8s.io", name,
                               f'Precondition failed: UID in precondition: {meta["uid"]}, UID in object meta: {cur["metadata"]["uid"]}')
            prepare_taints(obj, cur, self.server.opts.drop_device_taints)
            errs = validate_slice(obj, cur)
            if errs:
                raise invalid("ResourceSlice", "resourceslices", name, errs)
            # Server-owned metadata is kept from the stored object, as the API does.
            for f in ("uid", "creationTimestamp", "generation"):
                meta[f] = cur["metadata"].get(f)
            meta.pop("generateName", None)
            if cur["metadata"].get("generateName"):
                meta["generateName"] = cur["metadata"]["generateName"]
            obj["kind"], obj["apiVersion"] = "ResourceSlice", RESOURCE_API
            if obj.get("spec") != cur.get("spec"):
                meta["generation"] = cur["metadata"].get("generation", 1) + 1
            meta["resourceVersion"] = cur["metadata"]["resourceVersion"]
            if obj == cur:
                return self.send_json(200, copy.deepcopy(cur))   # a no-op update writes nothing
            rv = st.next_rv()
            meta["resourceVersion"] = str(rv)
            st.slices[name] = obj
            st.record(rv, "resourceslices", "MODIFIED", obj, cur)
            out = copy.deepcopy(obj)
        self.send_json(200, out)

    def delete_locked(self, name):
        st = self.server.store
        old = st.slices.pop(name)
        rv = st.next_rv()
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = str(rv)
        st.record(rv, "resourceslices", "DELETED", gone, old)
        return gone

    # -- watch ----------------------------------------------------------------------------------

    def watch(self, resource, match, query, kind, api_version):
        st = self.server.store
        try:
            timeout = int(query.get("timeoutSeconds", DEFAULT_WATCH_SECONDS) or DEFAULT_WATCH_SECONDS)
        except ValueError:
            raise ApiError(400, "timeoutSeconds must be an integer")
        # As the API: 0 (or less) means the server's default.
        timeout = min(timeout, MAX_WATCH_SECONDS) if timeout > 0 else DEFAULT_WATCH_SECONDS
        bookmarks = query.get("allowWatchBookmarks") == "true"
        initial = query.get("sendInitialEvents") == "true"
        rv_param = query.get("resourceVersion", "")
        with st.lock:
            if rv_param in ("", "0") or initial:
                initial = True
                cursor = st.rv
                store = {"nodes": st.nodes, "resourceslices": st.slices, "resourceclaims": st.claims}[resource]
                first = [copy.deepcopy(o) for _, o in sorted(store.items()) if match(o)]
            else:
                try:
                    cursor = int(rv_param)
                except ValueError:
                    raise ApiError(400, f'invalid resource version "{rv_param}"', "BadRequest")
                first = []
                if cursor < st.compacted:
                    expired = cursor
                else:
                    expired = None
            epoch = st.watch_epoch
            wid = object()
            st.watchers[id(wid)] = {"resource": resource, "path": self.path, "since": str(cursor)}
        try:
            if not initial and expired is not None:
                # As kube-apiserver's watch cache does: 200, then one ERROR event, then the end.
                if self.server.opts.gone_as_http:
                    raise ApiError(410, f"too old resource version: {expired} ({st.compacted})", "Expired")
                self.start_chunked()
                self.send_event("ERROR", status_obj(410, f"too old resource version: {expired} "
                                                    f"({st.compacted})", "Expired"))
                self.end_chunked()
                return
            self.start_chunked()
            for o in first:
                self.send_event("ADDED", o)
            if initial and query.get("sendInitialEvents") == "true":
                self.send_event("BOOKMARK", {"kind": kind, "apiVersion": api_version, "metadata": {
                    "resourceVersion": str(cursor),
                    "annotations": {"k8s.io/initial-events-end": "true"}}})
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.server.opts.bookmark_interval
            while True:
                with st.lock:
                    if cursor < st.compacted:
                        # This watcher fell behind the bounded history: tell it, as a real one would.
                        self.send_event("ERROR", status_obj(410, f"too old resource version: {cursor} "
                                                            f"({st.compacted})", "Expired"))
                        break
                    events = st.events_after(cursor)
                    if not events:
                        if st.stopping or st.watch_epoch != epoch:
                            break
                        st.lock.wait(0.2)
                        events = st.events_after(cursor)
                    if st.watch_epoch != epoch:
                        break
                    latest = st.rv
                for rv, res, etype, obj, old, _ in events:
                    cursor = rv
                    if res != resource:
                        continue
                    now_in = match(obj)
                    was_in = old is not None and match(old)
                    if etype == "DELETED":
                        if was_in or now_in:
                            self.send_event("DELETED", obj)
                    elif etype == "ADDED" or not was_in:
                        if now_in:
                            self.send_event("ADDED", obj)
                    elif now_in:
                        self.send_event("MODIFIED", obj)
                    else:
                        self.send_event("DELETED", obj)
                if not events:
                    cursor = max(cursor, latest)
                now = time.monotonic()
                if now >= deadline:
                    break
                if bookmarks and now >= next_bookmark:
                    self.send_event("BOOKMARK", {"kind": kind, "apiVersion": api_version,
                                                 "metadata": {"resourceVersion": str(cursor)}})
                    next_bookmark = now + self.server.opts.bookmark_interval
                if self.client_gone():
                    raise Dropped()
            self.end_chunked()
        except (OSError, ssl.SSLError):
            self.close_connection = True
            raise Dropped()
        finally:
            with st.lock:
                st.watchers.pop(id(wid), None)

    def send_event(self, etype, obj):
        self.write_chunk(json.dumps({"type": etype, "object": obj}).encode() + b"\n")


def read_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def int_param(query, name, default=0):
    try:
        return int(query.get(name) or default)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer", "BadRequest")


def control_name(obj):
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    return meta["name"]


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = merge_patch(target.get(k), v)
    return target


# ---------------------------------------------------------------------------------------------

def make_certs(d):
    """A CA and a server certificate for 127.0.0.1/localhost, with the openssl CLI."""
    def run(*args):
        r = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            sys.exit(f"fake-apiserver: openssl {' '.join(args)} failed: {r.stderr.strip()}")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3",
        "-subj", "/CN=fake-apiserver test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash")
    run("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid:always\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-set_serial", "0x" + secrets.token_hex(8), "-days", "3", "-extfile", "server.ext",
        "-out", "server.crt")


def save_state(srv):
    st = srv.store
    with st.lock:
        state = {"resourceVersion": st.rv, "nodes": list(st.nodes.values()),
                 "claims": list(st.claims.values()), "slices": list(st.slices.values())}
    write_atomic(os.path.join(srv.dir, "state.json"), json.dumps(state))


def load_state(srv):
    st = srv.store
    try:
        with open(os.path.join(srv.dir, "state.json")) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    with st.lock:
        st.rv = max(st.rv, int(state.get("resourceVersion", 1)))
        st.compacted = st.rv   # a new watch cache: older resourceVersions are gone
        for o in state.get("nodes", []):
            st.nodes[o["metadata"]["name"]] = o
        for o in state.get("claims", []):
            st.claims[(o["metadata"]["namespace"], o["metadata"]["name"])] = o
        for o in state.get("slices", []):
            st.slices[o["metadata"]["name"]] = o
    srv.seq = max([w.get("seq", 0) for w in read_jsonl(srv.writes_path)] or [0])
    if not srv.current_token():
        srv.rotate_token()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="where ca.crt, token, kubeconfig, server.json go")
    ap.add_argument("--node", action="append", default=[], help="a Node to have from the start")
    ap.add_argument("--history", type=int, default=10000, help="watch events kept (older: 410)")
    ap.add_argument("--bookmark-interval", type=float, default=1.0,
                    help="seconds between BOOKMARK events for watches that allow them")
    ap.add_argument("--gone-as-http", action="store_true",
                    help="answer a watch from a compacted resourceVersion with HTTP 410 rather than "
                         "with 200 and an ERROR event (what kube-apiserver does)")
    ap.add_argument("--restart", action="store_true",
                    help="come back as the server that last ran in DIR: same port, CA, token, "
                         "objects (saved at SIGTERM) and write log; watch history is gone")
    ap.add_argument("--drop-device-taints", action="store_true",
                    help="drop spec.devices[].taints from written ResourceSlices silently, as an API "
                         "server with the DRADeviceTaints feature gate off does")
    ap.add_argument("--verbose", action="store_true")
    opts = ap.parse_args()
    threading.stack_size(512 * 1024)  # thousands of connection threads stay cheap
    opts.dir = os.path.abspath(opts.dir)
    os.makedirs(opts.dir, exist_ok=True)
    port = 0
    port_file = os.path.join(opts.dir, "port")
    if opts.restart:
        try:
            with open(port_file) as f:
                port = int(f.read())
        except (OSError, ValueError):
            sys.exit(f"fake-apiserver: --restart: no usable {port_file} from an earlier run")
    try:
        os.unlink(os.path.join(opts.dir, "server.json"))
    except FileNotFoundError:
        pass

    have_certs = all(os.path.exists(os.path.join(opts.dir, f)) for f in ("ca.crt", "server.crt", "server.key"))
    if not (opts.restart and have_certs):
        make_certs(opts.dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(os.path.join(opts.dir, "server.crt"), os.path.join(opts.dir, "server.key"))
    ctx.set_alpn_protocols(["http/1.1"])

    srv = Server(ctx, opts, port)
    port = srv.server_address[1]
    write_atomic(port_file, f"{port}\n")
    url = f"https://127.0.0.1:{port}"
    ca = os.path.join(opts.dir, "ca.crt")
    token = os.path.join(opts.dir, "token")
    kubeconfig = os.path.join(opts.dir, "kubeconfig")
    if opts.restart:
        load_state(srv)
    else:
        srv.rotate_token()
        open(srv.writes_path, "w").close()
    with open(kubeconfig, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
    certificate-authority: {ca}
users:
- name: fake
  user:
    tokenFile: {token}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
current-context: fake
""")
    for n in opts.node:
        with srv.store.lock:
            rv = srv.store.next_rv()
            obj = stamp_new({"metadata": {"name": n}, "spec": {}, "status": {}}, rv, "Node", "v1")
            srv.store.nodes[n] = obj
            srv.store.record(rv, "nodes", "ADDED", obj, None)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    write_atomic(os.path.join(opts.dir, "server.json"), json.dumps(
        {"url": url, "ca_file": ca, "token_file": token, "kubeconfig": kubeconfig,
         "pid": os.getpid()}) + "\n")
    while not stop.wait(0.2):
        pass
    with srv.store.lock:
        srv.store.stopping = True
        srv.store.lock.notify_all()
    srv.shutdown()
    srv.server_close()
    save_state(srv)
    # Handler threads are daemons: a hung request or a watch does not hold up the exit.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
