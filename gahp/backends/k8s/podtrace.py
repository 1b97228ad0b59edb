"""The Kubernetes hops of ``podgahp trace``: the pilot's pod created, scheduled, running, completed,
and on a stall why, in the words of the state table (:func:`~gahp.backends.k8s.state.classify`), the
pod's conditions and its Events; when the GAHP made no pod, what its ping would find wrong (rights,
namespace, admission).

Reads one pod and its Events per look; never changes anything.
"""

from __future__ import annotations

import datetime
from typing import List, Optional, Tuple

from gahp.backends.http import JsonObj, truncate
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.identity import parse_job_id
from gahp.backends.k8s.spec import CONTAINER
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings
from gahp.backends.k8s.state import STATE_TABLE, classify
from gahp.backends.k8s.view import PodRecord, container_state, record_of
from gahp.core.errors import GahpError, InvalidJob, NotFound, Unauthorized
from gahp.core.jobstate import Phase
from gahp.rules.hops import DONE, FAILED, WAITING, Hop


#: How many of a pod's Events a stall shows (the latest).
EVENTS_SHOWN = 5
#: The pod's hops, in order (the names ``podgahp trace`` shows after "GAHP request").
HOPS = ("pod created", "scheduled", "running", "completed")
CREATED, SCHEDULED, RUNNING, COMPLETED = HOPS


def pod_of(grid_job_id: str) -> Optional[Tuple[str, str]]:
    """(namespace, pod) of a routed job's ``GridJobId`` (``batch k8s <sandbox> k8s/<ns>/<pod>``)."""
    words = grid_job_id.split()
    if len(words) < 3 or words[:2] != ["batch", "k8s"]:
        return None
    try:
        return parse_job_id(words[-1])
    except InvalidJob:
        return None


class PodLook:
    """Reads of one cluster for a trace: the pod, its Events, the ping's findings."""

    def __init__(self, settings: KubernetesSettings, queue_name: Optional[str]) -> None:
        self.settings = settings
        self.queue: QueueSettings = _queue(settings, queue_name)
        self.api = KubeApi(settings, self.queue, "trace")

    def close(self) -> None:
        self.api.close()

    def pod(self, namespace: str, name: str) -> Optional[JsonObj]:
        try:
            found = self.api.call(f"read pod {namespace}/{name}", "read_namespaced_pod", name, namespace,
                                  retry=False)
        except NotFound:
            return None
        return found if isinstance(found, dict) else None

    def events(self, namespace: str, name: str) -> List[str]:
        """The pod's latest Events as ``Reason: message``; where the identity may not list them (the
        shipped Role does not grant it), a line that says so; none when they cannot be read otherwise."""
        try:
            listed = self.api.call(f"list events of pod {namespace}/{name}", "list_namespaced_event", namespace,
                                   field_selector=f"involvedObject.kind=Pod,involvedObject.name={name}",
                                   retry=False)
        except Unauthorized:
            return [f"(the pod's Events are not shown: this identity may not list events in namespace {namespace}; "
                    "an optional right, see docs/kubernetes.md)"]
        except GahpError:
            return []
        items = [e for e in (listed.get("items") or []) if isinstance(e, dict)]
        items.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or
                                     (e.get("metadata") or {}).get("creationTimestamp") or ""))
        return [" ".join(f"{e.get('type', '')} {e.get('reason', '')}: {truncate(str(e.get('message') or ''))}".split())
                for e in items[-EVENTS_SHOWN:]]

    def setup_problems(self, user: str) -> List[str]:
        """What the GAHP's ping would find wrong for this queue (rights, namespace, admission)."""
        from gahp.backends.k8s.ping import setup_problems

        try:
            namespace = self.api.namespace(self.queue)
        except GahpError as e:
            return [str(e)]
        return setup_problems([(self.queue, self.api, namespace)], self.settings.ce_name, user)


def _queue(settings: KubernetesSettings, name: Optional[str]) -> QueueSettings:
    try:
        return settings.queue(name)
    except GahpError:
        return settings.queue(None)


def pod_hops(pod: Optional[JsonObj], where: Tuple[str, str], events: List[str], settings: KubernetesSettings,
             queue: QueueSettings, now: datetime.datetime) -> List[Hop]:
    """The pod's hops, from what was read: created, scheduled, running, completed."""
    namespace, name = where
    if pod is None:
        return [Hop(CREATED, WAITING, f"no pod {namespace}/{name} in the cluster (yet, or deleted)",
                    events)]
    view = record_of(pod)
    hops = [Hop(CREATED, DONE, f"pod {namespace}/{name}")]
    classified = classify(view, now=now, unschedulable_timeout_s=queue.unschedulable_timeout_s,
                          disruption_action=queue.disruption_action)
    rule = STATE_TABLE.get(classified.key)
    held = rule is not None and rule.phase == Phase.HELD
    why = " ".join(f"{classified.key}: {classified.message}".split()) if classified.message else classified.key
    if not view.node:
        scheduled = view.condition("PodScheduled")
        message = str(scheduled.get("message") or scheduled.get("reason") or "not placed yet")
        hops.append(Hop(SCHEDULED, FAILED if held else WAITING, " ".join(message.split()), events))
        return hops
    hops.append(Hop(SCHEDULED, DONE, f"on node {view.node}"))
    waiting = _not_started(view)
    if waiting is not None:
        hops.append(Hop(RUNNING, FAILED if held else WAITING, f"{waiting} (state table: {why})" if held else waiting,
                        events))
        return hops
    hops.append(Hop(RUNNING, DONE, f"phase {view.phase}"))
    hops.append(_completed(view.phase, held, why, events))
    return hops


def _not_started(view: PodRecord) -> Optional[str]:
    """Why the pilot's container has not started (its waiting reason and message), or None once it has."""
    status = view.container_status(CONTAINER)
    raw_state = status.get("state")
    state: JsonObj = raw_state if isinstance(raw_state, dict) else {}
    if "running" in state or "terminated" in state or view.finished or view.phase == "Running":
        return None
    waiting = container_state(status, "waiting")
    detail = str(waiting.get("reason") or view.phase or "Pending")
    if waiting.get("message"):
        detail += f": {waiting.get('message')}"
    return " ".join(detail.split())


def _completed(phase: str, held: bool, why: str, events: List[str]) -> Hop:
    if phase == "Succeeded":
        return Hop(COMPLETED, DONE, f"Succeeded ({why})")
    if phase == "Failed" or held:
        return Hop(COMPLETED, FAILED, why, events)
    return Hop(COMPLETED, WAITING, f"still {phase}")
