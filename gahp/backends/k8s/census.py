"""Kubernetes as the CE-wide tools see it (:class:`~gahp.backends.base.CeView`): every pod of this CE,
all users, one LIST per (cluster, namespace) of the configured queues, so ``podgahp reap``, ``q`` and
``health`` cover every cluster a CE's queues name. The cost is constant in the number of pilots (one
request per namespace and cluster), the memory is the pods of this CE.

A pod is this CE's by its label (``podgahp.htcondor.org/ce``); its age is taken on the API server's
clock (the ``Date`` of its LIST answer: the server stamped its creation); its reason is the state
table's (:func:`~gahp.backends.k8s.state.classify`). A delete carries the pod's uid as a
precondition, so a pod made meanwhile under the same name is not touched.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

from gahp.backends.base import HEALTH_STATES, Census, CeView, RemoteJob
from gahp.backends.http import JsonObj, truncate
from gahp.backends.k8s.api import KubeApi
from gahp.backends.k8s.identity import job_id_of
from gahp.backends.k8s.podtrace import HOPS, PodLook, pod_hops, pod_of
from gahp.backends.k8s.spec import ANN_SANDBOX_ID, CONTAINER, LABEL_QUEUE, selector
from gahp.backends.k8s.settings import KubernetesSettings, QueueSettings, label_value
from gahp.backends.k8s.state import classify, parse_time
from gahp.backends.k8s.view import PodRecord, container_state
from gahp.core.errors import Conflict, GahpError, NotFound
from gahp.rules.hops import WAITING, Hop

log = logging.getLogger(__name__)


#: Pod phases in which the pilot may be alive.
ALIVE = ("Pending", "Running", "Unknown")


class KubernetesCeView(CeView):
    """The pods of this CE in every (cluster, namespace) its queues name."""

    backend = "k8s"
    hops = HOPS
    noun = "pod"

    def __init__(self, settings: KubernetesSettings, agent: str = "reap") -> None:
        self.settings = settings
        self.ce_name = settings.ce_name
        self._agent = agent
        self._apis: Dict[Tuple[Any, Any], KubeApi] = {}
        self._listed: Dict[str, List[Tuple[KubeApi, str]]] = {}
        """Job id -> (cluster, uid) of each pod of that id in the last census."""
        self._queues = {label_value(q.name.lower()): q for q in reversed(list(settings.queues.values()))}
        self._looks: Dict[Optional[str], PodLook] = {}

    def _api(self, queue: QueueSettings) -> KubeApi:
        api = self._apis.get(queue.cluster_key)
        if api is None:
            api = self._apis[queue.cluster_key] = KubeApi(self.settings, queue, self._agent)
        return api

    def census(self, held: FrozenSet[str]) -> Census:
        census = Census(self.backend, queues=tuple(label_value(n.lower()) for n in self.settings.queues))
        clusters = {q.cluster_key for q in self.settings.queues.values()}
        done = set()
        self._listed = {}
        for queue in self.settings.queues.values():
            api = self._api(queue)
            try:
                namespace = api.namespace(queue)
            except GahpError as e:
                census.errors.append(f"queue {queue.name}: {e}")
                continue
            if (queue.cluster_key, namespace) in done:
                continue
            done.add((queue.cluster_key, namespace))
            try:
                listed = api.call(f"list pods in {namespace}", "list_namespaced_pod", namespace,
                                  label_selector=selector(self.settings.ce_name)).get("items") or []
            except GahpError as e:
                census.errors.append(f"namespace {namespace}{_cluster(queue, clusters)}: {truncate(str(e))}")
                continue
            for pod in listed:
                if isinstance(pod, dict):
                    census.jobs.append(self._remote(pod, api.server_time, _cluster_name(queue, clusters)))
                    self._listed.setdefault(census.jobs[-1].job_id, []).append(
                        (api, str((pod.get("metadata") or {}).get("uid") or "")))
        return census

    @property
    def requests(self) -> int:
        return sum(api.requests for api in self._apis.values())

    def _remote(self, pod: JsonObj, listed_at: Optional[datetime.datetime], cluster: str) -> RemoteJob:
        """``cluster``: the cluster's name where the CE's queues use several, else empty."""
        view = PodRecord.of(pod)
        deleting = view.deleting
        queue = view.label(LABEL_QUEUE)
        return RemoteJob(
            job_id=job_id_of(view.namespace, view.name), name=view.name, queue=queue, state=view.phase,
            health=view.phase if view.phase in HEALTH_STATES else "", sandbox=view.annotation(ANN_SANDBOX_ID),
            alive=view.phase in ALIVE and not deleting, deleting=deleting,
            created=parse_time(view.created), listed_at=listed_at,
            where=view.namespace + (f" (cluster {cluster})" if cluster else ""), cluster=cluster,
            node=view.node, reason=self._reason(view, queue, listed_at))

    def _reason(self, pod: PodRecord, queue: str, now: Optional[datetime.datetime]) -> str:
        """Why the pod is where it is, in the words the GAHP would use (empty when running normally)."""
        q = self._queues.get(queue) or self.settings.queue(None)
        classified = classify(pod, now=now or datetime.datetime.now(datetime.timezone.utc),
                              unschedulable_timeout_s=q.unschedulable_timeout_s, disruption_action=q.disruption_action)
        if classified.message:
            return classified.message
        waiting = container_state(pod.container_status(CONTAINER), "waiting")
        return str(waiting.get("reason") or pod.reason or "")

    def delete(self, job: RemoteJob) -> None:
        namespace, name = job.job_id.split("/")[1:3]
        for api, uid in self._listed.get(job.job_id, []):
            try:
                api.call(f"delete pod {namespace}/{name}", "delete_namespaced_pod", name, namespace,
                         job_id=job.job_id, body={"preconditions": {"uid": uid}}, propagation_policy="Background")
            except (NotFound, Conflict):
                continue  # gone, or the name now holds another pod: not ours to delete

    def trace(self, grid_job_id: str, queue: Optional[str], user: str, ping: bool) -> Tuple[List[Hop], List[str]]:
        look = self._looks.get(queue)
        if look is None:
            look = self._looks[queue] = PodLook(self.settings, queue)
        problems = look.setup_problems(user) if ping else []
        where = pod_of(grid_job_id)
        if where is None:
            return [], problems
        try:
            pod = look.pod(*where)
            succeeded = pod is not None and str((pod.get("status") or {}).get("phase") or "") == "Succeeded"
            events = look.events(*where) if not succeeded else []
        except GahpError as e:
            return [Hop(HOPS[0], WAITING, f"the cluster cannot be asked: {e}")], problems
        now = datetime.datetime.now(datetime.timezone.utc)
        return pod_hops(pod, where, events, self.settings, look.queue, now), problems

    def close(self) -> None:
        for api in self._apis.values():
            api.close()
        for look in self._looks.values():
            look.close()


def _cluster_name(queue: QueueSettings, clusters: Set[Tuple[Any, Any]]) -> str:
    """The queue's cluster (its context, else its kubeconfig) when the CE's queues use several, else empty."""
    if len(clusters) < 2:
        return ""
    kubeconfig, context = queue.cluster_key
    return str(context or kubeconfig or "in-cluster")


def _cluster(queue: QueueSettings, clusters: Set[Tuple[Any, Any]]) -> str:
    """`` (cluster <context or kubeconfig>)`` when the CE's queues use several clusters, else empty."""
    name = _cluster_name(queue, clusters)
    return f" (cluster {name})" if name else ""
