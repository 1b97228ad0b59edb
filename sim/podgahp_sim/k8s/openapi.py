"""OpenAPI documents of the simulated API server (``/openapi/v3`` and ``/openapi/v2``) and its
server-side field validation: enough for ``kubectl create`` / ``apply`` with validation on and for
``kubectl explain``.

kubectl (1.27 and later) reads ``/openapi/v3``, then the group-version document, and looks for the
``fieldValidation`` query parameter on the kind's PATCH operation; when it is there, kubectl leaves
validation to the server and sends ``fieldValidation=Strict``.  ``kubectl explain`` finds a kind's
schema by its ``x-kubernetes-group-version-kind`` among the document's schemas (v3, or v2 with
``--output plaintext-openapiv2``, which kubectl asks for in protobuf: :mod:`podgahp_sim.k8s.openapiv2`).
The schemas come from :mod:`podgahp_sim.k8s.schemas`; :func:`unknown_fields` checks field names of
Pods and Secrets at the levels where a typo matters (object, metadata, pod spec, containers), as the
server's strict decoder would.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Dict, FrozenSet, List, Mapping, Sequence, Tuple

from kubernetes import __version__ as client_version

from . import schemas
from .objects import PLAIN_KINDS
from .store import JsonObj

# (group, version, plural, kind, namespaced, verbs)
Resource = Tuple[str, str, str, str, bool, Sequence[str]]

RESOURCES: Sequence[Resource] = (
    ("", "v1", "pods", "Pod", True, ("get", "list", "create", "update", "patch", "delete", "deletecollection")),
    ("", "v1", "secrets", "Secret", True, ("get", "list", "create", "update", "patch", "delete", "deletecollection")),
    ("", "v1", "events", "Event", True, ("get", "list")),
    ("", "v1", "namespaces", "Namespace", False, ("get", "list", "create")),
    ("", "v1", "nodes", "Node", False, ("get", "list", "update", "patch")),
    ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("get", "list")),
    ("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ("create",)),
    ("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False, ("create",)),
    ("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False, ("create",)),
) + tuple((k.group, k.version, k.plural, k.kind, True,
           ("get", "list", "create", "update", "patch", "delete")) for k in PLAIN_KINDS.values())

_WRITE_PARAMS = ("dryRun", "fieldManager", "fieldValidation", "pretty")


def _gv_path(group: str, version: str) -> str:
    return "api/%s" % version if not group else "apis/%s/%s" % (group, version)


def _param(name: str, where: str = "query") -> JsonObj:
    return {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True},
            **({"required": True} if where == "path" else {})}


def paths(gv_path: str) -> Dict[str, JsonObj]:
    """The operations of one group-version (``api/v1``, ``apis/<group>/<version>``) by URL path, as
    OpenAPI v3 writes them."""
    found: Dict[str, JsonObj] = {}
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
            found[base] = collection
        if item:
            found[base + "/{name}"] = item
    return found


def kinds(gv_path: str = "") -> List[Tuple[str, str, str]]:
    """(group, version, kind) of the resources of one group-version (of all when not given)."""
    return [(g, v, k) for g, v, _, k, _, _ in RESOURCES if not gv_path or _gv_path(g, v) == gv_path]


def ref_schema(schema: JsonObj, prefix: str, wrap: bool) -> JsonObj:
    """A schema from :mod:`schemas` with its ``$ref`` names as paths under ``prefix``; ``wrap``: a
    field of another type as ``allOf: [$ref]`` beside its description, as kube-apiserver writes v3."""
    out: JsonObj = {}
    for key, value in schema.items():
        if key in ("items", "additionalProperties"):
            out[key] = ref_schema(value, prefix, wrap)
        elif key == "properties":
            out[key] = {name: ref_schema(prop, prefix, wrap) for name, prop in value.items()}
        elif key != "$ref":
            out[key] = value
    if "$ref" in schema:
        if wrap:
            out["allOf"] = [{"$ref": prefix + schema["$ref"]}]
            out["default"] = {}
        else:
            out["$ref"] = prefix + schema["$ref"]
    return out


@functools.lru_cache(maxsize=None)
def group_version_doc(gv_path: str, server_version: str) -> JsonObj:
    """The OpenAPI v3 document of one group-version (``api/v1``, ``apis/<group>/<version>``): its
    operations, and the schemas of its kinds and of every type they reach (callers do not change it)."""
    defined = schemas.definitions(kinds(gv_path))
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": server_version},
            "paths": paths(gv_path),
            "components": {"schemas": {name: ref_schema(schema, "#/components/schemas/", True)
                                       for name, schema in defined.items()}}}


def group_versions() -> List[str]:
    return sorted({_gv_path(g, v) for g, v, *_ in RESOURCES})


def root(server_version: str) -> JsonObj:
    """``/openapi/v3``: each group-version's document URL, with a hash that changes with it (the
    document follows from the group-version, the server's version and the client models')."""
    found = {}
    for gv in group_versions():
        digest = hashlib.sha512(("%s %s %s" % (gv, server_version, client_version)).encode())
        found[gv] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (gv, digest.hexdigest()[:128].upper())}
    return {"paths": found}


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
