"""The Kubernetes backend: one Pod (plus an input Secret it owns) per routed pilot.

Owns the five verbs over the backend's modules: :mod:`~gahp.backends.k8s.settings` (knobs, queues),
:mod:`~gahp.backends.k8s.api` (the client calls, through the kit's HTTP door),
:mod:`~gahp.backends.k8s.submit` (one pod per sandbox, whatever answers get lost),
:mod:`~gahp.backends.k8s.cache` (the per-namespace LIST + WATCH copy status reads),
:mod:`~gahp.backends.k8s.state` (the state table) and :mod:`~gahp.backends.k8s.output` (``Out``/``Err``);
every answer goes through the kit's pipeline (:mod:`gahp.backends.pipeline`). Job ids are
``k8s/<namespace>/<pod>``; everything else a fresh process needs is in the pod's labels and
annotations and the job's record. Finished pods are kept for a while after their outcome was
reported, then deleted by a periodic clean-up pass (:mod:`~gahp.backends.k8s.retention`), which also
removes pods superseded by a resubmission of their sandbox.
"""
from __future__ import annotations

import base64
import datetime
import logging
import os
import threading
import time
from typing import Callable, List, Optional

from gahp import holds
from gahp.backends.base import Backend
from gahp.backends.http import JsonObj, truncate
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.cache import CLOSE_WAIT_SECONDS, PodCache
from gahp.backends.k8s.clusters import Clusters
from gahp.backends.k8s.census import KubernetesCeView
from gahp.backends.k8s.identity import job_id_of, parse_job_id
from gahp.backends.k8s.output import write_outputs
from gahp.backends.k8s.ping import setup_problems
from gahp.backends.k8s.retention import clean_up, due_for_cleanup
from gahp.backends.k8s.settings import PREFIX, KubernetesSettings, not_configured, queue_names
from gahp.backends.k8s.spec import ANN_PROXY_KEY, ANN_REPORTED, INPUT_VOLUME, PROXY_KEY
from gahp.backends.k8s.state import classify, job_state
from gahp.backends.k8s.submit import Submitter, is_live
from gahp.backends.k8s.view import PodRecord, decode_pod
from gahp.backends.pipeline import Pipeline
from gahp.cancels import CancelRetries
from gahp.config import Knobs, user_name
from gahp.errors import BackendError, ConfigError, Conflict, GahpError, InvalidJob, NotFound, TransientError
from gahp.files import read_input
from gahp.jobstate import JobState, Phase
from gahp.job import PilotJob

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
        self.clusters = Clusters(settings, self.user, self._start_reaper)
        """Which cluster and namespace each queue uses, their clients and watch copies (:mod:`.clusters`)."""
        self._cancels = CancelRetries(settings.cancel_retry_max_s, settings.backoff_s, settings.backoff_max_s)
        self.pipeline = Pipeline("k8s", settings.ce_name, self.user, settings.blackhole, self.clusters.totals)
        """The GAHP-wide rules every answer goes through (:mod:`gahp.backends.pipeline`)."""
        self.records, self.guard, self.stats, self.reports = (self.pipeline.records, self.pipeline.guard,
                                                              self.pipeline.stats, self.pipeline.reports)
        self.pipeline.start()
        self.submitter = Submitter(settings, self.pipeline, self.user, self.clusters.cluster)
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
        try:
            self.records.prune()
        except OSError as e:
            log.warning("old job records cannot be pruned: %s", e)
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

    def ping(self) -> None:
        """Check what a site gets wrong before pilots fail (:func:`gahp.backends.k8s.ping.setup_problems`)."""
        try:
            targets = self.clusters.targets()
        except ConfigError as e:
            raise ConfigError(f"ping: {e}") from e
        problems = setup_problems(targets, self.settings.ce_name, self.user)
        closed = [h for h in self.guard.health() if h.closed]
        for health in closed:
            log.warning("ping: queue %s is closed as a black hole until %s: %s", health.queue,
                        time.strftime("%H:%M:%S UTC", time.gmtime(health.closed_until)), health.cause)
        if closed and {h.queue for h in closed} >= {q.name for q in self.settings.queues.values()}:
            problems.append("every queue is closed as a black hole (" + "; ".join(
                f"{h.queue}: {h.cause}" for h in closed) + ")")
        if problems:
            raise BackendError("; ".join(problems))

    # -- submit ----------------------------------------------------------------------------

    def submit(self, job: PilotJob) -> str:
        """One pod per sandbox, whatever answers get lost (:mod:`gahp.backends.k8s.submit`), once the
        queue is admitted (not closed as a black hole)."""
        self.pipeline.admit(self.settings.queue(job.queue).name)
        result = self.submitter.submit(job)
        self.pipeline.forget(result.job_id)
        return result.job_id

    # -- status ----------------------------------------------------------------------------

    def status(self, job_id: str) -> JobState:
        """The pod (watch copy, else one GET) through the state table, then the GAHP-wide rules
        (:meth:`gahp.backends.pipeline.Pipeline.report`: outputs, never back, final answers, the
        black-hole verdict); a pod whose final outcome was reported is marked so."""
        with self.pipeline.lock(job_id):
            final = self.reports.final(job_id)
            if final is not None:
                return final
            pod, api, _ = self.clusters.find(job_id)
            if pod is None or api is None:
                log.info("[%s] pod not found: reporting it removed", job_id)
                return self.pipeline.report(job_id, JobState(Phase.REMOVED, batch_id=job_id.rsplit("/", 1)[-1]),
                                            queue="")
            queue = self.clusters.queue_of(pod)
            classified = classify(pod, now=_now(), unschedulable_timeout_s=queue.unschedulable_timeout_s,
                                  disruption_action=queue.disruption_action)
            state = job_state(pod, classified, job_id)
            answer = self.pipeline.report(
                job_id, state, queue=queue.name, cause=f"{classified.key}: {classified.message}".rstrip(": "),
                outputs=lambda: write_outputs(api, pod, state, job_id, self.settings.output_max_bytes,
                                              self.records.get(job_id)), outputs_of="pod",
                # A pod whose phase cannot be read but that has started is past idle.
                started=classified.key == "Unknown" and bool(pod.start_time),
                source=pod if classified.key in ("Pending", "Running") else None)
            if (answer.phase is Phase.COMPLETED or (answer.phase is Phase.HELD and pod.finished
                                                    and answer.hold_subcode != holds.OUTPUT.subcode)):
                self._mark_reported(api, pod, job_id)
            return answer

    def status_now(self, job_id: str) -> Optional[JobState]:
        """From the watch copy, without I/O: a final answer given before, or a pod that is pending or
        running (a pod that ended needs its outputs written: that is :meth:`status`'s, on a worker).
        A pod unchanged since the last poll gets the answer derived from it then (:meth:`Reports.again`)."""
        parts = job_id.split("/")
        if len(parts) != 3 or parts[0] != "k8s":
            return self.reports.final(job_id)
        caches = self.clusters.watched(parts[1])
        cache = caches[0] if len(caches) == 1 and caches[0].synced else None
        pod = cache.get(parts[2]) if cache is not None else None
        known = self.reports.again(job_id, pod)
        if known is not None or pod is None:
            return known
        queue = self.clusters.queue_of(pod)
        classified = classify(pod, now=_now(), unschedulable_timeout_s=queue.unschedulable_timeout_s,
                              disruption_action=queue.disruption_action)
        if classified.key not in ("Pending", "Pending/Unschedulable", "Running"):
            return None
        lock = self.reports.lock(job_id)
        if not lock.acquire(blocking=False):  # a worker is busy with this job: never wait here
            return None
        try:
            # The same pod gives the same answer, except an unschedulable one (it times out).
            return self.pipeline.report(job_id, job_state(pod, classified, job_id), queue=queue.name,
                                        source=pod if classified.key in ("Pending", "Running") else None)
        finally:
            lock.release()

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

    def cancel(self, job_id: str) -> None:
        """Delete the pod (idempotent). When the API server does not take the delete, the cancel is an
        error result, so that the gridmanager keeps a held job's pod id and its view matches the
        cluster; the delete is retried in the background meanwhile (the gridmanager forgets a removed
        job whatever the answer), and ``podgahp reap`` deletes the pod once its job is gone should this
        GAHP exit first."""
        parse_job_id(job_id)
        try:
            self._cancel_once(job_id)
        except (TransientError, BackendError) as e:
            log.warning("[%s] cancel failed (%s); retrying in the background", job_id, truncate(str(e)))
            self._cancels.add(job_id, lambda: self._cancel_once(job_id))
            raise TransientError(f"the pod could not be deleted now ({truncate(str(e), 300)}); the delete is "
                                 f"retried in the background, and podgahp reap deletes the pod once its job is "
                                 f"gone") from e
        finally:
            self.reports.forget(job_id)
        self.records.drop(job_id)

    def _cancel_once(self, job_id: str) -> None:
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
        namespace, name = parse_job_id(job_id)
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
        key = pod.annotation(ANN_PROXY_KEY)
        if not key:
            secrets = [v.get("secret") for v in pod.volumes if v.get("name") == INPUT_VOLUME]
            staged = [i.get("key") for secret in secrets if isinstance(secret, dict)
                      for i in secret.get("items") or [] if isinstance(i, dict)]
            if PROXY_KEY not in staged:
                log.warning("[%s] the pilot was submitted without a proxy; nothing to refresh", job_id)
                return
            key = PROXY_KEY
        patch = {"data": {key: base64.b64encode(data).decode()}}
        try:
            api.call(f"refresh proxy in secret {namespace}/{name}", "patch_namespaced_secret", name, namespace,
                     patch, job_id=job_id)
        except NotFound:
            log.info("[%s] input secret is gone; proxy not refreshed", job_id)
            return
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
                                                  self.settings.unreported_retention_s), self.stats)
        for name in deleted:
            self.records.drop(job_id_of(cache.namespace, name))
        return deleted

    def close(self) -> None:
        """Stop every thread of this backend and wait for them (bounded: :data:`.cache.CLOSE_WAIT_SECONDS`
        each), then close its connections: after it, this backend makes no request."""
        with self._lock:
            self._stop.set()
            threads = [t for t in (self._warming, self._reaper) if t is not None]
        self.clusters.stop()  # first: a request waiting to be tried again gives up at once
        self._cancels.close()
        for thread in threads:
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(CLOSE_WAIT_SECONDS)
        self.clusters.close()  # the warm-up may have made a copy before it saw the stop
        self.pipeline.close()
