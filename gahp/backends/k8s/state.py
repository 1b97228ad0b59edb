"""Pod phase and reason → neutral :class:`~gahp.core.jobstate.JobState`: the backend's one state table.

:func:`classify` reduces a pod (its record, or the raw JSON) to a key of :data:`STATE_TABLE` plus the
details a hold reason or exit reason needs (:class:`~gahp.backends.table.Classified`); :func:`job_state`
turns that into a ``JobState`` through the row (:func:`gahp.backends.table.answer`). Every row of the
table is documented in ``docs/kubernetes.md`` and covered by a parametrized test. Pure functions over pods.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from decimal import Decimal
from typing import Any, Dict, Mapping, Optional, Tuple

from kubernetes.utils import parse_quantity  # type: ignore[import-untyped,unused-ignore]

from gahp.rules import holds
from gahp.backends.http import JsonObj
from gahp.backends.k8s.spec import CONTAINER
from gahp.backends.k8s.view import Pod, PodRecord, container_state, record_of
from gahp.backends.table import Classified, Rule, answer
from gahp.core.jobstate import JobState, Phase


#: Key (pod phase, then reason) → what the gridmanager is told. Keys are produced by :func:`classify`.
STATE_TABLE: Mapping[str, Rule] = {
    "Pending": Rule(Phase.IDLE),
    "Pending/Unschedulable": Rule(Phase.IDLE),
    "Pending/Unschedulable/TimedOut": Rule(Phase.HELD, holds.UNSCHEDULABLE,
                                           "pod could not be scheduled"),
    "Pending/ErrImagePull": Rule(Phase.HELD, holds.IMAGE_PULL, "image cannot be pulled"),
    "Pending/ImagePullBackOff": Rule(Phase.HELD, holds.IMAGE_PULL, "image cannot be pulled"),
    "Pending/ErrImageNeverPull": Rule(Phase.HELD, holds.IMAGE_PULL, "image is not on the node"),
    "Pending/InvalidImageName": Rule(Phase.HELD, holds.INVALID_IMAGE, "image name is invalid"),
    "Pending/CreateContainerConfigError": Rule(Phase.HELD, holds.CONTAINER_CONFIG,
                                               "container cannot be configured"),
    "Pending/CreateContainerError": Rule(Phase.HELD, holds.CONTAINER_CONFIG,
                                         "container cannot be created"),
    "Running": Rule(Phase.RUNNING),
    "Unknown": Rule(Phase.IDLE),
    "Succeeded": Rule(Phase.COMPLETED),
    "Failed": Rule(Phase.COMPLETED),
    "Failed/OOMKilled": Rule(Phase.HELD, holds.OUT_OF_MEMORY, "OOMKilled: the pilot exceeded its memory limit"),
    "Failed/DeadlineExceeded": Rule(Phase.COMPLETED,
                                    reason="DeadlineExceeded: the pilot ran longer than its BatchRuntime"),
    "Failed/Evicted": Rule(Phase.COMPLETED, reason="Evicted by the kubelet"),
    "Failed/Preempted": Rule(Phase.COMPLETED, reason="Preempted or evicted by Kubernetes"),
    "Failed/NodeShutdown": Rule(Phase.COMPLETED, reason="Terminated by a node shutdown"),
    "Failed/Evicted/Hold": Rule(Phase.HELD, holds.EVICTED, "pod was evicted"),
    "Failed/Preempted/Hold": Rule(Phase.HELD, holds.PREEMPTED, "pod was preempted or evicted"),
    "Failed/NodeShutdown/Hold": Rule(Phase.HELD, holds.NODE_SHUTDOWN,
                                     "pod was terminated by a node shutdown"),
    "Missing": Rule(Phase.REMOVED),
}

_WAITING_HOLDS = {"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                  "CreateContainerConfigError", "CreateContainerError"}
SIGKILL = 9


def parse_time(text: Any) -> Optional[datetime.datetime]:
    if not isinstance(text, str) or not text:
        return None
    text = re.sub(r"\.[0-9]+", "", text.strip()).replace("Z", "+00:00")
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def _age_s(pod: PodRecord, now: datetime.datetime) -> float:
    created = parse_time(pod.created)
    return (now - created).total_seconds() if created else 0.0


def _exit(terminated: JsonObj) -> Classified:
    code = terminated.get("exitCode")
    signal = terminated.get("signal")
    if isinstance(signal, int) and signal > 0:
        return Classified("", exit_signal=signal)
    if terminated.get("reason") == "OOMKilled":
        return Classified("", exit_signal=SIGKILL)
    if isinstance(code, int):
        return Classified("", exit_code=code)
    return Classified("", exit_signal=SIGKILL)


def classify(pod: Pod, *, now: datetime.datetime, unschedulable_timeout_s: int,
             disruption_action: str) -> Classified:
    """The :data:`STATE_TABLE` key of a pod, with the message and exit status that go with it."""
    view = record_of(pod)
    phase = view.phase
    container = view.container_status(CONTAINER)
    terminated = container_state(container, "terminated")
    waiting = container_state(container, "waiting")

    if phase == "Running" and terminated:
        # The pilot container ended while other (sidecar) containers keep the pod running.
        phase = "Succeeded" if terminated.get("exitCode") == 0 else "Failed"

    if phase == "Pending":
        return _classify_pending(view, container, waiting, now, unschedulable_timeout_s)
    if phase == "Running":
        return Classified("Running")
    if phase == "Succeeded":
        done = _exit(terminated) if terminated else Classified("", exit_code=0)
        return Classified("Succeeded", exit_code=done.exit_code, exit_signal=done.exit_signal)
    if phase == "Failed":
        return _classify_failed(view, terminated, disruption_action)
    return Classified("Unknown", view.reason)


def _classify_pending(pod: PodRecord, container: JsonObj, waiting: JsonObj, now: datetime.datetime,
                      unschedulable_timeout_s: int) -> Classified:
    reason = waiting.get("reason") or ""
    if reason in _WAITING_HOLDS:
        image = container.get("image") or _spec_image(pod)
        message = waiting.get("message") or ""
        return Classified(f"Pending/{reason}", f'image "{image}": {reason}: {message}'.rstrip(": "))
    scheduled = pod.condition("PodScheduled")
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        message = scheduled.get("message") or "no node fits the pod"
        age = _age_s(pod, now)
        if unschedulable_timeout_s and age >= unschedulable_timeout_s:
            return Classified("Pending/Unschedulable/TimedOut",
                              f"unschedulable for {int(age)} s (queue limit "
                              f"{unschedulable_timeout_s} s): {message}")
        return Classified("Pending/Unschedulable", message)
    return Classified("Pending")


#: A failed pod's reason, as the kubelet or a controller sets it, and the row it gives.
_FAILED_REASONS = {"DeadlineExceeded": "Failed/DeadlineExceeded", "Evicted": "Failed/Evicted",
                   "Terminated": "Failed/NodeShutdown", "Shutdown": "Failed/NodeShutdown",
                   "NodeShutdown": "Failed/NodeShutdown"}
#: The rows a queue's PODGAHP_K8S_DISRUPTION_ACTION = hold turns into holds.
_DISRUPTED = ("Failed/Evicted", "Failed/Preempted", "Failed/NodeShutdown")


def _classify_failed(pod: PodRecord, terminated: JsonObj, disruption_action: str) -> Classified:
    done = _exit(terminated) if terminated else Classified("", exit_signal=SIGKILL)
    key, message = _failed_key(pod, terminated)
    if key in _DISRUPTED and disruption_action == "hold":
        key += "/Hold"
    return Classified(key, message, done.exit_code, done.exit_signal)


def _failed_key(pod: PodRecord, terminated: JsonObj) -> Tuple[str, str]:
    """The row of a failed pod and the message to give with it."""
    reason, message = pod.reason, pod.message
    if terminated.get("reason") == "OOMKilled":
        return "Failed/OOMKilled", terminated.get("message") or message
    if reason in _FAILED_REASONS:
        return _FAILED_REASONS[reason], message
    disruption = pod.condition("DisruptionTarget")
    # Any reason of a true DisruptionTarget is a disruption: those known are PreemptionByScheduler,
    # PreemptionByKubeScheduler, EvictionByEvictionAPI, DeletionByTaintManager, DeletionByPodGC and
    # TerminationByKubelet, and a newer release may add more.
    if disruption.get("status") == "True" and disruption.get("reason"):
        return "Failed/Preempted", message or f"{disruption.get('reason')}: {disruption.get('message') or ''}".rstrip(": ")
    if terminated:
        message = terminated.get("message") or (
            f"container {terminated.get('reason')}" if terminated.get("reason") not in (None, "Error",
                                                                                        "Completed") else "")
    return "Failed", message


def _pilot_spec(pod: PodRecord) -> JsonObj:
    """The pilot container of the spec (else the first; {} when there is none)."""
    containers = pod.containers
    return next((c for c in containers if c.get("name") == CONTAINER), containers[0] if containers else {})


def _spec_image(pod: PodRecord) -> str:
    return str(_pilot_spec(pod).get("image") or "")


def quantity(text: Any) -> Optional[Decimal]:
    """A resource quantity as a number, by the Kubernetes client's own parser (every suffix and
    exponent form: ``100m``, ``1.5Gi``, ``1e3``, ``2P``); None when absent, not a quantity, or not a
    finite number below 10**18 (a pod read back is not trusted to be small)."""
    if text is None:
        return None
    if isinstance(text, (str, int, float)):  # pods repeat a few values: parse each once
        return _quantity(type(text).__name__, text)
    return _parse(text)


@functools.lru_cache(maxsize=1024)
def _quantity(kind: str, text: Any) -> Optional[Decimal]:
    """:func:`_parse`, remembered by type and value (so ``1``, ``1.0`` and ``True`` stay apart)."""
    return _parse(text)


def _parse(text: Any) -> Optional[Decimal]:
    try:
        value = parse_quantity(text)  # type: ignore[no-untyped-call,unused-ignore]
    except (ValueError, TypeError, ArithmeticError):
        return None
    value = value if isinstance(value, Decimal) else Decimal(value)
    return value if value.is_finite() and value.adjusted() < 18 else None


def _provisioned(pod: PodRecord) -> Dict[str, Optional[int]]:
    resources = _pilot_spec(pod).get("resources")
    requests = resources.get("requests") if isinstance(resources, dict) else None
    requests = requests if isinstance(requests, dict) else {}
    cpu, memory, disk = (quantity(requests.get(k)) for k in ("cpu", "memory", "ephemeral-storage"))
    return {
        "cpus": math.ceil(cpu) if cpu is not None else None,
        "memory": math.ceil(memory / 1024 ** 2) if memory is not None else None,
        "disk": math.ceil(disk / 1024) if disk is not None else None,
    }


def job_state(pod: Optional[Pod], classified: Classified, job_id: str) -> JobState:
    """The ``JobState`` for a classified pod (``pod`` None for a pod that is gone)."""
    if pod is None:
        return JobState(Phase.REMOVED, batch_id=job_id.rsplit("/", 1)[-1])
    view = record_of(pod)
    provisioned = _provisioned(view)
    wall: Optional[float] = None
    if STATE_TABLE[classified.key].phase is Phase.COMPLETED:
        terminated = container_state(view.container_status(CONTAINER), "terminated")
        started = parse_time(terminated.get("startedAt") or view.start_time)
        finished = parse_time(terminated.get("finishedAt"))
        wall = (finished - started).total_seconds() if started and finished else None
    details = JobState(Phase.IDLE, batch_id=view.name or None, worker_node=view.node or None,
                       cpus_provisioned=provisioned["cpus"], memory_provisioned_mb=provisioned["memory"],
                       disk_provisioned_kb=provisioned["disk"], wall_clock_s=wall)
    return answer(STATE_TABLE, classified, details, f"pod {view.namespace}/{view.name}")
