"""``BLAH_PING`` for Kubernetes: what a site gets wrong before pilots fail, named with where to fix it.

For each queue: its pod template and token file; for each (cluster, namespace) once: every right of
:data:`~gahp.backends.k8s.rights.RIGHTS` (SelfSubjectAccessReview) and a LIST; and a dry-run create of
the queue's pod, so admission (quota, priority class, validation) answers as for a pilot.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable, List, Set, Tuple

from gahp.backends.http import JsonObj, truncate
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.identity import owner_selector, sandbox_key
from gahp.backends.k8s.spec import build_pod, load_template, pod_name
from gahp.backends.k8s.rights import RIGHTS
from gahp.backends.k8s.settings import QueueSettings
from gahp.core.errors import ConfigError, GahpError, NotFound
from gahp.core.job import PilotJob

log = logging.getLogger(__name__)


def setup_problems(targets: Iterable[Tuple[QueueSettings, KubeApi, str]], ce_name: str, user: str) -> List[str]:
    """What is wrong for each (queue, API, namespace) target, one sentence each; empty when all is well."""
    problems: List[str] = []
    seen: Set[Tuple[Any, str]] = set()
    for queue, api, namespace in targets:
        where = f"queue {queue.name} (namespace {namespace}, {api.description})"
        try:
            template = load_template(queue.pod_template)
        except ConfigError as e:
            problems.append(f"{where}: {e}")
            continue
        if queue.token_file and not os.access(queue.token_file, os.R_OK):
            problems.append(f"{where}: token file {queue.token_file} cannot be read (PODGAHP_K8S_TOKEN_FILE)")
        key = ((api.kubeconfig, api.context), namespace)
        try:
            missing: List[str] = []
            if key not in seen:
                seen.add(key)
                for resource, verb, purpose in RIGHTS:
                    allowed, reason = may(api, namespace, verb, resource)
                    if not allowed:
                        missing.append(f"{verb} {resource}")
                        problems.append(f"{where}: this identity may not {verb} {resource}, needed to {purpose}"
                                        + (f" ({reason})" if reason else "")
                                        + "; grant the rules of docs/podgahp-rbac.yaml")
                if "list pods" not in missing:
                    api.call(f"list pods in {namespace}", "list_namespaced_pod", namespace,
                             label_selector=owner_selector(ce_name, user), limit=1)
            if "create pods" not in missing:
                dry_run(queue, api, namespace, template, ce_name, user)
        except NotFound as e:
            problems.append(f"{where}: namespace {namespace} does not exist ({truncate(str(e))}); "
                            "create it or set PODGAHP_K8S_NAMESPACE")
        except GahpError as e:
            problems.append(f"{where}: {e}")
    return problems


def dry_run(queue: QueueSettings, api: KubeApi, namespace: str, template: JsonObj, ce_name: str, user: str) -> None:
    """Create the queue's pod with ``dryRun=All``: admission (quota, priority class, validation)
    answers as for a pilot, and nothing is stored."""
    probe = PilotJob(executable="/bin/true", iwd="/", sandbox_id="podgahp-ping", cpus=1, memory_mb=64)
    name = pod_name(sandbox_key(ce_name, user, probe.sandbox_id), 1)
    body = build_pod(probe, queue, template, name=name, namespace=namespace, ce_name=ce_name,
                     generation=1, user=user, staged=[])
    api.call(f"dry-run create of a pod of queue {queue.name} in {namespace}", "create_namespaced_pod",
             namespace, body, dry_run="All")


def may(api: KubeApi, namespace: str, verb: str, resource: str) -> Tuple[bool, str]:
    """Ask the API server (SelfSubjectAccessReview) whether we may do ``verb`` on ``resource``."""
    base, _, sub = resource.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "resource": base}
    if sub:
        attributes["subresource"] = sub
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attributes}}
    try:
        answer = api.call(f"check {verb} {resource} in {namespace}", "create_self_subject_access_review",
                          review)
    except NotFound:
        log.info("SelfSubjectAccessReview is not available; not checking %s %s in %s", verb, resource,
                 namespace)
        return True, ""
    status = answer.get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")
