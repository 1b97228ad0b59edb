"""RBAC for service-account tokens: what the Roles bound (by RoleBindings in the same namespace) to
``system:serviceaccount:<namespace>:<name>`` grant, as kube-apiserver's RBAC authorizer decides
for namespaced requests.  ClusterRoles are not simulated: a service account gets nothing
cluster-wide (SelfSubjectAccessReview, which every authenticated user may create, aside)."""

from __future__ import annotations

from typing import Iterable, List, Optional

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
