"""The cluster registry of one Kubernetes backend: which cluster and namespace each queue uses, one API
client per cluster and one watch copy per (cluster, namespace), and finding a job's pod among them.

A queue names its cluster by kubeconfig and context (:attr:`~.settings.QueueSettings.cluster_key`);
queues of one cluster share its client, and queues of one namespace of it share its watch copy. A
client or copy is made on first use, and none after :meth:`Clusters.stop`. Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, List, Optional, Tuple

from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.cache import PodCache
from gahp.backends.k8s.identity import LABEL_SANDBOX, owner_selector, parse_job_id, refusal
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings, label_value
from gahp.backends.k8s.spec import ANNOTATIONS_READ, LABEL_QUEUE, LABELS_READ
from gahp.backends.k8s.view import Pod, PodRecord
from gahp.core.errors import BackendError, ConfigError, TransientError

log = logging.getLogger(__name__)

ClusterKey = Tuple[Optional[str], Optional[str]]
#: A pod found for a job id: the pod (None when there is none), the client of its cluster (None when
#: the namespace is served by several and the pod is in none), and the watch copy it came from.
Found = Tuple[Optional[PodRecord], Optional[KubeApi], Optional[PodCache]]


class Clusters:
    """Every cluster and namespace the backend's queues name, with their clients and watch copies."""

    def __init__(self, settings: KubernetesSettings, user: str, first_copy: Callable[[], None]) -> None:
        """``first_copy`` is called once, when the first watch copy is made (outside the lock)."""
        self.settings = settings
        self.user = user
        self._first_copy: Optional[Callable[[], None]] = first_copy
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._apis: Dict[ClusterKey, KubeApi] = {}
        self._caches: Dict[Tuple[ClusterKey, str], PodCache] = {}
        self._namespaces: Dict[str, Tuple[PodCache, ...]] = {}
        """Namespace -> its watch copies (one per cluster serving it); replaced whole, read without the lock."""
        self._queues_by_label: Dict[str, QueueSettings] = {}
        """A pod's queue label -> its queue (the first queue of that label, as they are listed)."""
        for queue in reversed(list(settings.queues.values())):
            self._queues_by_label[label_value(queue.name.lower())] = queue

    def api(self, queue: QueueSettings) -> KubeApi:
        """The client of the queue's cluster; TransientError once stopped."""
        with self._lock:
            if self._stop.is_set():  # stopped: no client may be made after stop() closed them all
                raise TransientError(f"queue {queue.name}: the GAHP is shutting down")
            api = self._apis.get(queue.cluster_key)
            if api is None:
                api = self._apis[queue.cluster_key] = KubeApi(self.settings, queue)
            return api

    def cache(self, api: KubeApi, namespace: str) -> PodCache:
        """The watch copy of ``namespace`` in ``api``'s cluster, started; TransientError once stopped."""
        key = ((api.kubeconfig, api.context), namespace)
        with self._lock:
            if self._stop.is_set():  # stopped: no watch may start after close() stopped them all
                raise TransientError(f"namespace {namespace}: the GAHP is shutting down")
            cache = self._caches.get(key)
            if cache is None:
                cache = self._caches[key] = PodCache(
                    api, namespace, owner_selector(self.settings.ce_name, self.user),
                    watch_timeout_s=self.settings.watch_timeout_s, backoff_s=max(self.settings.backoff_s, 0.1),
                    backoff_max_s=self.settings.backoff_max_s, index_label=LABEL_SANDBOX,
                    labels=LABELS_READ, annotations=ANNOTATIONS_READ)
                self._namespaces = dict(self._namespaces,
                                        **{namespace: self._namespaces.get(namespace, ()) + (cache,)})
            first, self._first_copy = self._first_copy, None
        cache.start()
        if first is not None:
            first()
        return cache

    def cluster(self, queue: QueueSettings) -> Tuple[KubeApi, PodCache]:
        """The queue's cluster and the watch copy of its namespace."""
        api = self.api(queue)
        return api, self.cache(api, api.namespace(queue))

    def targets(self) -> List[Tuple[QueueSettings, KubeApi, str]]:
        """(queue, api, namespace) of every queue whose cluster can be configured; ConfigError if none."""
        targets: List[Tuple[QueueSettings, KubeApi, str]] = []
        errors: List[str] = []
        for queue in self.settings.queues.values():
            api = self.api(queue)
            try:
                targets.append((queue, api, api.namespace(queue)))
            except ConfigError as e:
                errors.append(f"queue {queue.name}: {e}")
        if not targets:
            raise ConfigError("; ".join(errors))
        return targets

    def serving(self, namespace: str) -> List[KubeApi]:
        """The distinct clusters that have a queue in ``namespace``."""
        apis: List[KubeApi] = []
        for _, api, ns in self.targets():
            if ns == namespace and api not in apis:
                apis.append(api)
        if not apis:
            raise BackendError(f"namespace {namespace} is not served by any queue in PODGAHP_K8S_QUEUES; "
                               "was the configuration changed after this pilot was submitted?")
        return apis

    def queue_of(self, pod: PodRecord) -> QueueSettings:
        """The queue a pod was made for (by its label; the default queue when the label names none)."""
        return self._queues_by_label.get(pod.label(LABEL_QUEUE)) or self.settings.queue(None)

    def watched(self, namespace: str) -> Tuple[PodCache, ...]:
        """The watch copies of ``namespace`` made so far, without the lock (for answers that never wait)."""
        return self._namespaces.get(namespace, ())

    def caches(self) -> List[PodCache]:
        with self._lock:
            return list(self._caches.values())

    def apis(self) -> List[KubeApi]:
        with self._lock:
            return list(self._apis.values())

    def refusal(self, pod: Pod) -> Optional[str]:
        """Why this GAHP must not act on ``pod`` (None: it is this CE's pod of this user)."""
        return refusal(pod, self.settings.ce_name, self.user)

    def find(self, jid: str) -> Found:
        """The pod of a job id from the watch copies; on a miss, or while a copy is still being listed,
        one GET of that pod (never a relist, never a wait for the LIST: the cost of a stale or unknown
        job id is one request, whatever the number of pods).

        A pod deleted by Kubernetes after a disruption (preemption, eviction API, node drain) is
        returned as last seen, so that its outcome can still be reported. A pod of that name that is
        not this user's on this CE is refused (InvalidJob), never acted on.
        """
        namespace, name = parse_job_id(jid)
        apis = self.serving(namespace)
        caches = [(api, self.cache(api, namespace)) for api in apis]
        for api, cache in caches:
            pod = cache.get(name) if cache.synced else None
            if pod is not None:
                return pod, api, cache
        for api, cache in caches:
            pod = cache.read(name, jid, self.refusal)
            if pod is not None:
                if cache.synced:
                    log.info("[%s] pod not in the watch copy yet; read it", jid)
                return pod, api, cache
        for api, cache in caches:
            last = cache.gone(name)
            if last is not None and _disrupted(last):
                if not last.finished:
                    last = last.with_phase("Failed")
                return last, api, cache
        return None, (apis[0] if len(apis) == 1 else None), None

    def totals(self) -> Tuple[int, int, float]:
        """(requests, errors, seconds waited) of every client so far."""
        apis = self.apis()
        return sum(a.requests for a in apis), sum(a.errors for a in apis), sum(a.seconds for a in apis)

    def stop(self) -> None:
        """No client or copy is made from now on; the clients give up what they wait to try again."""
        with self._lock:
            self._stop.set()
        for api in self.apis():
            api.close()

    def close(self) -> None:
        """Close every copy and client (after :meth:`stop`, and after the threads that use them ended)."""
        self.stop()
        for cache in self.caches():
            cache.close()
        for api in self.apis():
            api.close()


def _disrupted(pod: PodRecord) -> bool:
    """Ended by Kubernetes itself: a terminal phase, or a ``DisruptionTarget`` condition."""
    return pod.finished or pod.condition_true("DisruptionTarget")
