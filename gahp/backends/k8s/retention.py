"""Which of a namespace's pods the GAHP's own clean-up deletes, and why: a pure function of the pods
and the clock (the deleting is the backend's). A pod superseded by a newer generation of its sandbox
goes at once; a finished pod goes ``PODGAHP_K8S_FINISHED_RETENTION_SECONDS`` after its outcome was
reported, or ``PODGAHP_K8S_UNREPORTED_RETENTION_SECONDS`` after it finished if it never was."""

from __future__ import annotations

import datetime
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gahp.backends.k8s.identity import LABEL_SANDBOX
from gahp.backends.k8s.pod import ANN_REPORTED, LABEL_GENERATION
from gahp.backends.k8s.state import parse_time

JsonObj = Dict[str, Any]


def generation_of(pod: JsonObj) -> int:
    """The pod's generation within its sandbox (label ``LABEL_GENERATION``; 0 when absent or odd)."""
    try:
        return int(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_GENERATION, "0"))
    except ValueError:
        return 0


def due_for_cleanup(pods: Sequence[JsonObj], now: datetime.datetime, finished_retention_s: float,
                    unreported_retention_s: float) -> List[Tuple[str, str]]:
    """(name, why) of each pod to delete now, in the order of ``pods``."""
    newest: Dict[str, int] = {}
    for pod in pods:
        sandbox = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_SANDBOX, "")
        newest[sandbox] = max(newest.get(sandbox, 0), generation_of(pod))
    doomed: List[Tuple[str, str]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        sandbox = (meta.get("labels") or {}).get(LABEL_SANDBOX, "")
        if generation_of(pod) < newest.get(sandbox, 0):
            doomed.append((meta.get("name", ""), "superseded by a newer pod of its sandbox"))
            continue
        if _phase(pod) not in ("Succeeded", "Failed"):
            continue
        reported = parse_time((meta.get("annotations") or {}).get(ANN_REPORTED))
        if reported is not None:
            if (now - reported).total_seconds() >= finished_retention_s:
                doomed.append((meta.get("name", ""), "finished and reported"))
            continue
        finished = _finish_time(pod)
        if finished is not None and (now - finished).total_seconds() >= unreported_retention_s:
            doomed.append((meta.get("name", ""), "finished long ago and never reported"))
    return doomed


def _phase(pod: JsonObj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _finish_time(pod: JsonObj) -> Optional[datetime.datetime]:
    status = pod.get("status") or {}
    times = []
    for container in status.get("containerStatuses") or []:
        finished = parse_time(((container.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if finished:
            times.append(finished)
    for condition in status.get("conditions") or []:
        when = parse_time(condition.get("lastTransitionTime"))
        if when:
            times.append(when)
    if times:
        return max(times)
    return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
