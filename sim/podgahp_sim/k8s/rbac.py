"""RBAC for service-account tokens: what the Roles bound (by RoleBindings in the same namespace) to
``system:serviceaccount:<namespace>:<name>`` grant, as kube-apiserver's RBAC authorizer decides
for namespaced requests.  ClusterRoles are not simulated: a service account gets nothing
cluster-wide but what the API server's default ClusterRoleBindings give every authenticated user
(:func:`default_rules`: the self-reviews, discovery and health paths)."""

from __future__ import annotations

from typing import Iterable, List, Optional, Tuple

from .objects import PLAIN_KINDS, store_key
from .store import JsonObj, Store

SA_PREFIX = "system:serviceaccount:"


def _bound(binding: JsonObj, user: str) -> bool:
    for subject in binding.get("subjects") or []:
        if subject.get("kind") == "ServiceAccount":
            namespace = subject.get("namespace") or (binding.get("metadata") or {}).get("namespace")
            if user == f"{SA_PREFIX}{namespace}:{subject.get('name')}":
                return True
        elif subject.get("kind") == "User" and subject.get("name") == user:
            return True
    return False


def default_rules(service_account: bool, release: Tuple[int, int]) -> Tuple[List[JsonObj], List[JsonObj]]:
    """(resource rules, non-resource rules) of the ClusterRoles the API server binds by default to
    every authenticated user (``system:basic-user``, ``system:discovery``,
    ``system:public-info-viewer``) and to every service account
    (``system:service-account-issuer-discovery``), in the order of their bindings' names, as its
    rule resolver lists them. The health paths are in two of them, so a rules review lists them
    twice. ``release``: SelfSubjectReview (``authentication.k8s.io``) is in ``system:basic-user``
    from 1.28 on."""
    resource = [{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}]
    if release >= (1, 28):
        resource.append({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]})
    health = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
    non_resource = [{"verbs": ["get"], "nonResourceURLs": sorted(health + ["/api", "/api/*", "/apis", "/apis/*",
                                                                          "/openapi", "/openapi/*"])},
                    {"verbs": ["get"], "nonResourceURLs": health}]
    if service_account:
        non_resource.append({"verbs": ["get"], "nonResourceURLs": ["/.well-known/openid-configuration",
                                                                  "/openid/v1/jwks"]})
    return resource, non_resource


def rules_for(store: Store, user: str, namespace: Optional[str]) -> List[JsonObj]:
    """The rules ``user`` has in ``namespace`` (none outside a namespace)."""
    if namespace is None:
        return []
    roles_key, bindings_key = store_key(PLAIN_KINDS["roles"]), store_key(PLAIN_KINDS["rolebindings"])
    rules: List[JsonObj] = []
    with store.lock:
        for binding in store.items(bindings_key, namespace):
            ref = binding.get("roleRef") or {}
            if ref.get("kind") != "Role" or not _bound(binding, user):
                continue
            role = store.get(roles_key, namespace, str(ref.get("name")))
            if role is not None:
                rules.extend(r for r in role.get("rules") or [] if isinstance(r, dict))
    return rules


def allowed(rules: Iterable[JsonObj], group: str, resource: str, verb: str) -> bool:
    for rule in rules:
        groups, resources, verbs = (rule.get(k) or [] for k in ("apiGroups", "resources", "verbs"))
        if (group in groups or "*" in groups) and (resource in resources or "*" in resources) \
                and (verb in verbs or "*" in verbs):
            return True
    return False
