"""Whole-node pilots: the size of a whole node of a queue, for a pilot that asks for one.

A pilot asks for a whole node with ``WantWholeNode`` (HTCondor-CE forwards it as ``WholeNodes``).
Its pod gets the cores and memory of a whole node of its queue:

* the queue's own size, when ``PODGAHP_K8S_<QUEUE>_WHOLE_NODE_CPUS`` and ``_MEMORY_MB`` are set;
* else the largest node the queue's pods may run on: schedulable, every ``nodeSelector`` label of
  the pod template matched, every ``NoSchedule``/``NoExecute`` taint tolerated by its tolerations;
  all its allocatable whole cores and 95% of its allocatable memory (as HTCondor-CE gives a
  whole-node job 95% of a slot's memory: the node's own pods need the rest). Listing nodes needs
  ``list`` on ``nodes`` (cluster-wide), which the shipped Role does not grant;
* ``PODGAHP_K8S_<QUEUE>_WHOLE_NODE = hold``: the queue runs no whole-node pilot.

Whatever cannot be sized is refused with the reason and the fix (the gridmanager holds the pilot).
Pure functions over node JSON, and a small cache of one node list per cluster; the backend calls.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gahp.backends.http import JsonObj
from gahp.backends.k8s.settings import QueueSettings
from gahp.core.errors import AuthError, InvalidJob
from gahp.core.job import PilotJob


#: Share of a node's allocatable memory a whole-node pilot asks for, in percent.
MEMORY_PERCENT = 95
#: How long one list of nodes is used, seconds.
NODES_CACHE_SECONDS = 60.0
#: Most nodes read (a larger cluster is sized from the first ones listed).
MAX_NODES = 5000

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")
_SUFFIXES = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18,
             "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60, "m": 1}


@dataclass(frozen=True)
class NodeSize:
    """What a whole node of a queue holds for a pilot, and where the size comes from."""

    cpus: int
    memory_mb: int
    source: str


def quantity(value: Any) -> Optional[float]:
    """A Kubernetes quantity (``4``, ``3500m``, ``16Gi``) as a number (cores, bytes), None if not one."""
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    number = float(match.group(1))
    return number / 1000 if match.group(2) == "m" else number * _SUFFIXES[match.group(2)]


def _tolerated(taint: JsonObj, tolerations: Sequence[JsonObj]) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for toleration in tolerations:
        if not isinstance(toleration, dict):
            continue
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        operator = toleration.get("operator") or "Equal"
        key = toleration.get("key")
        if operator == "Exists" and key in (None, "", taint.get("key")):
            return True
        if operator == "Equal" and key == taint.get("key") and (toleration.get("value") or "") == (
                taint.get("value") or ""):
            return True
    return False


def allows(node: JsonObj, template: JsonObj) -> bool:
    """Whether a pod of ``template`` may run on ``node`` (schedulable, nodeSelector, taints)."""
    spec = template.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    tolerations = spec.get("tolerations") or []
    return all(_tolerated(t, tolerations) for t in ((node.get("spec") or {}).get("taints") or []) if isinstance(t, dict))


def node_size(node: JsonObj) -> Optional[NodeSize]:
    """A whole node's share for a pilot: its allocatable whole cores and 95% of its memory."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    cpu, memory = quantity(allocatable.get("cpu", "")), quantity(allocatable.get("memory", ""))
    if cpu is None or memory is None or cpu < 1 or memory < 2 ** 20:
        return None
    name = (node.get("metadata") or {}).get("name", "?")
    return NodeSize(int(cpu), int(memory // 2 ** 20) * MEMORY_PERCENT // 100,
                    f"node {name} ({allocatable.get('cpu')} cores, {allocatable.get('memory')} allocatable)")


def largest(nodes: Sequence[JsonObj], template: JsonObj) -> Optional[NodeSize]:
    """The size of the largest node (cores, then memory) a pod of ``template`` may run on."""
    sizes = [s for s in (node_size(n) for n in nodes if allows(n, template)) if s is not None]
    return max(sizes, key=lambda s: (s.cpus, s.memory_mb), default=None)


def _knob(queue: QueueSettings, what: str) -> str:
    return f"PODGAHP_K8S_{queue.name.upper()}_{what}"


class WholeNodeSizer:
    """Sizes whole-node pilots; keeps one list of nodes per cluster for :data:`NODES_CACHE_SECONDS`.

    ``list_nodes(queue)`` lists the nodes of the queue's cluster (the backend's API call)."""

    def __init__(self, list_nodes: Callable[[QueueSettings], List[JsonObj]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._list_nodes = list_nodes
        self._clock = clock
        self._lock = threading.Lock()
        self._nodes: Dict[Tuple[Optional[str], Optional[str]], Tuple[float, List[JsonObj]]] = {}

    def _nodes_of(self, queue: QueueSettings) -> List[JsonObj]:
        key = queue.cluster_key
        with self._lock:
            cached = self._nodes.get(key)
        if cached is not None and self._clock() - cached[0] < NODES_CACHE_SECONDS:
            return cached[1]
        nodes = self._list_nodes(queue)[:MAX_NODES]
        with self._lock:
            self._nodes[key] = (self._clock(), nodes)
        return nodes

    def size(self, queue: QueueSettings, template: JsonObj) -> NodeSize:
        """The whole-node size of ``queue``; InvalidJob, saying why and what to set, when it has none."""
        asked = "the pilot asks for a whole node (WantWholeNode)"
        if queue.whole_node == "hold":
            raise InvalidJob(f"{asked}; queue {queue.name} runs no whole-node pilots "
                             f"({_knob(queue, 'WHOLE_NODE')} = hold)")
        if queue.whole_node_cpus and queue.whole_node_memory_mb:
            return NodeSize(queue.whole_node_cpus, queue.whole_node_memory_mb,
                            f"{_knob(queue, 'WHOLE_NODE_CPUS')} and _MEMORY_MB")
        try:
            nodes = self._nodes_of(queue)
        except AuthError as e:
            raise InvalidJob(f"{asked}, and its size cannot be found: listing the cluster's nodes is not allowed "
                             f"({e}); grant list on nodes (a ClusterRole, see docs/kubernetes.md) or give the "
                             f"queue's whole-node size with {_knob(queue, 'WHOLE_NODE_CPUS')} and "
                             f"{_knob(queue, 'WHOLE_NODE_MEMORY_MB')}") from None
        found = largest(nodes, template)
        if found is None:
            raise InvalidJob(f"{asked}, and no node of the cluster takes queue {queue.name}'s pods (schedulable, "
                             "matching the pod template's nodeSelector, its taints tolerated); set "
                             f"{_knob(queue, 'WHOLE_NODE_CPUS')} and {_knob(queue, 'WHOLE_NODE_MEMORY_MB')}")
        return found

    def sized(self, job: PilotJob, queue: QueueSettings, template: JsonObj) -> PilotJob:
        """``job`` with the cores and memory of a whole node of ``queue`` (within the queue's caps)."""
        size = self.size(queue, template)
        for what, value, cap, knob in (("cores", size.cpus, queue.max_cpus, "MAX_CPUS"),
                                       ("MiB of memory", size.memory_mb, queue.max_memory_mb, "MAX_MEMORY_MB")):
            if value > cap:
                raise InvalidJob(f"the pilot asks for a whole node (WantWholeNode): {value} {what} of {size.source}; "
                                 f"queue {queue.name} allows at most {cap} per pilot ({_knob(queue, knob)}, or "
                                 f"{_knob(queue, 'WHOLE_NODE_CPUS')} / _MEMORY_MB for a smaller whole node)")
        return dataclasses.replace(job, cpus=size.cpus, memory_mb=size.memory_mb)
