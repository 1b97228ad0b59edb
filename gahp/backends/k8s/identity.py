"""Who a pod belongs to, and what a job id may name.

A CE serves many users from one namespace, and everything in a job ad is user input (a user can set
``+remote_JobDirectory`` to another user's sandbox).  So:

* a pod's name is ``pilot-<key>-<generation>`` where ``key`` hashes this CE, the HTCondor user the GAHP
  runs as, and the sandbox: two users can never reach the same name, whatever sandbox they claim;
* its labels and annotations record the CE, the owner and the sandbox;
* a job id is accepted only in the exact form podgahp hands out (``k8s/<namespace>/pilot-<20 hex>-<n>``),
  so nothing a job id holds can widen a request to a collection, another resource or a pod podgahp
  never made;
* status, cancel and proxy refresh act only on a pod whose labels say it is this CE's and this user's
  (:func:`refusal`); deletes carry the pod's uid as a precondition.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple

from gahp.backends.k8s.settings import label_value
from gahp.backends.k8s.view import Pod, record_of
from gahp.core.errors import InvalidJob
from gahp.rules.identity import KEY_LENGTH as KEY_LENGTH, sandbox_key as sandbox_key  # the GAHP-wide rule

DOMAIN = "podgahp.htcondor.org"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "podgahp"
LABEL_CE = f"{DOMAIN}/ce"
LABEL_OWNER = f"{DOMAIN}/owner"
LABEL_SANDBOX = f"{DOMAIN}/sandbox"
ANN_USER = f"{DOMAIN}/user"

#: Namespace names (RFC 1123 labels) and the pod names podgahp makes.
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_POD = re.compile(r"^pilot-[0-9a-f]{%d}-[1-9][0-9]{0,8}$" % KEY_LENGTH)


def pod_name(key: str, generation: int) -> str:
    """Deterministic per (key, generation): a repeated submit collides instead of duplicating."""
    return f"pilot-{key}-{generation}"


def job_id_of(namespace: str, name: str) -> str:
    return f"k8s/{namespace}/{name}"


def parse_job_id(text: str) -> Tuple[str, str]:
    """(namespace, pod name) of a job id podgahp handed out; InvalidJob for anything else."""
    parts = text.split("/")
    if len(parts) != 3 or parts[0] != "k8s":
        raise InvalidJob(f"job id {text[:200]!r} is not of the form k8s/<namespace>/<pod>")
    namespace, name = parts[1], parts[2]
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidJob(f"job id {text[:200]!r}: {namespace[:80]!r} is not a namespace name")
    if not _POD.fullmatch(name):
        raise InvalidJob(f"job id {text[:200]!r}: {name[:80]!r} is not the name of a pod podgahp creates "
                         f"(pilot-<{KEY_LENGTH} hex digits>-<generation>)")
    return namespace, name


def owner_labels(ce_name: str, user: str) -> Dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CE: ce_name, LABEL_OWNER: label_value(user)}


def owner_selector(ce_name: str, user: str) -> str:
    """Label selector of this user's pods on this CE."""
    return ",".join(f"{k}={v}" for k, v in owner_labels(ce_name, user).items())


def refusal(pod: Pod, ce_name: str, user: str) -> Optional[str]:
    """Why this GAHP must not act on ``pod`` (``None``: it is this CE's pod of this user)."""
    view = record_of(pod)
    name = f"{view.namespace or '?'}/{view.name or '?'}"
    if view.label(LABEL_MANAGED_BY) != MANAGED_BY:
        return f"pod {name} was not created by podgahp"
    if view.label(LABEL_CE) != ce_name:
        return f"pod {name} belongs to another CE ({view.labels.get(LABEL_CE)!r}, this CE is {ce_name!r})"
    if view.label(LABEL_OWNER) != label_value(user) or view.annotation(ANN_USER) != user:
        return f"pod {name} belongs to another user, not {user!r}"
    return None
