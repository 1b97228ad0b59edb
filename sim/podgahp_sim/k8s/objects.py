"""Plain namespaced objects the simulator stores but does not act on — ConfigMaps, ServiceAccounts,
Services, Roles, RoleBindings, Deployments — so that an admin's manifests (a CE running in the
cluster, its service account and Role) apply with ``kubectl`` as on a real cluster, and so that Roles
and RoleBindings can authorize the service account's token (:mod:`podgahp_sim.k8s.rbac`).

CRUD only: create, get, list (in a namespace or in all, with selectors), replace, patch (the three
patch flavours), delete; no controllers (a Deployment makes no pods, a Service no endpoints).
"""

from __future__ import annotations

import json
import uuid
from typing import Callable, Dict, Mapping, NamedTuple, Optional

from .errors import ApiError, already_exists, bad_request, method_not_allowed, not_found, status_body
from .patch import PATCH_TYPES, PatchError, apply_patch
from .store import JsonObj, Store, json_copy, now_rfc3339


class Kind(NamedTuple):
    group: str
    version: str
    plural: str
    kind: str


PLAIN_KINDS: Dict[str, Kind] = {k.plural: k for k in (
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("", "v1", "services", "Service"),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("apps", "v1", "deployments", "Deployment"),
)}


def store_key(kind: Kind) -> str:
    """Resource name in the store (distinct from pods and secrets)."""
    return f"{kind.group}/{kind.plural}" if kind.group else kind.plural


def api_version(kind: Kind) -> str:
    return f"{kind.group}/{kind.version}" if kind.group else kind.version


def match(group: str, version: str, plural: str) -> Optional[Kind]:
    kind = PLAIN_KINDS.get(plural)
    return kind if kind is not None and (kind.group, kind.version) == (group, version) else None


def handle(store: Store, kind: Kind, method: str, namespace: Optional[str], name: Optional[str],
           query: Mapping[str, str], headers: Mapping[str, str], body: bytes,
           matches: Callable[[JsonObj], bool] = lambda obj: True,
           validate: Callable[[JsonObj], None] = lambda obj: None) -> "tuple[int, JsonObj]":
    """(status, body) of one request on ``kind`` objects in ``namespace`` (``None``: a list of every
    namespace's); a list holds the objects ``matches`` (its label and field selectors); ``validate``
    raises the 422 of an object to be created or written that the API server would refuse."""
    key = store_key(kind)

    def typed(obj: JsonObj) -> JsonObj:
        return dict(json_copy(obj), kind=kind.kind, apiVersion=api_version(kind))

    with store.lock:
        if name is None:
            if method == "GET":
                items = [typed(o) for o in store.items(key, namespace) if matches(o)]
                return 200, {"kind": kind.kind + "List", "apiVersion": api_version(kind),
                             "metadata": {"resourceVersion": str(store.rv)}, "items": items}
            if method != "POST" or namespace is None:
                raise method_not_allowed()
            obj = _decode(body)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                raise ApiError(422, status_body(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required value"))
            if store.get(key, namespace, meta["name"]) is not None:
                raise already_exists(kind.plural, meta["name"])
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
            for drop in ("resourceVersion", "selfLink"):
                meta.pop(drop, None)
            validate(obj)
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            if not query.get("dryRun"):
                store.create(key, obj)
            return 201, typed(obj)
        current = store.get(key, namespace or "", name)
        if current is None:
            raise not_found(kind.plural, name, kind.group)
        if method == "GET":
            return 200, typed(current)
        if method == "DELETE":
            store.delete(key, namespace or "", name)
            return 200, typed(current)
        if method == "PUT":
            new = _decode(body)
        elif method == "PATCH":
            content_type = headers.get("content-type", "application/strategic-merge-patch+json").split(";")[0].strip()
            if content_type not in PATCH_TYPES:
                raise ApiError(415, status_body(415, "UnsupportedMediaType", f"the body of the request was in an "
                                                f"unknown format - accepted media types include: {', '.join(PATCH_TYPES)}"))
            try:
                new = apply_patch(content_type, typed(current), _decode(body))
            except PatchError as e:
                raise bad_request(str(e)) from None
        else:
            raise method_not_allowed()
        new = json_copy(new)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        meta = new.setdefault("metadata", {})
        for keep in ("name", "namespace", "uid", "creationTimestamp"):
            meta[keep] = current["metadata"][keep]
        validate(new)
        store.update(key, new)
        return 200, typed(new)


def _decode(body: bytes) -> JsonObj:
    try:
        obj = json.loads(body or b"{}")
    except ValueError as e:
        raise bad_request(f"couldn't get version/kind; json parse error: {e}") from None
    if not isinstance(obj, dict):
        raise bad_request("the body is not a JSON object")
    return obj
