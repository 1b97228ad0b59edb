"""Which of a namespace's pods the GAHP's own clean-up deletes, and why: a pure function of the pods
and the clock (the deleting is the backend's). A pod superseded by a newer generation of its sandbox
goes at once; a finished pod goes ``PODGAHP_K8S_FINISHED_RETENTION_SECONDS`` after its outcome was
reported, or ``PODGAHP_K8S_UNREPORTED_RETENTION_SECONDS`` after it finished if it never was."""

from __future__ import annotations

import datetime
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from gahp.backends.http import truncate
from gahp.backends.k8s.identity import LABEL_SANDBOX, job_id_of
from gahp.backends.k8s.spec import ANN_REPORTED, generation_of
from gahp.backends.k8s.state import parse_time
from gahp.backends.k8s.view import Pod, PodRecord, container_state, record_of
from gahp.core.errors import GahpError, NotFound

if TYPE_CHECKING:
    from gahp.backends.k8s.cache import PodCache

log = logging.getLogger(__name__)


#: Deletes a clean-up pass sends at a time.
PARALLEL = 8


def due_for_cleanup(pods: Sequence[Pod], now: datetime.datetime, finished_retention_s: float,
                    unreported_retention_s: float) -> List[Tuple[str, str]]:
    """(name, why) of each pod to delete now, in the order of ``pods``."""
    views = [record_of(pod) for pod in pods]
    newest: Dict[str, int] = {}
    for view in views:
        sandbox = view.label(LABEL_SANDBOX)
        newest[sandbox] = max(newest.get(sandbox, 0), generation_of(view))
    doomed: List[Tuple[str, str]] = []
    for view in views:
        if view.deleting:
            continue
        if generation_of(view) < newest.get(view.label(LABEL_SANDBOX), 0):
            doomed.append((view.name, "superseded by a newer pod of its sandbox"))
            continue
        if not view.finished:
            continue
        reported = parse_time(view.annotation(ANN_REPORTED))
        if reported is not None:
            if (now - reported).total_seconds() >= finished_retention_s:
                doomed.append((view.name, "finished and reported"))
            continue
        finished = _finish_time(view)
        if finished is not None and (now - finished).total_seconds() >= unreported_retention_s:
            doomed.append((view.name, "finished long ago and never reported"))
    return doomed


def _finish_time(pod: PodRecord) -> Optional[datetime.datetime]:
    """When the pod finished: its containers' or conditions' latest time (else its creation)."""
    times = [parse_time(container_state(c, "terminated").get("finishedAt")) for c in pod.container_statuses]
    times += [parse_time(c.get("lastTransitionTime")) for c in pod.conditions]
    known = [t for t in times if t]
    return max(known) if known else parse_time(pod.created)


def clean_up(cache: "PodCache", doomed: Sequence[Tuple[str, str]]) -> List[str]:
    """Delete every pod of ``doomed`` ((name, why) pairs), :data:`PARALLEL` deletes at a time, so that a
    pass keeps up with any completion rate; returns the names deleted."""
    if not doomed:
        return []

    def delete(name: str, why: str) -> bool:
        jid = job_id_of(cache.namespace, name)
        try:
            cache.api.call(f"delete pod {cache.namespace}/{name}", "delete_namespaced_pod", name,
                           cache.namespace, job_id=jid, propagation_policy="Background")
        except NotFound:
            return False
        except GahpError as e:
            log.warning("[%s] clean-up delete failed: %s", jid, truncate(str(e)))
            return False
        log.info("[%s] cleaned up: %s", jid, why)
        return True

    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(doomed)), thread_name_prefix="clean-up") as pool:
        done = list(pool.map(lambda item: delete(*item), doomed))
    return [name for (name, _), ok in zip(doomed, done) if ok]
