"""Every pod of this CE, all users, one LIST per (cluster, namespace) of the configured queues: what
``podgahp reap`` and ``podgahp q`` start from. The cost is constant in the number of pilots (one
request per namespace), the memory is the pods of this CE.
"""

from __future__ import annotations

import datetime
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from gahp.backends.k8s.api import KubeApi, truncate
from gahp.backends.k8s.pod import LABEL_QUEUE, selector
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.backends.k8s.view import PodView
from gahp.errors import GahpError

JsonObj = Dict[str, Any]


@dataclass
class NamespacePods:
    api: KubeApi
    namespace: str
    pods: List[JsonObj]
    server_time: Optional[datetime.datetime] = None
    """The API server's clock when it answered the LIST (its ``Date`` header): pod ages are measured
    on it, since the server stamped their creation times."""


@dataclass
class Census:
    namespaces: List[NamespacePods] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    apis: List[KubeApi] = field(default_factory=list)

    @property
    def requests(self) -> int:
        """API requests made so far through this census's connections."""
        return sum(api.requests for api in self.apis)

    def pods(self) -> Iterator[JsonObj]:
        for listed in self.namespaces:
            yield from listed.pods

    def by_queue(self) -> Dict[str, Dict[str, int]]:
        """Pods per queue label and phase."""
        counts: Dict[str, Dict[str, int]] = {}
        for pod in self.pods():
            view = PodView(pod)
            phases = counts.setdefault(view.label(LABEL_QUEUE, "?"), {})
            phases[view.phase] = phases.get(view.phase, 0) + 1
        return counts


@contextmanager
def ce_pods(settings: KubernetesSettings, agent: str = "reap") -> Iterator[Census]:
    """List this CE's pods; the connections stay open (for deletes) until the block ends."""
    census = Census()
    apis: Dict[Tuple[Any, Any], KubeApi] = {}
    done: Set[Tuple[Any, Any, str]] = set()
    try:
        for queue in settings.queues.values():
            if queue.cluster_key not in apis:
                apis[queue.cluster_key] = KubeApi(settings, queue, agent)
                census.apis.append(apis[queue.cluster_key])
            api = apis[queue.cluster_key]
            try:
                namespace = api.namespace(queue)
            except GahpError as e:
                census.errors.append(f"queue {queue.name}: {e}")
                continue
            if (*queue.cluster_key, namespace) in done:
                continue
            done.add((*queue.cluster_key, namespace))
            try:
                pods = api.call(f"list pods in {namespace}", "list_namespaced_pod", namespace,
                                label_selector=selector(settings.ce_name)).get("items") or []
            except GahpError as e:
                census.errors.append(f"namespace {namespace}: {truncate(str(e))}")
                continue
            census.namespaces.append(NamespacePods(api, namespace, [p for p in pods if isinstance(p, dict)],
                                                   api.server_time))
        yield census
    finally:
        for api in apis.values():
            api.close()
