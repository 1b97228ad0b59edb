"""The Kubernetes backend: one Pod (plus an input Secret it owns) per routed pilot.

Owns the adapter's verbs over the backend's modules: :mod:`~gahp.backends.k8s.clusters` (which
cluster and namespace a queue uses), :mod:`~gahp.backends.k8s.settings` (knobs, queues),
:mod:`~gahp.backends.k8s.api` (the client calls, through the kit's HTTP door),
:mod:`~gahp.backends.k8s.submit` (one pod per sandbox, whatever answers get lost),
:mod:`~gahp.backends.k8s.cache` (the per-namespace LIST + WATCH copy status reads),
:mod:`~gahp.backends.k8s.state` (the state table) and :mod:`~gahp.backends.k8s.output` (``Out``/``Err``);
the agent (:class:`gahp.agent.Agent`) keeps every rule around them. Job ids are
``k8s/<namespace>/<pod>``; everything else a fresh process needs is in the pod's labels and
annotations and the job's record. Finished pods are kept for a while after their outcome was
reported, then deleted by a periodic clean-up pass (:mod:`~gahp.backends.k8s.retention`), which also
removes pods superseded by a resubmission of their sandbox.
"""
from __future__ import annotations

import datetime
import logging
import os
import threading
from typing import Callable, List, Optional, Tuple

from gahp.rules import holds
from gahp.backends.base import Backend, Created, Place, Seen
from gahp.backends.http import JsonObj, truncate
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.cache import CLOSE_WAIT_SECONDS, PodCache
from gahp.backends.k8s.clusters import Clusters
from gahp.backends.k8s.census import KubernetesCeView
from gahp.backends.k8s.identity import job_id_of, parse_job_id
from gahp.backends.k8s.output import write_outputs
from gahp.backends.k8s.ping import setup_problems
from gahp.backends.k8s.retention import clean_up, due_for_cleanup
from gahp.backends.k8s.secret import replace_proxy
from gahp.backends.k8s.settings import PREFIX, KubernetesSettings, not_configured, queue_names
from gahp.backends.k8s.spec import ANN_REPORTED
from gahp.backends.k8s.state import classify, job_state
from gahp.backends.k8s.submit import Submitter, is_live
from gahp.backends.k8s.view import PodRecord, decode_pod
from gahp.core.config import Knobs, user_name
from gahp.core.errors import ConfigError, Conflict, GahpError, InvalidJob, NotFound
from gahp.core.files import read_input
from gahp.core.jobstate import JobState, Phase
from gahp.core.job import PilotJob
from gahp.rules.records import JobRecords

log = logging.getLogger(__name__)



def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _rfc3339(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


QUEUES_KNOB = PREFIX + "QUEUES"


class KubernetesBackend(Backend):
    """Routed pilots as pods; see ``docs/kubernetes.md`` for the admin's view."""

    name = "k8s"
    whole_node = ("podgahp gives the pod a whole node of its queue: PODGAHP_K8S_<QUEUE>_WHOLE_NODE_CPUS and "
                  "_MEMORY_MB where set, else the largest node the queue's pods may run on (which needs list on "
                  "nodes), within the queue's MAX_CPUS and MAX_MEMORY_MB; the pilot is held with the reason where "
                  "the queue cannot (PODGAHP_K8S_<QUEUE>_WHOLE_NODE = hold, or no size to be found)")
    noun = "pod"
    service = "the API server"
    removed = "deleted"
    after_failed_removal = "podgahp reap deletes the pod once its job is gone"

    @classmethod
    def queue_problem(cls, queue: Optional[str], knob: Callable[[str], Optional[str]]) -> Optional[str]:
        raw = knob(QUEUES_KNOB)
        if raw is None or queue is None:  # the configuration does not say; the default queue serves it
            return None
        names = queue_names(Knobs({QUEUES_KNOB: raw}))
        return None if queue.lower() in {n.lower() for n in names} else not_configured(queue, names)

    def __init__(self, settings: KubernetesSettings, user: Optional[str] = None) -> None:
        self.settings = settings
        self.user = user or user_name()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reaper: Optional[threading.Thread] = None
        self._warming: Optional[threading.Thread] = None
        self.place = Place(settings.ce_name, self.user, settings.blackhole, settings.cancel_retry_max_s,
                           settings.backoff_s, settings.backoff_max_s)
        self.clusters = Clusters(settings, self.user, self._start_reaper)
        """Which cluster and namespace each queue uses, their clients and watch copies (:mod:`.clusters`)."""

    def bind(self, records: JobRecords, tidied: Callable[[str], None]) -> None:
        super().bind(records, tidied)
        self.submitter = Submitter(self.settings, records, self.user, self.clusters.cluster)
        """Submits: :mod:`gahp.backends.k8s.submit`."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> KubernetesBackend:
        return cls(KubernetesSettings.from_knobs(knobs))

    @classmethod
    def ce_view(cls, knobs: Knobs) -> Optional[KubernetesCeView]:
        """Every pod of this CE in every cluster and namespace its queues name (:mod:`.census`); None
        where the CE names no cluster (no queue has a kubeconfig, and it does not run in a cluster)."""
        settings = KubernetesSettings.from_knobs(knobs)
        if not any(q.kubeconfig for q in settings.queues.values()) and not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return None
        return KubernetesCeView(settings)

    def start(self) -> None:
        """Connect to each queue's cluster and start its namespace's watch copy in the background, so
        that the first pilots do not wait for the client's first use (its modules load lazily, about
        half a second) or the first LIST."""
        with self._lock:
            if self._stop.is_set() or self._warming is not None:
                return
            self._warming = threading.Thread(target=self._warm_up, name="warm-up", daemon=True)
        self._warming.start()

    def _warm_up(self) -> None:
        for queue in self.settings.queues.values():
            try:
                self.clusters.cluster(queue)
            except Exception as e:  # noqa: BLE001 - the first request reports it properly
                log.info("queue %s not ready at start (the first request will say why): %s", queue.name,
                         truncate(str(e), 200))

    def _start_reaper(self) -> None:
        """The periodic clean-up starts with the first watch copy (it goes over the copies)."""
        if self.settings.reap_interval_s <= 0:
            return
        with self._lock:
            if self._reaper is not None or self._stop.is_set():
                return
            self._reaper = threading.Thread(target=self._reap_loop, name="reaper", daemon=True)
        self._reaper.start()

    # -- ping ------------------------------------------------------------------------------

    def queues(self) -> Tuple[str, ...]:
        return tuple(q.name for q in self.settings.queues.values())

    def ping(self) -> List[str]:
        """What a site gets wrong before pilots fail (:func:`gahp.backends.k8s.ping.setup_problems`)."""
        try:
            targets = self.clusters.targets()
        except ConfigError as e:
            raise ConfigError(f"ping: {e}") from e
        return setup_problems(targets, self.settings.ce_name, self.user)

    # -- submit ----------------------------------------------------------------------------

    def totals(self) -> Tuple[int, int, float]:
        return self.clusters.totals()

    def queue_of(self, job: PilotJob) -> str:
        return self.settings.queue(job.queue).name

    def create(self, job: PilotJob) -> Created:
        """One pod per sandbox, whatever answers get lost (:mod:`gahp.backends.k8s.submit`)."""
        result = self.submitter.submit(job)
        return Created(result.job_id, made=result.made is not None)

    # -- status ----------------------------------------------------------------------------

    def observe(self, job_id: str) -> Seen:
        """The pod (watch copy, else one GET) through the state table; a pod whose final outcome is
        reported is marked so."""
        pod, api, _ = self.clusters.find(job_id)
        if pod is None or api is None:
            log.info("[%s] pod not found: reporting it removed", job_id)
            return Seen(JobState(Phase.REMOVED, batch_id=job_id.rsplit("/", 1)[-1]))
        queue = self.clusters.queue_of(pod)
        classified = classify(pod, now=_now(), unschedulable_timeout_s=queue.unschedulable_timeout_s,
                              disruption_action=queue.disruption_action)
        state = job_state(pod, classified, job_id)

        def answered(answer: JobState) -> None:
            if (answer.phase is Phase.COMPLETED or (answer.phase is Phase.HELD and pod.finished
                                                    and answer.hold_subcode != holds.OUTPUT.subcode)):
                self._mark_reported(api, pod, job_id)

        return Seen(state, queue=queue.name, cause=f"{classified.key}: {classified.message}".rstrip(": "),
                    outputs=lambda: write_outputs(api, pod, state, job_id, self.settings.output_max_bytes,
                                                  self.records.get(job_id)),
                    # A pod whose phase cannot be read but that has started is past idle.
                    started=classified.key == "Unknown" and bool(pod.start_time),
                    source=pod if classified.key in ("Pending", "Running") else None, answered=answered)

    def cached(self, job_id: str) -> Optional[PodRecord]:
        """The pod from the one synced watch copy of its namespace, without I/O."""
        parts = job_id.split("/")
        if len(parts) != 3 or parts[0] != "k8s":
            return None
        caches = self.clusters.watched(parts[1])
        cache = caches[0] if len(caches) == 1 and caches[0].synced else None
        return cache.get(parts[2]) if cache is not None else None

    def observe_cached(self, job_id: str, source: Optional[object]) -> Optional[Seen]:
        """A pending or running pod of the watch copy (a pod that ended needs its outputs written: that is
        :meth:`observe`'s, on a worker). The same pod gives the same answer, except an unschedulable one
        (it times out)."""
        if not isinstance(source, PodRecord):
            return None
        queue = self.clusters.queue_of(source)
        classified = classify(source, now=_now(), unschedulable_timeout_s=queue.unschedulable_timeout_s,
                              disruption_action=queue.disruption_action)
        if classified.key not in ("Pending", "Pending/Unschedulable", "Running"):
            return None
        return Seen(job_state(source, classified, job_id), queue=queue.name,
                    source=source if classified.key in ("Pending", "Running") else None)

    def _mark_reported(self, api: KubeApi, pod: PodRecord, jid: str) -> None:
        """Record on the pod that its final outcome reached HTCondor (a re-submit then makes a new pod)."""
        if not pod.annotation(ANN_REPORTED):
            patch = {"metadata": {"annotations": {ANN_REPORTED: _rfc3339(_now())}}}
            try:
                patched = api.call(f"annotate pod {pod.namespace}/{pod.name}", "patch_namespaced_pod",
                                   pod.name, pod.namespace, patch, job_id=jid, decode=decode_pod)
                self.clusters.cache(api, pod.namespace).put(patched)
            except GahpError as e:
                log.warning("[%s] pod cannot be marked reported (it will be cleaned up later): %s", jid, e)

    # -- cancel and refresh ----------------------------------------------------------------

    def check(self, job_id: str) -> None:
        parse_job_id(job_id)

    def remove(self, job_id: str) -> None:
        """Delete the pod (idempotent); the agent tries again in the background when the API server does
        not take the delete, and ``podgahp reap`` deletes the pod once its job is gone should this GAHP
        exit first."""
        pod, api, _ = self.clusters.find(job_id)
        if pod is None or api is None:
            log.info("[%s] pod is already gone", job_id)
            return
        self._delete_own(api, pod, job_id, self.clusters.queue_of(pod).delete_grace_s)

    def _delete_own(self, api: KubeApi, pod: PodRecord, jid: str, grace: Optional[int]) -> None:
        """Delete a pod of this user, and only that pod: the uid precondition makes the API server
        refuse if the name now holds another pod."""
        namespace, name = pod.namespace, pod.name
        why = self.clusters.refusal(pod)
        if why is not None:
            raise InvalidJob(f"{why}; refusing to delete it")
        extra: JsonObj = {} if grace is None else {"grace_period_seconds": grace}
        try:
            deleted = api.call(f"delete pod {namespace}/{name}", "delete_namespaced_pod", name, namespace,
                               job_id=jid, body={"preconditions": {"uid": pod.uid}},
                               propagation_policy="Background", decode=decode_pod, **extra)
            log.info("[%s] deleted pod (grace %s s)", jid, grace if grace is not None else "default")
            gone = PodRecord.of(deleted)
            if gone.name == name and gone.uid == pod.uid:
                # Terminating (a graceful delete answers with the pod): a submit right after must see it.
                self.clusters.cache(api, namespace).put(deleted)
        except NotFound:
            log.info("[%s] pod is already gone", jid)
        except Conflict as e:
            log.info("[%s] pod was replaced meanwhile; not deleting the new one (%s)", jid, truncate(str(e)))

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """The proxy in the live pod's input Secret replaced (:func:`.secret.replace_proxy`)."""
        parse_job_id(job_id)
        data = read_input(proxy_path, "proxy", self.settings.secret_max_bytes, "PODGAHP_K8S_SECRET_MAX_BYTES")
        pod, api, _ = self.clusters.find(job_id)
        if pod is None or api is None:
            log.info("[%s] no pod to refresh the proxy of", job_id)
            return
        why = self.clusters.refusal(pod)
        if why is not None:
            raise InvalidJob(f"{why}; its proxy is not refreshed")
        if not is_live(pod):
            log.info("[%s] pod has finished; proxy not refreshed", job_id)
            return
        if replace_proxy(api, pod, data, job_id):
            log.info("[%s] proxy refreshed from %s", job_id, proxy_path)

    # -- clean-up --------------------------------------------------------------------------

    def _reap_loop(self) -> None:
        first = True
        while not self._stop.wait(5.0 if first else self.settings.reap_interval_s):
            first = False
            for cache in self.clusters.caches():
                if not cache.synced:
                    continue
                try:
                    self.reap(cache)
                except Exception:  # noqa: BLE001 - a clean-up failure must not stop later passes
                    log.exception("clean-up of namespace %s failed", cache.namespace)

    def reap(self, cache: PodCache) -> List[str]:
        """One clean-up pass over ``cache``'s namespace (:func:`gahp.backends.k8s.retention.clean_up`)."""
        deleted = clean_up(cache, due_for_cleanup(cache.pods(), _now(), self.settings.finished_retention_s,
                                                  self.settings.unreported_retention_s))
        for name in deleted:
            self.tidied(job_id_of(cache.namespace, name))
        return deleted

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
        self.clusters.stop()  # a request waiting to be tried again gives up at once

    def close(self) -> None:
        """Stop every thread of this backend and wait for them (bounded: :data:`.cache.CLOSE_WAIT_SECONDS`
        each), then close its connections: after it, this backend makes no request."""
        self.stop()
        with self._lock:
            threads = [t for t in (self._warming, self._reaper) if t is not None]
        for thread in threads:
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(CLOSE_WAIT_SECONDS)
        self.clusters.close()  # the warm-up may have made a copy before it saw the stop
