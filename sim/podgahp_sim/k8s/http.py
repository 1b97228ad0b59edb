"""REST routes of the simulated API server over ``http.server``: auth, RBAC, fault injection,
request log, and the pod/secret/namespace/node/priority-class/access-review endpoints.

:class:`Api` turns one request into a :class:`Reply` (or a stream of watch events / log lines);
:class:`Handler` moves bytes.  Owns the mutable runtime settings (token, RBAC denials, quota,
namespaces, faults) and the request log; must not know how the cluster schedules or runs pods beyond
the :class:`Cluster` driver methods.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import re
import logging
import secrets
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Pattern, Tuple, Union
from urllib.parse import parse_qs, urlsplit

from .. import http as core
from . import admission, limits, objects, openapi, openapiv2, podsecurity, rbac
from .cluster import TERMINAL, Cluster
from .config import PodLimitRange, PodQuota, RbacRule, SimConfig
from .errors import ApiError, FieldError, already_exists, bad_request, conflict, forbidden, invalid, \
    method_not_allowed, no_route, not_found, status_body, unauthorized, unsupported_media
from .patch import PATCH_TYPES, PatchError, apply_patch
from .selectors import FieldSelector, LabelSelector, SelectorError
from .store import JsonObj, Store, WatchStream, json_copy, now_rfc3339
from .tables import to_table, wants_table
from .tls import peer_user

log = logging.getLogger(__name__)

KINDS = {"pods": "Pod", "secrets": "Secret", "events": "Event"}
_NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

#: kube-apiserver's message for a continue token older than its watch cache.
CONTINUE_EXPIRED = ("The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter, or use the continue token in this response to "
                    "retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list.")


def _continue_key(token: str) -> Tuple[int, Tuple[str, str]]:
    """The resource version and last (namespace, name) a continue token carries (400 if malformed)."""
    try:
        rv, namespace, name = json.loads(base64.urlsafe_b64decode(token.encode()))
        if isinstance(rv, int) and isinstance(namespace, str) and isinstance(name, str):
            return rv, (namespace, name)
    except (ValueError, TypeError, binascii.Error):
        pass
    raise bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
UPDATE_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
                    "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                    "was previously negative)")


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it (query values: the last one of each name)."""

    method: str
    path: str
    query: Mapping[str, str]
    status: int
    headers: Mapping[str, str]


@dataclass
class Fault:
    """Answer the next ``count`` requests matching ``method``/``path`` (regexes) with ``status``.

    ``delay`` seconds are slept first; with ``status`` 0 the request is then served normally.
    """

    method: Pattern[str]
    path: Pattern[str]
    status: int
    count: int
    body: Optional[JsonObj] = None
    retry_after: Optional[int] = None
    delay: float = 0.0
    hits: int = 0


@dataclass
class Reply:
    code: int
    body: Union[JsonObj, str, bytes, None] = None
    headers: Dict[str, str] = field(default_factory=dict)
    stream: Optional[Iterator[Optional[bytes]]] = None


def take_fault(faults: List[Fault], method: str, path: str) -> Optional[Fault]:
    """The first of ``faults`` with a count left that matches the request, its count taken (the
    caller holds the lock that guards ``faults``)."""
    for fault in faults:
        if fault.count > 0 and fault.method.fullmatch(method) and fault.path.search(path):
            fault.count -= 1
            fault.hits += 1
            return fault
    return None


def fault_body(status: int, retry_after: Optional[int]) -> JsonObj:
    """The ``Status`` a real API server answers with ``status`` (an injected fault's body)."""
    if status == 429:
        details: JsonObj = {"retryAfterSeconds": retry_after or 1} if retry_after else {}
        return status_body(429, "TooManyRequests", "Too many requests, please try again later.", details)
    if status == 500:
        return status_body(500, "InternalError", "Internal error occurred: injected fault",
                           {"causes": [{"message": "injected fault"}]})
    if status == 503:
        return status_body(503, "ServiceUnavailable", "the server is currently unable to handle the request")
    if status == 504:
        return status_body(504, "Timeout", "the server was unable to return a response in the time allotted, "
                                           "but may still be processing the request")
    reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
               410: "Expired", 422: "Invalid"}
    return status_body(status, reasons.get(status, "InternalError"), "injected fault")


def _group_of(resource: str) -> str:
    base = resource.partition("/")[0]
    if base == "priorityclasses":
        return "scheduling.k8s.io"
    if base in ("selfsubjectaccessreviews", "selfsubjectrulesreviews"):
        return "authorization.k8s.io"
    kind = objects.PLAIN_KINDS.get(base)
    return kind.group if kind is not None else ""


def _plain_validator(kind: objects.Kind) -> Callable[[JsonObj], None]:
    """What the API server refuses of a plain object (a ConfigMap's keys), as its 422."""
    def validate(obj: JsonObj) -> None:
        errors = admission.configmap_errors(obj) if kind.plural == "configmaps" else []
        if errors:
            raise invalid(kind.kind, str((obj.get("metadata") or {}).get("name") or ""), errors)
    return validate


def _truthy(value: Optional[str]) -> bool:
    return value is not None and value.lower() in ("true", "1")


def _int_param(query: Mapping[str, str], name: str) -> Optional[int]:
    if name not in query or query[name] == "":
        return None
    try:
        return int(query[name])
    except ValueError:
        raise bad_request('strconv.ParseInt: parsing "%s": invalid syntax' % query[name]) from None


SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
"""The namespaces every cluster has besides those it is given (the nodes' Leases are in ``kube-node-lease``)."""


class Api:
    """The request logic; thread-safe through the store lock."""

    def __init__(self, store: Store, cluster: Cluster, config: SimConfig) -> None:
        self.store = store
        self.cluster = cluster
        self.config = config
        self.token: Optional[str] = config.token
        self.role: Optional[Tuple[str, List[Tuple[FrozenSet[str], FrozenSet[str]]]]] = None
        self.sa_tokens: Dict[str, str] = {}
        """Service-account tokens -> their user; such requests are authorized by Roles/RoleBindings."""
        self._caller = threading.local()
        """When set, (namespace, [(resources, verbs)]): only what this Role grants is allowed."""
        self.namespaces: Dict[str, JsonObj] = {}
        for ns in dict.fromkeys(SYSTEM_NAMESPACES + tuple(config.namespaces)):
            self.add_namespace(ns)
        self.priority_classes: Dict[str, int] = dict(config.priority_classes)
        self.rbac_deny: List[RbacRule] = list(config.rbac_deny)
        self.quota: Optional[PodQuota] = config.quota
        self.limit_range: Optional[PodLimitRange] = config.limit_range
        self.faults: List[Fault] = []
        self.requests: List[RequestRecord] = []
        self.request_lock = threading.Lock()
        self.server_address = "127.0.0.1:0"

    def add_namespace(self, name: str, labels: Optional[Mapping[str, str]] = None) -> None:
        self.namespaces[name] = {
            "kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1",
                         "creationTimestamp": now_rfc3339(),
                         "labels": dict(labels or {}, **{"kubernetes.io/metadata.name": name})},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        # the controller-manager's service-account controller gives every namespace its "default" account
        accounts = objects.store_key(objects.PLAIN_KINDS["serviceaccounts"])
        if self.store.get(accounts, name, "default") is None:
            self.store.create(accounts, {"metadata": {"name": "default", "namespace": name, "uid": str(uuid.uuid4()),
                                                      "creationTimestamp": now_rfc3339()}})

    # ------------------------------------------------------------------ entry point

    def take_fault(self, method: str, path: str) -> Optional[Fault]:
        with self.request_lock:
            return take_fault(self.faults, method, path)

    def handle(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
               body: bytes, cert_user: Optional[str] = None) -> Reply:
        """Answer one request.  ``cert_user``: the user a verified client certificate names (it
        authenticates the request as a bearer token does)."""
        fault = self.take_fault(method, path)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status:
                extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                return Reply(fault.status, fault.body or fault_body(fault.status, fault.retry_after), extra)
        try:
            self._caller.user = None
            if self.token is not None and cert_user is None:
                auth = headers.get("authorization", "")
                scheme, _, token = auth.partition(" ")
                token = token.strip()
                if scheme.lower() != "bearer" or (token != self.token and token not in self.sa_tokens):
                    raise unauthorized()
                self._caller.user = self.sa_tokens.get(token)
            if len(body) > limits.MAX_REQUEST_BODY_BYTES:
                raise limits.body_too_large()
            reply = self.route(method, path.rstrip("/") or "/", query, headers, body)
        except ApiError as e:
            return Reply(e.code, e.body, e.headers)
        if reply.code == 200 and wants_table(headers.get("accept", "")):
            return self._as_table(reply, query.get("includeObject") or "Metadata")
        return reply

    @staticmethod
    def _as_table(reply: Reply, include: str) -> Reply:
        """Server-side printing: objects, lists and watch events as ``meta.k8s.io/v1`` Tables."""
        if reply.stream is None:
            if isinstance(reply.body, dict) and reply.body.get("kind") not in (None, "", "Status", "Table"):
                reply.body = to_table(reply.body, include)
            return reply
        events = reply.stream

        def tables() -> Iterator[Optional[bytes]]:
            try:
                for chunk in events:
                    if not chunk:
                        yield chunk
                        continue
                    event = json.loads(chunk)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        event["object"] = to_table(event["object"], include)
                    yield (json.dumps(event, separators=(",", ":")) + "\n").encode()
            finally:
                close = getattr(events, "close", None)
                if close is not None:
                    close()
        return Reply(reply.code, reply.body, reply.headers, tables())

    # ------------------------------------------------------------------ routing

    def route(self, method: str, path: str, query: Mapping[str, str], headers: Mapping[str, str],
              body: bytes) -> Reply:
        parts = path.strip("/").split("/")
        if path == "/version":
            return Reply(200, self.version())
        if path in ("/healthz", "/readyz", "/livez"):
            # As kube-apiserver: "ok" as text (with ?verbose, the checks one per line).
            if method != "GET":
                raise method_not_allowed()
            if "verbose" in query:
                return Reply(200, "[+]ping ok\n[+]etcd ok\n%s check passed\n" % path.strip("/"),
                             {"Content-Type": "text/plain; charset=utf-8"})
            return Reply(200, "ok", {"Content-Type": "text/plain; charset=utf-8"})
        if parts[:4] == ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] and len(parts) == 4:
            if method != "POST":
                raise method_not_allowed()
            return self.whoami()
        if path == "/openapi/v2":
            if method != "GET":
                raise method_not_allowed()
            if openapiv2.PROTOBUF in headers.get("accept", ""):
                return Reply(200, openapiv2.protobuf(self.config.git_version),
                             {"Content-Type": openapiv2.PROTOBUF_ANSWER})
            return Reply(200, openapiv2.document(self.config.git_version))
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            if method != "GET":
                raise method_not_allowed()
            gv = path[len("/openapi/v3/"):]
            if not gv:
                return Reply(200, openapi.root(self.config.git_version))
            if gv not in openapi.group_versions():
                raise no_route()
            return Reply(200, openapi.group_version_doc(gv, self.config.git_version))
        if path in ("/api", "/apis") or path.startswith("/api/v1") and len(parts) == 2 or \
                path.startswith("/apis/") and len(parts) == 3:
            if method != "GET":
                raise method_not_allowed()
            return Reply(200, self.discovery(path))
        if parts[:5] == ["apis", "coordination.k8s.io", "v1", "namespaces", "kube-node-lease"] and len(parts) == 7 \
                and parts[5] == "leases":
            self.authorize("get", "leases", "kube-node-lease", parts[6])
            if method != "GET":
                raise method_not_allowed()
            return self.node_lease(parts[6])
        if parts[:3] == ["apis", "scheduling.k8s.io", "v1"] and len(parts) in (4, 5) and parts[3] == "priorityclasses":
            return self.priority_class_route(method, parts[4] if len(parts) == 5 else None, query)
        if parts[:4] == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] and len(parts) == 4:
            if method != "POST":
                raise method_not_allowed()
            return self.access_review(body)
        if parts[:4] == ["apis", "authorization.k8s.io", "v1", "selfsubjectrulesreviews"] and len(parts) == 4:
            if method != "POST":
                raise method_not_allowed()
            return self.rules_review(body)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 7 and parts[4:7:2] == ["serviceaccounts",
                                                                                             "token"]:
            if method != "POST":
                raise method_not_allowed()
            self.authorize("create", "serviceaccounts/token", parts[3], parts[5])
            return self.token_request(parts[3], parts[5], body)
        plain = self._plain(parts)
        if plain is not None:
            kind, namespace, name = plain
            verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update", "PATCH": "patch",
                    "DELETE": "delete"}.get(method, "")
            self.authorize(verb, kind.plural, namespace, name or "")
            if method == "POST" and namespace is not None and namespace not in self.namespaces:
                # as a real server: nothing is created in a namespace that does not exist (a list there is empty)
                raise not_found("namespaces", namespace)
            code, obj = objects.handle(self.store, kind, method, namespace, name, query, headers, body,
                                       self._matcher(kind.plural, namespace, query), _plain_validator(kind))
            return Reply(code, obj)
        if parts[:2] != ["api", "v1"] or len(parts) < 3:
            raise no_route()
        rest = parts[2:]
        if rest[0] in ("pods", "secrets", "events") and len(rest) == 1:
            if method != "GET":
                raise method_not_allowed()
            return self.collection(method, rest[0], None, query, headers, body)
        if rest[0] == "nodes":
            if len(rest) > 2:
                raise no_route()
            return self.nodes_route(method, rest[1] if len(rest) > 1 else None, query, headers, body)
        if rest[0] != "namespaces":
            raise no_route()
        if len(rest) == 1:
            self.authorize("list" if method == "GET" else "create" if method == "POST" else method.lower(),
                           "namespaces", None, "")
            if method == "POST":
                return self.create_namespace(body)
            if method != "GET":
                raise method_not_allowed()
            return Reply(200, {"kind": "NamespaceList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(self.store.rv)},
                               "items": [self._bare(n) for _, n in sorted(self.namespaces.items())]})
        namespace = rest[1]
        if len(rest) == 2:
            self.authorize("get", "namespaces", namespace, namespace)
            if method != "GET":
                raise method_not_allowed()
            if namespace not in self.namespaces:
                raise not_found("namespaces", namespace)
            return Reply(200, json_copy(self.namespaces[namespace]))
        resource = rest[2]
        if resource not in ("pods", "secrets", "events"):
            raise no_route()
        if len(rest) == 3:
            return self.collection(method, resource, namespace, query, headers, body)
        name = rest[3]
        if resource == "events":
            self.authorize("get", "events", namespace, name)
            if len(rest) != 4 or method != "GET":
                raise method_not_allowed()
            with self.store.lock:
                event = self.store.get("events", namespace, name)
                if event is None:
                    raise not_found("events", name)
                return Reply(200, json_copy(event))
        if len(rest) == 4:
            return self.item(method, resource, namespace, name, query, headers, body)
        if len(rest) == 5 and resource == "pods" and rest[4] == "eviction":
            self.authorize("create", "pods/eviction", namespace, name)
            if method != "POST":
                raise method_not_allowed()
            return self.eviction(namespace, name, body)
        if len(rest) == 5 and resource == "pods" and rest[4] in ("status", "log"):
            if rest[4] == "log":
                self.authorize("get", "pods/log", namespace, name)
                if method != "GET":
                    raise method_not_allowed()
                return self.pod_log(namespace, name, query)
            return self.item(method, resource, namespace, name, query, headers, body, subresource="status")
        raise no_route()

    # ------------------------------------------------------------------ auth

    def authorize(self, verb: str, resource: str, namespace: Optional[str], name: str) -> None:
        if not self.denied(verb, resource, namespace):
            return
        base, _, _ = resource.partition("/")
        group = "scheduling.k8s.io" if base == "priorityclasses" else (
            "authorization.k8s.io" if base == "selfsubjectaccessreviews" else "")
        scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
        user = getattr(self._caller, "user", None) or self.config.user
        raise forbidden(base, name, 'User "%s" cannot %s resource "%s" in API group "%s" %s'
                        % (user, verb, resource, _group_of(resource), scope), _group_of(resource))

    @staticmethod
    def _plain(parts: List[str]) -> "Optional[Tuple[objects.Kind, Optional[str], Optional[str]]]":
        """(kind, namespace, name) of a request on a plain object kind, else None; namespace ``None``
        for a list of every namespace's (``kubectl get roles -A``)."""
        if parts[:1] == ["api"] and len(parts) == 3:
            kind = objects.match("", parts[1], parts[2])
            return (kind, None, None) if kind is not None else None
        if parts[:1] == ["apis"] and len(parts) == 4:
            kind = objects.match(parts[1], parts[2], parts[3])
            return (kind, None, None) if kind is not None else None
        if parts[:1] == ["api"] and len(parts) in (5, 6) and parts[2] == "namespaces":
            group, version, rest = "", parts[1], parts[3:]
        elif parts[:1] == ["apis"] and len(parts) in (6, 7) and parts[3] == "namespaces":
            group, version, rest = parts[1], parts[2], parts[4:]
        else:
            return None
        kind = objects.match(group, version, rest[1])
        if kind is None:
            return None
        return kind, rest[0], rest[2] if len(rest) == 3 else None

    def denied(self, verb: str, resource: str, namespace: Optional[str]) -> bool:
        caller = getattr(self._caller, "user", None)
        if caller is not None:
            group = _group_of(resource)
            return not rbac.allowed(rbac.rules_for(self.store, caller, namespace), group, resource, verb)
        if self.role is not None:
            role_namespace, rules = self.role
            granted = namespace == role_namespace and any(
                (resource in resources or "*" in resources) and (verb in verbs or "*" in verbs)
                for resources, verbs in rules)
            if not granted:
                return True
        return any(rule.verb in (verb, "*") and rule.resource in (resource, "*")
                   and (rule.namespace is None or rule.namespace == namespace) for rule in self.rbac_deny)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _bare(obj: JsonObj) -> JsonObj:
        """``obj`` without kind and apiVersion, for a list; stored objects are never changed in place,
        so the answer may share them."""
        return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}

    @staticmethod
    def _typed(resource: str, obj: JsonObj) -> JsonObj:
        out: JsonObj = {"kind": KINDS.get(resource, ""), "apiVersion": "v1"}
        out.update(obj)  # shared: stored objects are never changed in place
        return out

    @staticmethod
    def _decode(body: bytes) -> Any:
        if not body.strip():
            raise bad_request("Object 'Kind' is missing in ''")
        try:
            return json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request("couldn't get version/kind; json parse error: %s" % e) from None

    def _matcher(self, resource: str, namespace: Optional[str],
                 query: Mapping[str, str]) -> Callable[[JsonObj], bool]:
        try:
            labels = LabelSelector.parse(query.get("labelSelector", ""))
            fields = FieldSelector.parse(query.get("fieldSelector", ""), resource)
        except SelectorError as e:
            raise bad_request(str(e)) from None

        def matches(obj: JsonObj) -> bool:
            meta = obj["metadata"]
            return ((namespace is None or meta.get("namespace") == namespace)
                    and labels.matches(meta.get("labels")) and fields.matches(obj))
        return matches

    def version(self) -> JsonObj:
        major, minor = self.config.git_version.lstrip("v").split(".")[:2]
        return {"major": major, "minor": minor, "gitVersion": self.config.git_version,
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2024-04-17T17:27:03Z", "goVersion": "go1.22.2", "compiler": "gc",
                "platform": "linux/amd64"}

    def discovery(self, path: str) -> JsonObj:
        def res(name: str, kind: str, namespaced: bool, verbs: List[str], singular: str = "",
                short: Tuple[str, ...] = (), categories: Tuple[str, ...] = ()) -> JsonObj:
            found: JsonObj = {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind,
                              "verbs": verbs}
            if short:
                found["shortNames"] = list(short)
            if categories:
                found["categories"] = list(categories)
            return found

        crud = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}]}
        if path == "/api/v1":
            return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                res("namespaces", "Namespace", False, ["get", "list"], "namespace", ("ns",)),
                res("nodes", "Node", False, ["get", "list", "patch", "update"], "node", ("no",)),
                res("pods", "Pod", True, crud, "pod", ("po",), ("all",)),
                res("pods/log", "Pod", True, ["get"]),
                res("pods/status", "Pod", True, ["get", "patch", "update"]),
                dict(res("pods/eviction", "Eviction", True, ["create"]), group="policy", version="v1"),
                res("secrets", "Secret", True, crud, "secret"),
                res("events", "Event", True, ["get", "list", "watch"], "event", ("ev",)),
                res("configmaps", "ConfigMap", True, crud, "configmap", ("cm",)),
                res("serviceaccounts", "ServiceAccount", True, crud, "serviceaccount", ("sa",)),
                dict(res("serviceaccounts/token", "TokenRequest", True, ["create"]),
                     group="authentication.k8s.io", version="v1"),
                res("services", "Service", True, crud, "service", ("svc",), ("all",))]}
        groups = {"scheduling.k8s.io": [res("priorityclasses", "PriorityClass", False, ["get", "list"],
                                            "priorityclass", ("pc",))],
                  "authorization.k8s.io": [res("selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
                                               ["create"], "selfsubjectaccessreview"),
                                           res("selfsubjectrulesreviews", "SelfSubjectRulesReview", False,
                                               ["create"], "selfsubjectrulesreview")],
                  "authentication.k8s.io": [res("selfsubjectreviews", "SelfSubjectReview", False, ["create"],
                                                "selfsubjectreview")],
                  "rbac.authorization.k8s.io": [res("roles", "Role", True, crud, "role"),
                                                res("rolebindings", "RoleBinding", True, crud, "rolebinding")],
                  "apps": [res("deployments", "Deployment", True, crud, "deployment", ("deploy",), ("all",))],
                  "coordination.k8s.io": [res("leases", "Lease", True, ["get"], "lease")]}
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": g + "/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": g + "/v1", "version": "v1"}} for g in sorted(groups)]}
        parts = path.strip("/").split("/")
        if parts[1] in groups and parts[2] == "v1":
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": parts[1] + "/v1",
                    "resources": groups[parts[1]]}
        raise no_route()

    # ------------------------------------------------------------------ cluster-scoped objects

    def priority_class_route(self, method: str, name: Optional[str], query: Mapping[str, str]) -> Reply:
        self.authorize("get" if name else "list", "priorityclasses", None, name or "")
        if method != "GET":
            raise method_not_allowed()

        def obj(pc: str) -> JsonObj:
            return {"kind": "PriorityClass", "apiVersion": "scheduling.k8s.io/v1",
                    "metadata": {"name": pc, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, pc)), "resourceVersion": "1",
                                 "creationTimestamp": "2024-01-01T00:00:00Z"},
                    "value": self.priority_classes[pc], "globalDefault": False,
                    "preemptionPolicy": "PreemptLowerPriority", "description": ""}
        if name is None:
            return Reply(200, {"kind": "PriorityClassList", "apiVersion": "scheduling.k8s.io/v1",
                               "metadata": {"resourceVersion": str(self.store.rv)},
                               "items": [obj(pc) for pc in sorted(self.priority_classes)]})
        if name not in self.priority_classes:
            raise not_found("priorityclasses", name, "scheduling.k8s.io")
        return Reply(200, obj(name))

    def nodes_route(self, method: str, name: Optional[str], query: Mapping[str, str], headers: Mapping[str, str],
                    body: bytes) -> Reply:
        """Nodes: read, and changed by an admin (``kubectl cordon``/``uncordon``, ``taint``, ``label``):
        labels, taints and ``spec.unschedulable`` are kept and the scheduler honours them; the rest of
        a node is the cluster's to report."""
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "PUT": "update"}.get(method)
        if verb is None or (name is None and verb != "list"):
            raise method_not_allowed()
        self.authorize(verb, "nodes", None, name or "")
        with self.store.lock:
            nodes = self.cluster.node_objects()
            if name is None:
                return Reply(200, {"kind": "NodeList", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(self.store.rv)}, "items": nodes})
            current = next((dict({"kind": "Node", "apiVersion": "v1"}, **n) for n in nodes
                            if n["metadata"]["name"] == name), None)
            if current is None:
                raise not_found("nodes", name)
            if method == "GET":
                return Reply(200, current)
            new = self._decode(body) if method == "PUT" else self._patched(current, headers, body)
            if not isinstance(new, dict):
                raise bad_request("Node in version \"v1\" cannot be handled as a Node")
            meta: JsonObj = new["metadata"] if isinstance(new.get("metadata"), dict) else {}
            if meta.get("name") not in (None, name):
                raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                  % (meta.get("name"), name))
            if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
                raise conflict("nodes", name)
            spec: JsonObj = new["spec"] if isinstance(new.get("spec"), dict) else {}
            taints, errors = admission.node_taints(spec.get("taints"))
            labels = meta.get("labels") or {}
            errors += admission.meta_errors({"name": name, "labels": labels})
            unschedulable = spec.get("unschedulable")
            if unschedulable not in (None, True, False):
                raise bad_request("Node in version \"v1\" cannot be handled as a Node: json: cannot unmarshal "
                                  "%s into Go struct field NodeSpec.spec.unschedulable of type bool"
                                  % type(unschedulable).__name__)
            if errors:
                raise invalid("Node", name, errors)
            if not query.get("dryRun"):
                self.cluster.update_node(name, dict(labels), taints, bool(unschedulable))
            for node in self.cluster.node_objects():
                if node["metadata"]["name"] == name:
                    current = dict({"kind": "Node", "apiVersion": "v1"}, **node)
            return Reply(200, current)

    def node_lease(self, name: str) -> Reply:
        """A node's heartbeat Lease (``kubectl describe node`` shows it): renewed now while the node
        reports; a lost node's was last renewed long ago (when the cluster started)."""
        with self.store.lock:
            node = self.cluster.nodes.get(name)
            if node is None:
                raise not_found("leases", name, "coordination.k8s.io")
            renewed = self.cluster.started if node.lost else time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(renewed))
        return Reply(200, {"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                           "metadata": {"name": name, "namespace": "kube-node-lease",
                                        "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, name)), "resourceVersion": "1",
                                        "creationTimestamp": now_rfc3339(self.cluster.started)},
                           "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": stamp}})

    def create_namespace(self, body: bytes) -> Reply:
        """``kubectl create namespace``: a new, Active namespace (no finalizers run here)."""
        obj = self._decode(body)
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj, dict) else None
        if not isinstance(name, str) or not _NAMESPACE_NAME.fullmatch(name):
            raise invalid("Namespace", str(name), [FieldError(
                "invalid", "metadata.name",
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'", name)])
        with self.store.lock:
            if name in self.namespaces:
                raise already_exists("namespaces", name)
            labels = (obj.get("metadata") or {}).get("labels")
            self.add_namespace(name, {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else None)
            return Reply(201, json_copy(self.namespaces[name]))

    def whoami(self) -> Reply:
        """``kubectl auth whoami``: the identity the request authenticated as."""
        user = getattr(self._caller, "user", None) or self.config.user
        groups = ["system:serviceaccounts", "system:authenticated"] if user.startswith("system:serviceaccount:") \
            else ["system:masters", "system:authenticated"]
        return Reply(201, {"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                           "metadata": {"creationTimestamp": None},
                           "status": {"userInfo": {"username": user, "groups": groups}}})

    def eviction(self, namespace: str, name: str, body: bytes) -> Reply:
        """The Eviction API (``kubectl drain``): the pod is marked ``DisruptionTarget``
        (EvictionByEvictionAPI) and deleted gracefully (the Eviction's ``deleteOptions`` may give
        the grace period). No PodDisruptionBudget is simulated: every eviction is allowed."""
        eviction = self._decode(body)
        if not isinstance(eviction, dict):
            raise bad_request("Eviction in version \"v1\" cannot be handled as a Eviction")
        meta: JsonObj = eviction["metadata"] if isinstance(eviction.get("metadata"), dict) else {}
        if meta.get("name") not in (None, name):
            raise bad_request("name in URL does not match name in Eviction object")
        options: JsonObj = eviction["deleteOptions"] if isinstance(eviction.get("deleteOptions"), dict) else {}
        grace = options.get("gracePeriodSeconds")
        if grace is not None and not isinstance(grace, int):
            raise bad_request("Eviction in version \"v1\" cannot be handled as a Eviction: gracePeriodSeconds")
        if options.get("dryRun"):
            with self.store.lock:
                if self.store.get("pods", namespace, name) is None:
                    raise not_found("pods", name)
        else:
            try:
                self.cluster.eviction(namespace, name, grace)
            except KeyError:
                raise not_found("pods", name) from None
        return Reply(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    def token_request(self, namespace: str, name: str, body: bytes) -> Reply:
        """``kubectl create token``: a token for an existing service account, authorized from then on
        by the Roles bound to it (its expiry is stated, not enforced)."""
        request = self._decode(body) if body.strip() else {}
        spec: JsonObj = request["spec"] if isinstance(request, dict) and isinstance(request.get("spec"), dict) else {}
        seconds = spec.get("expirationSeconds") or 3600
        if not isinstance(seconds, int) or seconds < 600:
            raise invalid("TokenRequest", name, [FieldError("invalid", "spec.expirationSeconds",
                                                            "may not specify a duration less than 10 minutes",
                                                            seconds)])
        with self.store.lock:
            if self.store.get(objects.store_key(objects.PLAIN_KINDS["serviceaccounts"]), namespace, name) is None:
                raise not_found("serviceaccounts", name)
        token = "sa-" + secrets.token_hex(16)
        self.sa_tokens[token] = "%s%s:%s" % (rbac.SA_PREFIX, namespace, name)
        return Reply(201, {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                           "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                           "spec": {"audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
                                    "expirationSeconds": seconds, "boundObjectRef": spec.get("boundObjectRef")},
                           "status": {"token": token, "expirationTimestamp": now_rfc3339(time.time() + seconds)}})

    def rules_review(self, body: bytes) -> Reply:
        """``kubectl auth can-i --list``: what the caller may do in a namespace, as RBAC rules. The
        admin may do everything; a service account what its bound Roles grant; under
        :meth:`KubeSim.enforce_role` what that Role grants. Injected denials cannot be written as
        rules: the answer then says it is incomplete, as an authorizer that cannot list its rules does."""
        review = self._decode(body)
        if not isinstance(review, dict) or not isinstance(review.get("spec"), dict):
            raise bad_request("SelfSubjectRulesReview in version \"v1\" cannot be handled")
        namespace = review["spec"].get("namespace") or None
        caller = getattr(self._caller, "user", None)
        # the default ClusterRoleBindings' rules first (their names sort before the Role's), then the Role's
        resource_rules, non_resource = rbac.default_rules(caller is not None or self.role is not None,
                                                          self.config.release())
        if caller is not None:
            for rule in rbac.rules_for(self.store, caller, namespace):
                entry = {k: list(rule.get(k) or []) for k in ("verbs", "apiGroups", "resources", "resourceNames")}
                resource_rules.append({k: v for k, v in entry.items() if v or k == "verbs"})
        elif self.role is not None:
            role_namespace, granted = self.role
            if namespace == role_namespace:
                resource_rules += [{"verbs": sorted(verbs), "apiGroups": [""], "resources": sorted(resources)}
                                   for resources, verbs in granted]
        else:  # the admin: cluster-admin's binding sorts first
            resource_rules.insert(0, {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
            non_resource.insert(0, {"verbs": ["*"], "nonResourceURLs": ["*"]})
        status: JsonObj = {"resourceRules": resource_rules, "nonResourceRules": non_resource,
                           "incomplete": bool(self.rbac_deny)}
        if self.rbac_deny:
            status["evaluationError"] = "denials are in force that rules cannot express: %s" % ", ".join(
                "%s %s%s" % (r.verb, r.resource, " in %s" % r.namespace if r.namespace else "")
                for r in self.rbac_deny)
        # the answer's spec is empty, as the real server's (it makes a new review around the status)
        return Reply(201, {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
                           "metadata": {"creationTimestamp": None}, "spec": {}, "status": status})

    def access_review(self, body: bytes) -> Reply:
        review = self._decode(body)
        if not isinstance(review, dict) or not isinstance(review.get("spec"), dict):
            raise bad_request("SelfSubjectAccessReview in version \"v1\" cannot be handled")
        attrs = review["spec"].get("resourceAttributes")
        allowed = True
        if isinstance(attrs, dict):
            resource = attrs.get("resource", "")
            if attrs.get("subresource"):
                resource += "/" + attrs["subresource"]
            allowed = not self.denied(attrs.get("verb", ""), resource, attrs.get("namespace") or None)
        return Reply(201, {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                           "metadata": {"creationTimestamp": None}, "spec": review["spec"],
                           "status": {"allowed": allowed}})

    # ------------------------------------------------------------------ collections

    def collection(self, method: str, resource: str, namespace: Optional[str], query: Mapping[str, str],
                   headers: Mapping[str, str], body: bytes) -> Reply:
        if method == "GET":
            watching = _truthy(query.get("watch"))
            self.authorize("watch" if watching else "list", resource, namespace, "")
            if watching:
                return self.watch(resource, namespace, query)
            return self.list(resource, namespace, query)
        if method == "POST" and namespace is not None and resource != "events":
            self.authorize("create", resource, namespace, "")
            return self.create(resource, namespace, query, body)
        if method == "DELETE" and namespace is not None and resource != "events":
            self.authorize("deletecollection", resource, namespace, "")
            matches = self._matcher(resource, namespace, query)
            options = self._delete_options(query, body)
            deleted = []
            with self.store.lock:
                for obj in self.store.items(resource, namespace):
                    if matches(obj):
                        deleted.append(self._bare(self._delete(resource, obj, options, query)))
            return Reply(200, {"kind": KINDS[resource] + "List", "apiVersion": "v1",
                               "metadata": {"resourceVersion": str(self.store.rv)}, "items": deleted})
        raise method_not_allowed()

    def list(self, resource: str, namespace: Optional[str], query: Mapping[str, str]) -> Reply:
        """A LIST, paginated with ``limit``/``continue`` as kube-apiserver does: every page carries
        the first page's resourceVersion (a watch from it sees every change since the first page);
        a token older than the event log is 410 Expired; a malformed one is 400. Items are the live
        objects (not a snapshot), which a client resuming a watch from that version handles alike.
        ``remainingItemCount`` is given only when no selector is (the server cannot count matches
        without reading them)."""
        matches = self._matcher(resource, namespace, query)
        limit = max(_int_param(query, "limit") or 0, 0)
        token = query.get("continue", "")
        after: Optional[Tuple[str, str]] = None
        with self.store.lock:
            rv = self.store.rv
            if token:
                rv, after = _continue_key(token)
                if rv < max(self.store.compacted_all, self.store.compacted.get(resource, 0)):
                    raise ApiError(410, status_body(410, "Expired", CONTINUE_EXPIRED))
            found, more = self.store.page(resource, namespace, after, matches, limit)
            items = [self._bare(o) for o in found]
            meta: JsonObj = {"resourceVersion": str(rv)}
            if more:
                last = items[-1]["metadata"]
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    [rv, last.get("namespace", ""), last["name"]], separators=(",", ":")).encode()).decode()
                if not query.get("labelSelector") and not query.get("fieldSelector"):
                    meta["remainingItemCount"] = len(self.store.sorted_keys(resource, namespace)) - \
                        self._position(resource, namespace, last) - 1
        kind = {"pods": "PodList", "secrets": "SecretList", "events": "EventList"}[resource]
        return Reply(200, {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": items})

    def _position(self, resource: str, namespace: Optional[str], meta: JsonObj) -> int:
        keys = self.store.sorted_keys(resource, namespace)
        return bisect.bisect_left(keys, (resource, meta.get("namespace", ""), meta["name"]))

    def watch(self, resource: str, namespace: Optional[str], query: Mapping[str, str]) -> Reply:
        matches = self._matcher(resource, namespace, query)
        rv_text = query.get("resourceVersion", "")
        since: Optional[int] = None
        if rv_text not in ("", "0"):
            try:
                since = int(rv_text)
            except ValueError:
                raise bad_request('resourceVersion: Invalid value: "%s": must be a valid resource version'
                                  % rv_text) from None
        timeout = _int_param(query, "timeoutSeconds")
        limit = float(timeout) if timeout and timeout > 0 else self.config.watch_max_seconds
        kind = KINDS.get(resource, "Event")
        stream = WatchStream(self.store, resource, matches, since, time.monotonic() + limit,
                             kind if _truthy(query.get("allowWatchBookmarks")) else None, self.config.bookmark_seconds)

        def lines() -> Iterator[Optional[bytes]]:
            for item in stream:
                if item is None:
                    yield None
                    continue
                etype, obj = item
                if etype not in ("ERROR", "BOOKMARK"):  # a snapshot of the event log: serialised, not copied
                    obj = {"kind": kind, "apiVersion": "v1", **obj}
                yield (json.dumps({"type": etype, "object": obj}, separators=(",", ":")) + "\n").encode()
        return Reply(200, None, {"Content-Type": "application/json"}, lines())

    # ------------------------------------------------------------------ create

    def create(self, resource: str, namespace: str, query: Mapping[str, str], body: bytes) -> Reply:
        kind = KINDS[resource]
        obj = self._decode(body)
        admission.check_decodable(kind, obj)
        warnings = self._validate_fields(kind, obj, query)
        if obj.get("kind") not in (None, "", kind) or obj.get("apiVersion") not in (None, "", "v1"):
            raise bad_request("the API version in the data (%s) does not match the expected API version (v1)"
                              % obj.get("apiVersion") if obj.get("apiVersion") not in (None, "", "v1") else
                              "%s in version \"v1\" cannot be handled as a %s: no kind \"%s\" is registered"
                              % (kind, kind, obj.get("kind")))
        meta = obj.get("metadata") or {}
        obj["metadata"] = meta
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.store.lock:
            if namespace not in self.namespaces:
                raise not_found("namespaces", namespace)
            meta["namespace"] = namespace
            for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                        "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(key, None)
            if resource == "pods":
                admission.admit_priority(obj, self.priority_classes)
                admission.apply_limit_range(obj, self.limit_range)
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(8):
                    meta["name"] = admission.generate_name(meta["generateName"])
                    if self.store.get(resource, namespace, meta["name"]) is None:
                        break
            if resource == "pods":
                obj.pop("status", None)
                admission.default_pod(obj, admission.generate_name("")[:5], self.config.toleration_seconds)
                errors = admission.pod_errors(obj)
            else:
                admission.normalise_secret(obj)
                errors = admission.secret_errors(obj)
            if errors:
                raise invalid(kind, str(meta.get("name") or ""), errors)
            if resource == "pods":
                admission.check_limit_range(obj, self.limit_range)
                podsecurity.admit(obj, (self.namespaces.get(namespace) or {}).get("metadata", {}).get("labels") or {})
            if resource == "pods" and self.quota is not None:
                others = [p for p in self.store.items("pods", namespace)
                          if (p.get("status") or {}).get("phase") not in TERMINAL]
                admission.check_quota(obj, self.quota, others)
            if self.store.get(resource, namespace, meta["name"]) is not None:
                raise already_exists(resource, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339(self.config.server_now())
            if resource == "pods":
                meta["generation"] = 1
                obj["status"] = {"phase": "Pending", "qosClass": admission.qos_class(obj)}
            limits.check_stored_size(obj, len(body))
            obj.pop("kind", None)
            obj.pop("apiVersion", None)
            if not query.get("dryRun"):
                self.store.create(resource, obj)
            return Reply(201, self._typed(resource, obj), warnings)

    # ------------------------------------------------------------------ items

    def item(self, method: str, resource: str, namespace: str, name: str, query: Mapping[str, str],
             headers: Mapping[str, str], body: bytes, subresource: str = "") -> Reply:
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or (subresource and method == "DELETE"):
            raise method_not_allowed()
        self.authorize(verb, resource + ("/" + subresource if subresource else ""), namespace, name)
        with self.store.lock:
            current = self.store.get(resource, namespace, name)
            if current is None:
                raise not_found(resource, name)
            if method == "GET":
                return Reply(200, self._typed(resource, current))
            if method == "DELETE":
                options = self._delete_options(query, body)
                return Reply(200, self._typed(resource, self._delete(resource, current, options, query)))
            if method == "PUT":
                new = self._decode(body)
                admission.check_decodable(KINDS[resource], new)
            else:
                new = self._patched(self._typed(resource, current), headers, body)
                admission.check_decodable(KINDS[resource], new)
            warnings = self._validate_fields(KINDS[resource], new, query)
            reply = self._update(resource, current, new, subresource, query)
            reply.headers.update(warnings)
            return reply

    def _patched(self, current: JsonObj, headers: Mapping[str, str], body: bytes) -> Any:
        """``current`` (with kind and apiVersion) as a PATCH request changes it."""
        content_type = headers.get("content-type", "application/strategic-merge-patch+json")
        content_type = content_type.split(";")[0].strip().lower()
        if content_type not in PATCH_TYPES:
            raise unsupported_media()
        patch = self._decode(body)
        try:
            return apply_patch(content_type, current, patch)
        except PatchError as e:
            if e.code == 400:
                raise bad_request(str(e)) from None
            raise ApiError(422, status_body(422, "Invalid", str(e))) from None

    @staticmethod
    def _validate_fields(kind: str, obj: JsonObj, query: Mapping[str, str]) -> Dict[str, str]:
        """``fieldValidation``: Strict refuses unknown fields (400), Warn (the default) answers them
        in a ``Warning`` header, Ignore drops them silently; returns the headers to add."""
        mode = query.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise bad_request('fieldValidation: Unsupported value: "%s": supported values: "Ignore", "Strict", "Warn"'
                              % mode)
        unknown = openapi.unknown_fields(kind, obj)
        if not unknown or mode == "Ignore":
            return {}
        if mode == "Strict":
            raise bad_request('%s in version "v1" cannot be handled as a %s: strict decoding error: %s' % (
                kind, kind, ", ".join('unknown field "%s"' % f for f in unknown)))
        return {"Warning": ", ".join('299 - "unknown field \\"%s\\""' % f for f in unknown)}

    def _update(self, resource: str, current: JsonObj, new: JsonObj, subresource: str,
                query: Mapping[str, str]) -> Reply:
        kind = KINDS[resource]
        name = current["metadata"]["name"]
        meta = new.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                              % (meta.get("name"), name))
        if meta.get("namespace") not in (None, "", current["metadata"]["namespace"]):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        rv = meta.get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise conflict(resource, name)
        result = json_copy(current)
        if subresource == "status":
            result["status"] = json_copy(new.get("status") or {})
        else:
            for key in ("labels", "annotations", "ownerReferences", "finalizers"):
                if meta.get(key):
                    result["metadata"][key] = json_copy(meta[key])
                else:
                    result["metadata"].pop(key, None)
            if resource == "pods":
                self._check_pod_update(current, new, result)
            else:
                if current.get("immutable") and (new.get("data") != current.get("data")):
                    raise invalid(kind, name, [FieldError("forbidden", "data",
                                                          "field is immutable when `immutable` is set")])
                for key in ("data", "stringData", "type", "immutable"):
                    if key in new:
                        result[key] = json_copy(new[key])
                    elif key != "type":
                        result.pop(key, None)
                admission.normalise_secret(result)
                if result["type"] != current.get("type"):
                    raise invalid(kind, name, [FieldError("invalid", "type", "field is immutable", result["type"])])
            errors = (admission.secret_errors(result) if resource == "secrets"
                      else admission.meta_errors(result["metadata"]))
            if errors:
                raise invalid(kind, name, errors)
        if result == current:
            return Reply(200, self._typed(resource, current))
        limits.check_stored_size(result)
        if query.get("dryRun"):
            return Reply(200, self._typed(resource, result))
        return Reply(200, self._typed(resource, self.store.update(resource, result)))

    def _check_pod_update(self, current: JsonObj, new: JsonObj, result: JsonObj) -> None:
        spec = json_copy(new.get("spec") or {})
        old = current.get("spec") or {}

        def masked(s: JsonObj) -> JsonObj:
            m = json_copy(s)
            for key in ("containers", "initContainers"):
                for c in m.get(key) or []:
                    c.pop("image", None)
            m.pop("activeDeadlineSeconds", None)
            m.pop("tolerations", None)
            m.pop("terminationGracePeriodSeconds", None)
            return m
        for key in ("restartPolicy", "dnsPolicy", "schedulerName", "terminationGracePeriodSeconds",
                    "securityContext", "enableServiceLinks", "serviceAccountName", "serviceAccount",
                    "preemptionPolicy", "priority"):
            if key in old and key not in spec:
                spec[key] = json_copy(old[key])
        if masked(spec) != masked(old) or not all(t in (spec.get("tolerations") or [])
                                                  for t in old.get("tolerations") or []):
            raise invalid("Pod", current["metadata"]["name"], [FieldError("forbidden", "spec", UPDATE_FORBIDDEN)])
        result["spec"] = spec

    # ------------------------------------------------------------------ delete

    def _delete_options(self, query: Mapping[str, str], body: bytes) -> JsonObj:
        options: JsonObj = {}
        if body.strip():
            decoded = self._decode(body)
            if not isinstance(decoded, dict):
                raise bad_request("DeleteOptions in version \"v1\" cannot be handled")
            options = decoded
        grace = _int_param(query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if query.get("propagationPolicy"):
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("dryRun"):
            options["dryRun"] = [query["dryRun"]]
        policy = options.get("propagationPolicy")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise invalid("DeleteOptions", "", [FieldError("notsupported", "propagationPolicy",
                                                           'supported values: "Foreground", "Background", "Orphan", '
                                                           'nil', policy)])
        return options

    def _delete(self, resource: str, current: JsonObj, options: JsonObj, query: Mapping[str, str]) -> JsonObj:
        meta = current["metadata"]
        pre = options.get("preconditions") or {}
        # the registry's BeforeDelete: a Conflict on the object's kind
        kind = KINDS.get(resource, resource)
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise ApiError(409, status_body(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the UID in the '
                                            "precondition (%s) does not match the UID in record (%s). The object "
                                            "might have been deleted and then recreated"
                                            % (kind, meta["name"], pre["uid"], meta["uid"]),
                                            {"name": meta["name"], "kind": kind}))
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise ApiError(409, status_body(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": the '
                                            "ResourceVersion in the precondition (%s) does not match the "
                                            "ResourceVersion in record (%s). The object might have been modified"
                                            % (kind, meta["name"], pre["resourceVersion"], meta["resourceVersion"]),
                                            {"name": meta["name"], "kind": kind}))
        if options.get("dryRun"):
            return current
        grace = 0
        if resource == "pods":
            given = options.get("gracePeriodSeconds")
            grace = int(given) if given is not None else int(current["spec"].get("terminationGracePeriodSeconds", 30))
            if grace < 0:
                grace = 1
            # podStrategy.CheckGracefulDelete: unscheduled or terminal pods go at once
            if not current["spec"].get("nodeName") or (current.get("status") or {}).get("phase") in TERMINAL:
                grace = 0
        if options.get("propagationPolicy") == "Orphan":
            for kind in ("pods", "secrets"):
                for dependent in self.store.items(kind):
                    refs = dependent["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == meta["uid"] for r in refs):
                        changed = json_copy(dependent)
                        changed["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != meta["uid"]]
                        if not changed["metadata"]["ownerReferences"]:
                            del changed["metadata"]["ownerReferences"]
                        self.store.update(kind, changed)
        if grace > 0:
            return self.cluster.graceful_delete(current, grace, time.time())
        if resource == "pods":
            # a pod (graceful strategy) deleted at once is first stored with its deletionTimestamp and a
            # grace of 0, then removed: watchers see MODIFIED, then DELETED (Store.Delete's
            # updateForGracefulDeletionAndFinalizers, then the deletion)
            marked = json_copy(current)
            marked["metadata"]["deletionTimestamp"] = now_rfc3339()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            self.store.update(resource, marked)
        deleted = self.store.delete(resource, meta["namespace"], meta["name"])
        return deleted if deleted is not None else current

    # ------------------------------------------------------------------ logs

    def pod_log(self, namespace: str, name: str, query: Mapping[str, str]) -> Reply:
        with self.store.lock:
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                raise not_found("pods", name)
            names = [c.get("name") for c in pod["spec"].get("containers") or []]
            container = query.get("container") or ""
            if not container:
                if len(names) != 1:
                    raise bad_request("a container name must be specified for pod %s, choose one of: [%s]"
                                      % (name, " ".join(str(n) for n in names)))
                container = str(names[0])
            if container not in names:
                raise bad_request("container %s is not valid for pod %s" % (container, name))
            if not (pod.get("spec") or {}).get("nodeName"):
                # no node to ask: the API server answers no content (LogLocation's empty location)
                return Reply(204, "", {})
            uid = pod["metadata"]["uid"]
            waiting = self.cluster.container_waiting(uid, container)
            if waiting:
                raise bad_request('container "%s" in pod "%s" is waiting to start: %s' % (container, name, waiting))
            lines = self.cluster.logs(uid, container) or []
        tail = _int_param(query, "tailLines")
        limit = _int_param(query, "limitBytes")

        def render(selected: List[str]) -> str:
            if tail is not None and tail >= 0:
                selected = selected[len(selected) - tail:] if tail else []
            text = "".join(line + "\n" for line in selected)
            return text[:limit] if limit is not None and limit > 0 else text

        if not _truthy(query.get("follow")):
            return Reply(200, render(lines), {"Content-Type": "text/plain"})

        def follow() -> Iterator[Optional[bytes]]:
            sent = len(lines)
            yield render(lines).encode()
            while True:
                with self.store.lock:
                    current = self.store.get("pods", namespace, name)
                    more = self.cluster.logs(uid, container) or []
                    done = (current is None or current["metadata"]["uid"] != uid or self.store.closed
                            or self.cluster.container_waiting(uid, container) is None and self._exited(
                                current, container))
                    if len(more) <= sent and not done:
                        self.store.changed.wait(1.0)
                if len(more) > sent:
                    yield "".join(line + "\n" for line in more[sent:]).encode()
                    sent = len(more)
                elif done:
                    return
                else:
                    yield None
        return Reply(200, None, {"Content-Type": "text/plain"}, follow())

    @staticmethod
    def _exited(pod: JsonObj, container: str) -> bool:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") == container:
                return "terminated" in (status.get("state") or {})
        return False


class Handler(core.Handler):
    """Adapts :class:`Api` to the simulators' HTTP core; one instance per connection."""

    #: Buffered: a reply's headers and body leave in one write (the base class flushes after each
    #: request; watch streams flush each event).
    wbufsize = -1
    #: The API server's limit: a larger body is answered 413 (the rest is read and dropped).
    max_body_bytes = limits.MAX_REQUEST_BODY_BYTES
    api: Api

    def date_time_string(self, timestamp: Optional[float] = None) -> str:
        """The ``Date`` header, on the simulated API server's clock."""
        return super().date_time_string(self.api.config.server_now() if timestamp is None else timestamp)

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body = self.read_body() or b""
        except ValueError:
            self.close_connection = True
            body = b""
        cert_user = None
        if isinstance(self.connection, ssl.SSLSocket):
            cert_user = peer_user(self.connection.getpeercert())
        try:
            reply = self.api.handle(self.command, url.path, query, headers, body, cert_user)
        except Exception:  # the request boundary: answer 500 and keep serving
            log.exception("simulated API server failed on %s %s", self.command, self.path)
            reply = Reply(500, status_body(500, "InternalError", "Internal error occurred: simulator failure"))
        record = RequestRecord(self.command, url.path, query, reply.code,
                               {k: v for k, v in headers.items() if k != "authorization"})
        with self.api.request_lock:
            self.api.requests.append(record)
        try:
            self._send(reply)
        except (BrokenPipeError, ConnectionResetError, socket.timeout, OSError):
            self.close_connection = True

    def _send(self, reply: Reply) -> None:
        if reply.stream is not None:
            self.send_response(reply.code)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            # The headers leave at once, as kube-apiserver flushes them when a watch starts: a client
            # whose watch sees no change (kubectl wait) must know the watch is open, and a client
            # giving up (its timeout) must not be left waiting for headers that never come.
            self.wfile.flush()
            self.close_connection = True
            try:
                for chunk in reply.stream:
                    if chunk is None:
                        if self.peer_closed():
                            return
                        continue
                    if chunk:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            finally:
                close = getattr(reply.stream, "close", None)
                if close is not None:
                    close()
            return
        if isinstance(reply.body, (str, bytes)):
            data = reply.body.encode() if isinstance(reply.body, str) else reply.body
            content_type = reply.headers.pop("Content-Type", "text/plain")
        else:
            data = json.dumps(reply.body).encode() if reply.body is not None else b""
            content_type = reply.headers.pop("Content-Type", "application/json")
        self.send_response(reply.code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


#: The simulators' core server: open connections tracked, the system's listen backlog, TLS on demand.
Server = core.Server


def make_server(api: Api, host: str = "127.0.0.1", port: int = 0, tls: Optional[ssl.SSLContext] = None) -> Server:
    """A server for ``api``; HTTPS when ``tls`` is given."""
    handler = type("BoundHandler", (Handler,), {"api": api})
    server = Server((host, port), handler, tls)
    api.server_address = "%s:%d" % (host, server.server_address[1])
    return server
