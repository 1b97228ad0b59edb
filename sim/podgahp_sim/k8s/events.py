"""Core/v1 Events of the simulated cluster, recorded as the scheduler and kubelet record them.

``kubectl describe`` and ``kubectl get events`` read them; so can anything that watches a queue's
health.  As on a real cluster, a repeat of the same (object, type, reason, message) bumps ``count``
and ``lastTimestamp`` of the existing Event instead of making a new one, and old Events go away: at
most ``SimConfig.events_max`` are kept (a real server expires them after an hour).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Dict, Optional, Tuple

from .config import SimConfig
from .store import JsonObj, Store, now_rfc3339

SCHEDULER = "default-scheduler"
KUBELET = "kubelet"

_Key = Tuple[str, str, str, str, str]


class EventRecorder:
    """Writes Events into the store; callers hold the store lock (the cluster loop does)."""

    def __init__(self, store: Store, config: SimConfig) -> None:
        self.store = store
        self.max_events = max(1, config.events_max)
        self._recent: "OrderedDict[_Key, Tuple[str, str]]" = OrderedDict()  # key -> (namespace, name)
        self._seq = 0

    def pod(self, pod: JsonObj, etype: str, reason: str, message: str, component: str = KUBELET,
            node: Optional[str] = None, container: Optional[str] = None, now: Optional[float] = None) -> None:
        meta = pod["metadata"]
        involved: JsonObj = {"kind": "Pod", "apiVersion": "v1", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta.get("uid", ""),
                             "resourceVersion": meta.get("resourceVersion", "")}
        if container is not None:
            involved["fieldPath"] = "spec.containers{%s}" % container
        host = node if component == KUBELET else None
        self._record(meta["namespace"], involved, etype, reason, message, component, host, now)

    def node(self, node: str, etype: str, reason: str, message: str, now: Optional[float] = None) -> None:
        involved = {"kind": "Node", "apiVersion": "v1", "name": node, "uid": node}
        self._record("default", involved, etype, reason, message, KUBELET, node, now)

    def _record(self, namespace: str, involved: JsonObj, etype: str, reason: str, message: str,
                component: str, host: Optional[str], now: Optional[float]) -> None:
        now = time.time() if now is None else now
        stamp = now_rfc3339(now)
        key: _Key = (involved.get("uid", ""), involved.get("fieldPath", ""), etype, reason, message)
        where = self._recent.get(key)
        existing = self.store.get("events", *where) if where else None
        if existing is not None:
            updated = dict(existing, count=int(existing.get("count") or 1) + 1, lastTimestamp=stamp)
            updated["metadata"] = dict(existing["metadata"])
            self.store.update("events", updated)
            self._recent.move_to_end(key)
            return
        source: Dict[str, str] = {"component": component}
        if host:
            source["host"] = host
        self._seq += 1  # several Events of one object in one pass must not share a name
        name = "%s.%x" % (involved["name"], int(now * 1e9) + self._seq)
        event: JsonObj = {
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                         "creationTimestamp": stamp},
            "involvedObject": involved, "reason": reason, "message": message, "source": source,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "type": etype,
            "eventTime": None, "reportingComponent": component, "reportingInstance": host or "",
        }
        self.store.create("events", event)
        self._recent[key] = (namespace, name)
        while len(self._recent) > self.max_events:
            _, (old_ns, old_name) = self._recent.popitem(last=False)
            self.store.delete("events", old_ns, old_name)
