"""A Kubernetes submit: one pod (and the input Secret it owns) per sandbox, whatever answers get lost.

A pod's name is fixed in advance by its sandbox's key and a generation number
(:mod:`gahp.backends.k8s.identity`), so a create repeated after a lost answer collides (409) instead of
making a second pod, and two GAHPs submitting one sandbox meet at the same name. "Does this sandbox
have pods already?" is answered by the watch copy (:mod:`gahp.backends.k8s.cache`), not a LIST; a pod
the copy has not seen yet makes the create answer 409, and the pod is then read and judged like any
other. What a submit does with the newest pod of its sandbox is one table with a tested row each
(:data:`RESUBMIT_RULES`). The job is recorded (:meth:`gahp.rules.records.JobRecords.note`) before its pod is
created; the pod's input Secret is made right after it (:mod:`gahp.backends.k8s.secret`). The agent
admits the submit first (a queue closed as a black hole refuses at once), and counts what the API
server refused.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from gahp.backends.http import JsonObj
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.cache import PodCache
from gahp.backends.k8s.identity import job_id_of, pod_name, refusal, sandbox_key
from gahp.backends.k8s.secret import ensure_secret
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings, label_value
from gahp.backends.k8s.spec import (ANN_REPORTED, LABEL_QUEUE, OVERRIDES, StagedFile, build_pod, generation_of,
                                    load_template, stage_inputs)
from gahp.backends.k8s.view import Pod, PodRecord, decode_pod, record_of
from gahp.backends.k8s.wholenode import WholeNodeSizer
from gahp.core.errors import BackendError, Conflict, TransientError
from gahp.core.job import PilotJob
from gahp.rules.records import JobRecord, JobRecords

log = logging.getLogger(__name__)


#: Attempts at creating a pod when generation numbers collide with a concurrent submit.
CREATE_ATTEMPTS = 3

#: What a submit does when its sandbox already has pods, by the newest one (one row each, tested):
#: a re-submit after a GAHP crash, a timed-out submit or a lost API answer must find the pilot it
#: already started, running or finished-but-unreported, so that a pilot never runs twice; only a
#: pod whose outcome was reported (then held and released) or that is being deleted (cancelled)
#: makes way for a new generation.
RESUBMIT_RULES: Tuple[Tuple[str, str], ...] = (
    ("live", "reuse"),
    ("finished, not reported", "reuse"),
    ("finished and reported", "new generation"),
    ("being deleted", "new generation"),
)


def is_live(pod: Pod) -> bool:
    """Not finished and not being deleted: a pod a repeated submit must not duplicate."""
    view = record_of(pod)
    return not view.deleting and view.phase in ("Pending", "Running", "Unknown")


def resubmit_case(pod: Pod) -> str:
    """The row of :data:`RESUBMIT_RULES` that ``pod`` (the newest of its sandbox) falls in."""
    view = record_of(pod)
    if view.deleting:
        return "being deleted"
    if view.finished:
        return "finished and reported" if view.annotation(ANN_REPORTED) else "finished, not reported"
    return "live"


@dataclass(frozen=True)
class Submitted:
    """The pilot's pod; ``made`` is the pod when this submit created it (None when a pod of the sandbox
    was already there)."""

    job_id: str
    record: JobRecord
    """What this GAHP recorded of the job (where its outputs go)."""
    made: Optional[PodRecord] = None


#: The cluster and watch copy of a queue: (its API, the copy of its namespace).
Cluster = Callable[[QueueSettings], Tuple[KubeApi, PodCache]]


class Submitter:
    """Submits pilots as pods of their queue's cluster and namespace, recording what it makes."""

    def __init__(self, settings: KubernetesSettings, records: JobRecords, user: str, cluster: Cluster) -> None:
        self.settings = settings
        self.records = records
        self.user = user
        self.cluster = cluster
        self.whole_node = WholeNodeSizer(self._list_nodes)

    def submit(self, job: PilotJob) -> Submitted:
        """One pod for the pilot's sandbox, whatever answers get lost (see the module docstring)."""
        queue = self.settings.queue(job.queue)
        api, cache = self.cluster(queue)
        namespace = cache.namespace
        job, template = self._shaped(job, queue)
        staged = stage_inputs(job, queue, self.settings.secret_max_bytes)
        key = sandbox_key(self.settings.ce_name, self.user, job.sandbox_id)
        cache.wait_synced(self.settings.sync_timeout_s)

        for _ in range(CREATE_ATTEMPTS):
            existing = cache.labelled(key)
            newest = max(existing, key=generation_of, default=None)
            case = resubmit_case(newest) if newest is not None else "none"
            if newest is not None and dict(RESUBMIT_RULES)[case] == "reuse":
                return self._reused(job, api, namespace, newest, case, staged)
            generation = max([generation_of(p) for p in existing] + [0]) + 1
            if queue.max_pods:
                self._check_cap(cache, queue)
            name = pod_name(key, generation)
            jid = job_id_of(namespace, name)
            body = build_pod(job, queue, template, name=name, namespace=namespace,
                             ce_name=self.settings.ce_name, generation=generation, user=self.user,
                             staged=staged)
            record = self._record(job, jid, name)
            try:
                created = api.call(f"create pod {namespace}/{name}", "create_namespaced_pod", namespace, body,
                                   job_id=jid, decode=decode_pod)
            except Conflict as e:
                if e.reason != "AlreadyExists":
                    raise
                log.info("[%s] pod exists already (made before the watch copy saw it); checking it", jid)
                cache.read(name, jid, self.refusal)
                continue
            # The submit's own line says which pod a sandbox got; a later generation is worth its own.
            log.log(logging.INFO if generation > 1 else logging.DEBUG, "[%s] created pod for sandbox %s "
                    "(queue %s, generation %d)", jid, job.sandbox_id, queue.name, generation)
            made = cache.put(created)
            ensure_secret(api, created, staged, jid, fresh=True)
            return Submitted(jid, record, made)
        raise TransientError(f"sandbox {job.sandbox_id}: pods kept appearing under the names podgahp chose; "
                             "another process is submitting the same sandbox")

    def _shaped(self, job: PilotJob, queue: QueueSettings) -> Tuple[PilotJob, JsonObj]:
        """The pilot as its pod will be made (a whole-node pilot sized to its node) and the queue's
        template; route settings no route may override are named in the log and ignored."""
        for setting in job.settings:
            if setting.startswith("k8s_") and setting not in OVERRIDES:
                log.warning("sandbox %s: route setting %s is not one a route may override; ignored "
                            "(allowed: %s)", job.sandbox_id, setting, ", ".join(sorted(OVERRIDES)))
        template = load_template(queue.pod_template)
        if job.whole_node:
            job = self.whole_node.sized(job, queue, template)
            log.info("sandbox %s: whole-node pilot given %d cores and %d MiB (queue %s)", job.sandbox_id, job.cpus,
                     job.memory_mb or 0, queue.name)
        return job, template

    def _reused(self, job: PilotJob, api: KubeApi, namespace: str, pod: PodRecord, case: str,
                staged: List[StagedFile]) -> Submitted:
        """The sandbox's pod already there answers the submit (its Secret made again if a live pod lacks it)."""
        jid = job_id_of(namespace, pod.name)
        log.info("[%s] sandbox %s already has a pod (%s); returning it, not creating another", jid,
                 job.sandbox_id, case)
        record = self._record(job, jid, pod.name)
        if case == "live":
            ensure_secret(api, pod, staged, jid)
        return Submitted(jid, record)

    def refusal(self, pod: Pod) -> Optional[str]:
        """Why this GAHP must not act on ``pod`` (None: it is this CE's pod of this user)."""
        return refusal(pod, self.settings.ce_name, self.user)

    def _record(self, job: PilotJob, jid: str, name: str) -> JobRecord:
        """Record where the pilot's outputs go (:mod:`gahp.rules.records`) before its pod may run: they are
        written only there, whatever the pod's annotations say."""
        record = JobRecord(key=jid, sandbox_id=job.sandbox_id, iwd=job.iwd, stdout=job.stdout, stderr=job.stderr,
                           made_at=time.time(), name=name)
        self.records.note(record, "the pod")
        return record

    def _check_cap(self, cache: PodCache, queue: QueueSettings) -> None:
        label = label_value(queue.name.lower())
        live = sum(1 for p in cache.pods() if is_live(p) and p.label(LABEL_QUEUE) == label)
        if live >= queue.max_pods:
            raise BackendError(f"queue {queue.name} has {live} live pods, its cap is {queue.max_pods} "
                               f"(PODGAHP_K8S_MAX_PODS); limit the route's jobs (MaxJobs) below the cap")

    def _list_nodes(self, queue: QueueSettings) -> List[JsonObj]:
        """The nodes of the queue's cluster (to size whole-node pilots)."""
        api, _ = self.cluster(queue)
        answer = api.call("list nodes", "list_node")
        items = answer.get("items") if isinstance(answer, dict) else None
        return [n for n in items if isinstance(n, dict)] if isinstance(items, list) else []
