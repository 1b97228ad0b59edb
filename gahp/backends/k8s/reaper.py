"""Orphan pods: pods of this CE whose HTCondor job no longer exists, whatever the path that left them
(a cancel that failed for good, a submit that timed out after the API had created the pod, a schedd
restored from a backup, a GAHP that was not running).  ``podgahp reap`` asks the schedd which jobs
exist (:func:`gahp.schedd.grid_jobs`, which refuses an answer it cannot show to be whole) and calls
:func:`reap_orphans`; the decision itself (:func:`plan`) is a pure function.

It fails safe: a pod is deleted only when every rule below says so, and a pass that finds a reason
to doubt its inputs deletes nothing and says why (an error line, a non-zero exit):

* the pod's job id is named by no grid job's ``GridJobId`` (whatever its ``GridResource``
  spelling: the gridmanager accepts ``batch K8S``);
* the pod is older than the grace period, on the API server's clock (the ``Date`` of its LIST
  answer; the server stamped ``creationTimestamp``, the reaper's own clock may be off);
* the pod's sandbox id (which the gridmanager builds from the schedd's name and the job's
  ``GlobalJobId``) names a job of the schedd that was asked; a pod of another schedd means that
  another CE labels its pods with this CE's name, and the whole pass is refused;
* the schedd's answer holds at least one grid job, or none of the CE's pods is pending or running:
  an empty queue while pilots run is far likelier a wrong answer than every job gone at once.

Cost of one pass: one LIST per (cluster, namespace) of the configured queues, plus one DELETE per
orphan (at most ``REAP_MAX_DELETES``; the rest wait for the next pass).  Deletes carry the pod's uid
as a precondition, so a pod re-created under the same name meanwhile is not touched.
"""

from __future__ import annotations

import datetime
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

from gahp.backends.k8s.api import KubeApi, truncate
from gahp.backends.k8s.census import ce_pods
from gahp.backends.k8s.identity import job_id
from gahp.backends.k8s.pod import ANN_SANDBOX_ID
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.backends.k8s.state import parse_time
from gahp.backends.k8s.view import PodView
from gahp.errors import Conflict, GahpError, NotFound
from gahp.schedd import GridJobs

log = logging.getLogger(__name__)

JsonObj = Dict[str, Any]

#: Most orphans deleted in one pass.
REAP_MAX_DELETES = 500

#: Pod phases in which the pilot may be alive.
ALIVE = ("Pending", "Running", "Unknown")

#: The end of a sandbox id: ``_<cluster>.<proc>_<QDate>`` (from ``GlobalJobId``).
_SANDBOX_END = re.compile(r"_([0-9]+)\.([0-9]+)_([0-9]+)$")


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


@dataclass(frozen=True)
class Plan:
    """What a pass may delete, or why it deletes nothing."""

    orphans: List[JsonObj]
    refused: Optional[str] = None
    """Set when the pass must delete nothing; says why (the orphans are what it would have deleted)."""
    skipped: List[str] = field(default_factory=list)
    """Pods kept although no job holds them, with the reason (each an error of the pass)."""


def made_by(sandbox_id: str, schedd_name: str) -> bool:
    """Whether the gridmanager of schedd ``schedd_name`` made ``sandbox_id`` (``<collector host>_<its
    GlobalJobId with @ and # as _>``: the schedd's name, then the job's id and QDate)."""
    end = _SANDBOX_END.search(sandbox_id)
    if end is None or not schedd_name:
        return False
    name = schedd_name.replace("@", "_").replace("#", "_")
    return sandbox_id.endswith(f"_{name}{end.group(0)}") and len(sandbox_id) > len(name) + len(end.group(0)) + 1


def alive(pods: Iterable[JsonObj]) -> int:
    """How many of ``pods`` may hold a live pilot (pending or running, not being deleted)."""
    return sum(1 for p in pods if PodView(p).phase in ALIVE and not (p.get("metadata") or {}).get("deletionTimestamp"))


def plan(pods: Iterable[JsonObj], jobs: GridJobs, now: Optional[datetime.datetime], grace_s: float,
         ce_name: str = "", alive_pods: Optional[int] = None) -> Plan:
    """The orphans among ``pods`` (one namespace, listed at the API server's time ``now``), by the
    rules of this module; ``alive_pods``: the CE's pods that may hold a live pilot, in every namespace
    (default: those of ``pods``)."""
    listed = list(pods)
    if alive_pods is None:
        alive_pods = alive(listed)
    if now is None:
        return Plan([], "the API server's answer had no Date: pod ages cannot be measured on its clock; "
                        "nothing deleted")
    found: List[JsonObj] = []
    skipped: List[str] = []
    foreign: List[str] = []
    for pod in listed:
        view = PodView(pod)
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        jid = job_id(view.namespace, view.name)
        if jid in jobs.job_ids:
            continue
        created = parse_time(meta.get("creationTimestamp"))
        if created is None or (now - created).total_seconds() < grace_s:
            continue
        sandbox = view.annotation(ANN_SANDBOX_ID)
        if not sandbox or _SANDBOX_END.search(sandbox) is None:
            skipped.append(f"{jid}: no job holds it, but it names no sandbox of a job; not deleted")
            continue
        if not made_by(sandbox, jobs.schedd_name):
            foreign.append(f"{jid} (sandbox {sandbox[:200]})")
            continue
        found.append(pod)
    if foreign:
        return Plan(found, f"{len(foreign)} pods labelled as this CE's ({ce_name!r}) belong to jobs of another "
                           f"schedd than {jobs.schedd_name!r}, e.g. {foreign[0]}: another CE uses the same "
                           "PODGAHP_K8S_CE_NAME in this namespace; give each CE its own name. Nothing deleted",
                    skipped)
    if jobs.jobs == 0 and alive_pods and found:
        return Plan(found, f"the schedd ({jobs.schedd_name}) answers with no grid job while {alive_pods} pods of "
                           "this CE are pending or running: not trusting an empty queue; nothing deleted", skipped)
    return Plan(found, None, skipped)


def reap_orphans(settings: KubernetesSettings, jobs: GridJobs, grace_s: float,
                 dry_run: bool = False) -> ReapResult:
    """One pass over every (cluster, namespace) of the configured queues."""
    result = ReapResult()
    with ce_pods(settings) as census:
        result.errors.extend(census.errors)
        result.by_queue = census.by_queue()
        plans = []
        alive_pods = alive(census.pods())
        for listed in census.namespaces:
            result.pods += len(listed.pods)
            decided = plan(listed.pods, jobs, listed.server_time, grace_s, settings.ce_name, alive_pods)
            result.orphans += len(decided.orphans)
            result.errors.extend(decided.skipped)
            plans.append((listed.api, decided))
        refusals = [decided.refused for _, decided in plans if decided.refused]
        if refusals:
            for why in refusals:
                log.error("reap: %s", why)
            result.errors.extend(refusals)
        else:
            for api, decided in plans:
                for pod in decided.orphans[:max(0, REAP_MAX_DELETES - result.deleted)]:
                    _delete(api, pod, dry_run, result)
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
