"""The input Secret of a pilot pod: made right after the pod, owned by it (so the garbage collector
deletes it with the pod), replaced when a Secret of that name belongs to an older pod; and the proxy in
it replaced by a proxy refresh."""

from __future__ import annotations

import base64
import logging
from typing import List

from gahp.backends.http import JsonObj
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.spec import ANN_PROXY_KEY, INPUT_VOLUME, PROXY_KEY, StagedFile, secret_body
from gahp.backends.k8s.view import Pod, record_of
from gahp.core.errors import BackendError, Conflict, GahpError, NotFound

log = logging.getLogger(__name__)


def ensure_secret(api: KubeApi, pod: Pod, staged: List[StagedFile], jid: str, fresh: bool = False) -> None:
    """Create the pod's input Secret, owned by the pod; replace a stale one left by an older pod.

    ``fresh``: the pod was just created for this Secret; if the Secret cannot be made, the pod is
    deleted (a pilot without its inputs must not run) and the submit fails."""
    view = record_of(pod)
    name, namespace, uid = view.name, view.namespace, view.uid
    labels = dict(view.labels)
    body = secret_body(name, namespace, uid, labels, staged)
    try:
        api.call(f"create secret {namespace}/{name}", "create_namespaced_secret", namespace, body, job_id=jid,
                 answer=False)
        return
    except Conflict:
        pass
    except GahpError as e:
        if fresh:
            log.warning("[%s] input secret cannot be created (%s); deleting the pod", jid, e)
            try:
                api.call(f"delete pod {namespace}/{name}", "delete_namespaced_pod", name, namespace,
                         job_id=jid, grace_period_seconds=0)
            except GahpError as delete_error:
                log.warning("[%s] deleting the pod failed too: %s", jid, delete_error)
            raise BackendError(f"pod {namespace}/{name}: input secret cannot be created: {e}") from e
        raise
    current = api.call(f"read secret {namespace}/{name}", "read_namespaced_secret", name, namespace, job_id=jid)
    owners = (current.get("metadata") or {}).get("ownerReferences")
    if isinstance(owners, list) and any(isinstance(o, dict) and o.get("uid") == uid for o in owners):
        return
    log.info("[%s] replacing an input secret owned by an older pod of the same name", jid)
    api.call(f"replace secret {namespace}/{name}", "replace_namespaced_secret", name, namespace, body,
             job_id=jid, answer=False)


def replace_proxy(api: KubeApi, pod: Pod, data: bytes, jid: str) -> bool:
    """Write ``data`` as the proxy of the pod's input Secret, under the key the pod reads it by; whether
    it was (a pilot submitted without a proxy has none to refresh; a Secret already gone is left so)."""
    view = record_of(pod)
    key = view.annotation(ANN_PROXY_KEY)
    if not key:
        secrets = [v.get("secret") for v in view.volumes if v.get("name") == INPUT_VOLUME]
        staged = [i.get("key") for secret in secrets if isinstance(secret, dict)
                  for i in secret.get("items") or [] if isinstance(i, dict)]
        if PROXY_KEY not in staged:
            log.warning("[%s] the pilot was submitted without a proxy; nothing to refresh", jid)
            return False
        key = PROXY_KEY
    patch = {"data": {key: base64.b64encode(data).decode()}}
    try:
        api.call(f"refresh proxy in secret {view.namespace}/{view.name}", "patch_namespaced_secret", view.name,
                 view.namespace, patch, job_id=jid)
    except NotFound:
        log.info("[%s] input secret is gone; proxy not refreshed", jid)
        return False
    return True
