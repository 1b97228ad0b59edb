"""OpenAPI v3 discovery and server-side field validation, enough for ``kubectl create`` / ``apply``
with validation on.

kubectl (1.27 and later) reads ``/openapi/v3``, then the group-version document, and looks for the
``fieldValidation`` query parameter on the kind's PATCH operation; when it is there, kubectl leaves
validation to the server and sends ``fieldValidation=Strict``.  The documents here describe the
operations of the resources the simulator serves (with their ``x-kubernetes-group-version-kind``) but
not full schemas; :func:`unknown_fields` checks field names of Pods and Secrets at the levels where a
typo matters (object, metadata, pod spec, containers), as the server's strict decoder would.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, FrozenSet, List, Mapping, Sequence, Tuple

from .objects import PLAIN_KINDS
from .store import JsonObj

# (group, version, plural, kind, namespaced, verbs)
Resource = Tuple[str, str, str, str, bool, Sequence[str]]

RESOURCES: Sequence[Resource] = (
    ("", "v1", "pods", "Pod", True, ("get", "list", "create", "update", "patch", "delete", "deletecollection")),
    ("", "v1", "secrets", "Secret", True, ("get", "list", "create", "update", "patch", "delete", "deletecollection")),
    ("", "v1", "events", "Event", True, ("get", "list")),
    ("", "v1", "namespaces", "Namespace", False, ("get", "list")),
    ("", "v1", "nodes", "Node", False, ("get", "list")),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("get", "list")),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ("create",)),
) + tuple((k.group, k.version, k.plural, k.kind, True,
           ("get", "list", "create", "update", "patch", "delete")) for k in PLAIN_KINDS.values())

_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gv_path(group: str, version: str) -> str:
    return "api/%s" % version if not group else "apis/%s/%s" % (group, version)


def _param(name: str, where: str = "query") -> JsonObj:
    return {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True},
            **({"required": True} if where == "path" else {})}


def group_version_doc(gv_path: str, server_version: str) -> JsonObj:
    """The OpenAPI v3 document of one group-version (``api/v1``, ``apis/<group>/<version>``)."""
    paths: Dict[str, JsonObj] = {}
    for group, version, plural, kind, namespaced, verbs in RESOURCES:
        if _gv_path(group, version) != gv_path:
            continue
        gvk = {"group": group, "version": version, "kind": kind}
        base = "/" + gv_path + ("/namespaces/{namespace}/" if namespaced else "/") + plural
        scope = [_param("namespace", "path")] if namespaced else []

        def op(action: str, verb: str, params: Sequence[str], item: bool) -> JsonObj:
            return {"operationId": "%s%s%s" % (verb, kind, "" if item else "List"),
                    "parameters": scope + ([_param("name", "path")] if item else []) + [_param(p) for p in params],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk}
        collection: JsonObj = {}
        item: JsonObj = {}
        if "list" in verbs:
            collection["get"] = op("list", "list", ("labelSelector", "fieldSelector", "watch", "limit"), False)
        if "create" in verbs:
            collection["post"] = op("post", "create", _WRITE_PARAMS, False)
        if "deletecollection" in verbs:
            collection["delete"] = op("deletecollection", "deleteCollection", ("labelSelector",), False)
        if "get" in verbs:
            item["get"] = op("get", "read", ("pretty",), True)
        if "update" in verbs:
            item["put"] = op("put", "replace", _WRITE_PARAMS, True)
        if "patch" in verbs:
            item["patch"] = op("patch", "patch", _WRITE_PARAMS + ("force",), True)
        if "delete" in verbs:
            item["delete"] = op("delete", "delete", ("gracePeriodSeconds", "propagationPolicy", "dryRun"), True)
        if collection:
            paths[base] = collection
        if item:
            paths[base + "/{name}"] = item
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": server_version},
            "paths": paths, "components": {"schemas": {}}}


def group_versions() -> List[str]:
    return sorted({_gv_path(g, v) for g, v, *_ in RESOURCES})


def root(server_version: str) -> JsonObj:
    """``/openapi/v3``: each group-version's document URL, with a hash that changes with it."""
    paths = {}
    for gv in group_versions():
        digest = hashlib.sha512(json.dumps(group_version_doc(gv, server_version), sort_keys=True).encode())
        paths[gv] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (gv, digest.hexdigest()[:128].upper())}
    return {"paths": paths}


# ------------------------------------------------------------------ field validation

_OBJECT_META: FrozenSet[str] = frozenset((
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields"))
_POD_SPEC: FrozenSet[str] = frozenset((
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector", "serviceAccountName",
    "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
    "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname", "subdomain", "affinity",
    "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
    "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints",
    "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims", "resources"))
_CONTAINER: FrozenSet[str] = frozenset((
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
    "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
    "stdin", "stdinOnce", "tty"))
_TOP: Mapping[str, FrozenSet[str]] = {
    "Pod": frozenset(("apiVersion", "kind", "metadata", "spec", "status")),
    "Secret": frozenset(("apiVersion", "kind", "metadata", "data", "stringData", "type", "immutable")),
}


def _unknown(obj: Any, known: FrozenSet[str], prefix: str) -> List[str]:
    if not isinstance(obj, dict):
        return []
    return ["%s%s" % (prefix, key) for key in obj if key not in known]


def unknown_fields(kind: str, obj: JsonObj) -> List[str]:
    """Field paths the strict decoder would call unknown (``spec.containers[0].imagee``)."""
    if kind not in _TOP:
        return []
    found = _unknown(obj, _TOP[kind], "") + _unknown(obj.get("metadata"), _OBJECT_META, "metadata.")
    if kind == "Pod" and isinstance(obj.get("spec"), dict):
        spec = obj["spec"]
        found += _unknown(spec, _POD_SPEC, "spec.")
        for key in ("containers", "initContainers"):
            for i, container in enumerate(spec.get(key) or []):
                found += _unknown(container, _CONTAINER, "spec.%s[%d]." % (key, i))
    return found
