"""Orphan pods: pods of this CE whose HTCondor job no longer exists, whatever the path that left them
(a cancel that failed for good, a submit that timed out after the API had created the pod, a schedd
restored from a backup, a GAHP that was not running).  ``podgahp reap`` asks the schedd which jobs
exist and calls :func:`reap_orphans`; the selection itself (:func:`orphans`) is a pure function.

Cost of one pass: one LIST per (cluster, namespace) of the configured queues, plus one DELETE per
orphan (at most ``REAP_MAX_DELETES``; the rest wait for the next pass).  Deletes carry the pod's uid
as a precondition, so a pod re-created under the same name meanwhile is not touched.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Set

from gahp.backends.k8s.api import KubeApi, truncate
from gahp.backends.k8s.census import ce_pods
from gahp.backends.k8s.identity import job_id
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.backends.k8s.state import parse_time
from gahp.errors import Conflict, GahpError, NotFound

log = logging.getLogger(__name__)

JsonObj = Dict[str, Any]

#: Most orphans deleted in one pass.
REAP_MAX_DELETES = 500


@dataclass
class ReapResult:
    """What one pass saw and did (printed for the schedd's ad by ``podgahp reap``)."""

    pods: int = 0
    orphans: int = 0
    deleted: int = 0
    errors: List[str] = field(default_factory=list)
    requests: int = 0
    by_queue: Dict[str, Dict[str, int]] = field(default_factory=dict)
    """Pods per queue and phase, as listed."""


def orphans(pods: Iterable[JsonObj], live_job_ids: Set[str], now: datetime.datetime,
            grace_s: float) -> List[JsonObj]:
    """Pods whose job id no HTCondor job holds, created at least ``grace_s`` ago (a pod made by a
    submit whose answer has not reached the schedd yet is younger than that), not already deleting."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        if job_id(str(meta.get("namespace", "")), str(meta.get("name", ""))) in live_job_ids:
            continue
        created = parse_time(meta.get("creationTimestamp"))
        if created is None or (now - created).total_seconds() < grace_s:
            continue
        found.append(pod)
    return found


def reap_orphans(settings: KubernetesSettings, live_job_ids: Set[str], grace_s: float,
                 dry_run: bool = False) -> ReapResult:
    """One pass over every (cluster, namespace) of the configured queues."""
    result = ReapResult()
    now = datetime.datetime.now(datetime.timezone.utc)
    with ce_pods(settings) as census:
        result.errors.extend(census.errors)
        result.by_queue = census.by_queue()
        for listed in census.namespaces:
            result.pods += len(listed.pods)
            found = orphans(listed.pods, live_job_ids, now, grace_s)
            result.orphans += len(found)
            for pod in found[:max(0, REAP_MAX_DELETES - result.deleted)]:
                _delete(listed.api, pod, dry_run, result)
        result.requests = census.requests
    return result


def _delete(api: KubeApi, pod: JsonObj, dry_run: bool, result: ReapResult) -> None:
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    jid = job_id(namespace, name)
    if dry_run:
        log.info("[%s] orphan (its job no longer exists); not deleted (dry run)", jid)
        return
    try:
        api.call(f"delete pod {namespace}/{name}", "delete_namespaced_pod", name, namespace, job_id=jid,
                 body={"preconditions": {"uid": meta.get("uid")}}, propagation_policy="Background")
        log.info("[%s] orphan deleted: its job no longer exists in the schedd", jid)
        result.deleted += 1
    except (NotFound, Conflict):
        pass
    except GahpError as e:
        result.errors.append(f"{jid}: {truncate(str(e))}")
