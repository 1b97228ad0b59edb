"""The simulated cluster behind the API: scheduler, kubelet, garbage collector and driver actions.

A background loop (:meth:`Cluster.tick`, every ``SimConfig.tick_seconds``) binds pending pods to
nodes that fit (schedulable, resources, ``nodeSelector``, required node affinity, taints/tolerations)
or records ``PodScheduled=False/Unschedulable`` with the scheduler's message; evicts the pods a
``NoExecute`` taint no longer lets stay (the taint manager, after any ``tolerationSeconds``); runs containers through
``ContainerCreating`` -> running -> terminated (or image-pull / config errors, OOM, deadline); carries
out graceful deletion (SIGTERM, exit, terminal phase, removal); and deletes objects whose owners
(``metadata.ownerReferences``) are gone.  Status values follow the table of pod failure shapes in
``kubernetes-api.md`` §4.  How a container behaves is read from its env (see :data:`SIM_ENV`).

With a container runtime attached (:meth:`Cluster.attach_runtime`, :mod:`podgahp_sim.k8s.runc`)
the kubelet runs each container for real instead: the ``PODGAHP_SIM_*`` variables mean nothing
there; exit codes, OOM kills, signals, logs, storage use and volume contents are the containers'
own, and the kubelet's periodic sync carries Secret and ConfigMap updates into running pods.

Owns only runtime state keyed by pod uid; stores pod objects through :class:`Store` and knows
nothing about HTTP.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import time
import uuid
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

from .admission import pod_requests
from .config import SimConfig, SimNode, Taint
from .events import SCHEDULER, EventRecorder
from .images import backoff_message, image_id, invalid_name_message, normalised, parse_reference, \
    pull_error_message
from .quantity import format_quantity, parse_quantity
from .agenda import Agenda, Key
from .envvars import ContainerConfigError
from .store import Expired, JsonObj, Store, json_copy, now_rfc3339

if TYPE_CHECKING:
    from .runc import Container, RuncRuntime

log = logging.getLogger(__name__)

SIM_ENV = {
    "PODGAHP_SIM_RUN_SECONDS": "seconds the container runs before exiting (default: SimConfig.run_seconds)",
    "PODGAHP_SIM_EXIT_CODE": "exit code when it exits on its own (default 0)",
    "PODGAHP_SIM_MEMORY_MIB": "memory it uses; above its memory limit it is OOMKilled (exit 137)",
    "PODGAHP_SIM_DISK_MIB": "local storage it writes (default 1: logs and scratch, as any container writes); "
                            "above its ephemeral-storage limit the kubelet evicts the pod",
    "PODGAHP_SIM_LOG": "text it prints after the start line",
    "PODGAHP_SIM_SIGTERM_SECONDS": "seconds from SIGTERM to exit (default: SimConfig.sigterm_exit_seconds)",
    "PODGAHP_SIM_SIGTERM_EXIT_CODE": "exit code after SIGTERM (default: SimConfig.sigterm_exit_code)",
}
OOM_AFTER_SECONDS = 0.5
"""A container over its memory limit is killed this long after start (or at its exit, if sooner)."""
DEFAULT_DISK_MIB = 1.0
"""Local storage a container writes unless ``PODGAHP_SIM_DISK_MIB`` says otherwise."""
STORAGE_EVICT_AFTER_SECONDS = 0.5
"""A pod over an ephemeral-storage limit is evicted this long after the container starts (or halfway
through its run, if sooner): the kubelet measures usage periodically."""
MAX_BACKOFF = 300.0
TERMINAL = ("Succeeded", "Failed")
UNKNOWN_MESSAGE = "The container could not be located when the pod was terminated"


def _env_value(container: JsonObj, name: str) -> Optional[str]:
    for var in container.get("env") or []:
        if isinstance(var, dict) and var.get("name") == name and isinstance(var.get("value"), str):
            return str(var["value"])
    return None


def _env_number(container: JsonObj, name: str, default: float) -> float:
    text = _env_value(container, name)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        log.warning("ignoring %s=%r: not a number", name, text)
        return default


@dataclass
class ContainerRun:
    """Runtime state of one simulated container."""

    spec: JsonObj
    run_seconds: float
    exit_code: int
    memory_mib: Optional[float]
    sigterm_seconds: float
    sigterm_exit_code: int
    disk_mib: float = DEFAULT_DISK_MIB
    state: str = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    terminated: JsonObj = field(default_factory=dict)
    last_state: JsonObj = field(default_factory=dict)
    restart_count: int = 0
    container_id: str = ""
    next_at: float = 0.0
    pull_failures: int = 0
    exit_at: Optional[float] = None
    exit_plan: Tuple[int, str] = (0, "Completed")
    log: List[str] = field(default_factory=list)
    real: "Optional[Container]" = None
    """The container the runtime runs (a runtime attached), else ``None``."""
    kill_at: Optional[float] = None
    """When a real container that got SIGTERM gets SIGKILL."""

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))


@dataclass
class PodRun:
    """Runtime state of one pod, keyed by uid."""

    uid: str
    namespace: str
    name: str
    containers: List[ContainerRun]
    node: Optional[str] = None
    bound_at: Optional[float] = None
    pod_ip: str = ""
    frozen: bool = False
    override: Optional[Tuple[str, str, str]] = None
    disruption: Optional[JsonObj] = None
    sigterm_at: Optional[float] = None
    storage_evict_at: Optional[float] = None
    storage_message: str = ""
    dirty: bool = False
    transitions: Dict[str, Tuple[str, str]] = field(default_factory=dict)
    sync_at: Optional[float] = None
    """Next kubelet sync of a real pod's volumes and storage use."""


@dataclass
class NodeState:
    config: SimNode
    allocatable: Dict[str, Fraction]
    labels: Dict[str, str]
    taints: List[Taint]
    ip: str
    lost: bool = False
    unschedulable: bool = False
    """Cordoned (``spec.unschedulable``): no new pod is bound here unless it tolerates the
    ``node.kubernetes.io/unschedulable`` taint."""
    version: int = 1
    """The node's resourceVersion (each change of labels, taints or unschedulable adds one)."""
    tainted_at: Dict[Taint, float] = field(default_factory=dict)
    """When each ``NoExecute`` taint was added (``tolerationSeconds`` count from then)."""


UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
"""What the node lifecycle controller adds to a cordoned node (and takes away when uncordoned)."""
DERIVED_TAINTS = ("node.kubernetes.io/unschedulable", "node.kubernetes.io/unreachable")
"""Taints the cluster sets from a node's state: a write of the node's taints cannot add or remove them."""
TAINT_EVICTION = "taint-eviction-controller"


def _node_state(node: SimNode, index: int) -> NodeState:
    labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    labels.update(node.labels)
    allocatable = {"cpu": parse_quantity(node.cpu), "memory": parse_quantity(node.memory),
                   "ephemeral-storage": parse_quantity(node.ephemeral_storage), "pods": Fraction(node.pods)}
    if node.gpus:
        allocatable["nvidia.com/gpu"] = Fraction(node.gpus)
    return NodeState(node, allocatable, labels, list(node.taints), "10.0.0.%d" % (10 + index))


def _process_name(spec: JsonObj) -> str:
    command = list(spec.get("command") or []) + list(spec.get("args") or [])
    return str(command[0]).rsplit("/", 1)[-1] if command else "pilot"


def _tolerates(tolerations: List[JsonObj], taint: Taint) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.effect:
            continue
        if (tol.get("operator") or "Equal") == "Exists":
            if not tol.get("key") or tol.get("key") == taint.key:
                return True
        elif tol.get("key") == taint.key and (tol.get("value") or "") == taint.value:
            return True
    return False


def _expression_matches(expr: JsonObj, labels: Dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _affinity_matches(pod: JsonObj, node: NodeState) -> bool:
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    for term in required.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        if all(_expression_matches(e, node.labels) for e in exprs) and all(
                _expression_matches(f, {"metadata.name": node.config.name}) for f in fields):
            return True
    return False


class Cluster:
    """Scheduler, kubelet and garbage collector over a :class:`Store`; see the module docstring."""

    def __init__(self, store: Store, config: SimConfig) -> None:
        self.store = store
        self.config = config
        self.nodes: Dict[str, NodeState] = {n.name: _node_state(n, i) for i, n in enumerate(config.nodes)}
        self.runs: Dict[str, PodRun] = {}
        self.orphaned_since: Dict[str, float] = {}
        self._usage: Optional[Dict[str, Dict[str, Fraction]]] = None
        """Per-node usage while a pass schedules (None otherwise)."""
        self._node_usage: Optional[Dict[str, Dict[str, Fraction]]] = None
        self._usage_rv = 0
        """:attr:`_node_usage` counts every pod write up to this resource version."""
        self._requests: Dict[str, Dict[str, Fraction]] = {}
        """Requests of each pod by uid (a pod's resources never change)."""
        """Per-node usage while a tick schedules (None otherwise)."""
        self.pullable = None if config.pullable_images is None else (
            set(config.pullable_images) | {normalised(i) for i in config.pullable_images})
        self.published: Set[str] = set()
        """Images pushed to the registry since the start (pullable whatever the rules above say)."""
        self._ip_counter = 1
        self.events = EventRecorder(store, config)
        self.started = time.time()
        self.agenda = Agenda()
        self.runtime: "Optional[RuncRuntime]" = None
        self.taint_deadlines: Dict[str, float] = {}
        """Pod uid -> when the taint manager evicts it (a NoExecute taint it tolerates for a while)."""

    def attach_runtime(self, runtime: "RuncRuntime") -> None:
        """Run containers for real through ``runtime`` from now on."""
        self.runtime = runtime

    def _forget(self, uid: str) -> None:
        """The pod is gone from the store: its runtime state, and its real containers and files."""
        self.runs.pop(uid, None)
        if self.runtime is not None:
            self.runtime.remove_pod(uid)

    # ------------------------------------------------------------------ helpers

    def _run_for(self, pod: JsonObj) -> PodRun:
        uid = pod["metadata"]["uid"]
        run = self.runs.get(uid)
        if run is None:
            containers = []
            for spec in (pod.get("spec") or {}).get("containers") or []:
                memory = _env_value(spec, "PODGAHP_SIM_MEMORY_MIB")
                containers.append(ContainerRun(
                    spec=json_copy(spec),
                    run_seconds=_env_number(spec, "PODGAHP_SIM_RUN_SECONDS", self.config.run_seconds),
                    exit_code=int(_env_number(spec, "PODGAHP_SIM_EXIT_CODE", 0)),
                    memory_mib=_env_number(spec, "PODGAHP_SIM_MEMORY_MIB", 0) if memory is not None else None,
                    sigterm_seconds=_env_number(spec, "PODGAHP_SIM_SIGTERM_SECONDS",
                                                self.config.sigterm_exit_seconds),
                    sigterm_exit_code=int(_env_number(spec, "PODGAHP_SIM_SIGTERM_EXIT_CODE",
                                                      self.config.sigterm_exit_code)),
                    disk_mib=_env_number(spec, "PODGAHP_SIM_DISK_MIB", DEFAULT_DISK_MIB)))
            run = PodRun(uid, pod["metadata"]["namespace"], pod["metadata"]["name"], containers)
            self.runs[uid] = run
        return run

    def _write(self, pod: JsonObj) -> JsonObj:
        return self.store.update("pods", pod)

    def _pod(self, namespace: str, name: str) -> JsonObj:
        pod = self.store.get("pods", namespace, name)
        if pod is None:
            raise KeyError("pod %s/%s not found" % (namespace, name))
        return pod

    def _transition(self, run: PodRun, ctype: str, status: str, now: float) -> str:
        old = run.transitions.get(ctype)
        if old is None or old[0] != status:
            run.transitions[ctype] = (status, now_rfc3339(now))
        return run.transitions[ctype][1]

    # ------------------------------------------------------------------ loop

    def tick(self, now: Optional[float] = None) -> None:
        """One scheduler + kubelet + garbage-collector pass: over every pod in a small cluster (or
        every ``full_sync_seconds``), else over the pods the :class:`Agenda` names."""
        now = time.time() if now is None else now
        with self.store.lock:
            if self.taint_deadlines:
                self._evict_tainted(now)
            if (self.store.count("pods") < self.config.full_sync_below_pods or self.agenda.cursor is None
                    or now - self.agenda.last_full >= self.config.full_sync_seconds):
                self._full_pass(now)
                return
            try:
                self._pass(now)
            except Expired:  # the changes since the last tick are no longer in the event log
                self._full_pass(now)

    def _full_pass(self, now: float) -> None:
        self.agenda.reset(self.store.rv, now)
        pods = self.store.items("pods")
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self.runs if u not in live]:
            self._forget(uid)
        for uid in [u for u in self._requests if u not in live]:
            del self._requests[uid]
        self._visit(pods, now)
        self.agenda.collectable = self._collect_garbage(
            [("secrets", o) for o in self.store.items("secrets")] + [("pods", o) for o in self.store.items("pods")],
            now)

    def _pass(self, now: float) -> None:
        agenda = self.agenda
        assert agenda.cursor is not None
        changes = self.store.events_after("pods", agenda.cursor) + self.store.events_after("secrets", agenda.cursor)
        agenda.cursor = self.store.rv
        visit = agenda.due(now) | agenda.unbound
        gone: List[Key] = []
        for event in changes:
            meta = event.obj["metadata"]
            key = (event.resource, meta.get("namespace", ""), meta["name"])
            if event.type == "DELETED":
                gone.append(key)
                agenda.collectable.update(self.store.dependents(meta.get("uid", "")))
                if event.resource == "pods":
                    self._forget(meta.get("uid", ""))
                continue
            if meta.get("ownerReferences"):
                agenda.collectable.add(key)
            if event.resource == "pods":
                visit.add(key)
        agenda.forget(gone)
        visit.difference_update(gone)
        pods = [self.store.objects[k] for k in sorted(visit) if k in self.store.objects]
        self._visit(pods, now)
        candidates = [(k[0], self.store.objects[k]) for k in sorted(agenda.collectable) if k in self.store.objects]
        agenda.collectable.intersection_update(self._collect_garbage(candidates, now))

    def _visit(self, pods: List[JsonObj], now: float) -> None:
        """Schedule the unbound pods of ``pods``, run the kubelet on the bound ones, and note when each
        needs its next visit."""
        pending = [p for p in pods if not (p.get("spec") or {}).get("nodeName")
                   and (p.get("status") or {}).get("phase") not in TERMINAL]
        pending.sort(key=lambda p: (-int((p.get("spec") or {}).get("priority") or 0),
                                    int(p["metadata"]["resourceVersion"])))
        if pending:
            # Node usage brought up to date once per pass (not per pending pod), then kept current
            # as pods bind.
            self._usage = self._current_usage()
            try:
                for pod in pending:
                    self._schedule(pod, now)
            finally:
                self._usage = None
                self._usage_rv = self.store.rv  # the binds just made are counted already
        for old in pods:
            key = ("pods", old["metadata"].get("namespace", ""), old["metadata"]["name"])
            found = self.store.objects.get(key)
            if found is None or found["metadata"].get("uid") != old["metadata"].get("uid"):
                continue
            pod = found
            if not (pod.get("spec") or {}).get("nodeName"):
                if (pod.get("status") or {}).get("phase") not in TERMINAL:
                    self.agenda.unbound.add(key)
                continue
            self.agenda.unbound.discard(key)
            self._kubelet(pod, now)
            run = self.runs.get(pod["metadata"]["uid"])
            current = self.store.objects.get(key)
            if run is not None and current is not None:
                at = self._next_step(current, run, now)
                if at is not None:
                    self.agenda.wake(key, at)

    def _next_step(self, pod: JsonObj, run: PodRun, now: float) -> Optional[float]:
        """When the kubelet next has something to do for this pod (None: only if the pod changes)."""
        if run.dirty or pod["metadata"].get("deletionTimestamp"):
            return now
        if any(c.real is not None and c.state != "terminated" for c in run.containers):
            return now + self.config.tick_seconds  # real processes: watched at every tick
        if run.frozen:
            return None
        times = [c.next_at if c.state == "waiting" else c.exit_at for c in run.containers
                 if c.state == "waiting" or (c.state == "running" and c.exit_at is not None)]
        if run.storage_evict_at is not None:
            times.append(run.storage_evict_at)
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline and run.bound_at is not None:
            times.append(run.bound_at + float(deadline))
        return min((t for t in times if t is not None), default=None)

    def wake(self, pod: JsonObj) -> None:
        """Visit this pod at the next tick (a driver action changed its run without writing it)."""
        self.agenda.wake(("pods", pod["metadata"].get("namespace", ""), pod["metadata"]["name"]), 0.0)

    # ------------------------------------------------------------------ scheduler

    def _all_usage(self, pods: List[JsonObj]) -> Dict[str, Dict[str, Fraction]]:
        usage: Dict[str, Dict[str, Fraction]] = {name: {"pods": Fraction(0)} for name in self.nodes}
        for pod in pods:
            self._count(usage, pod, 1)
        return usage

    def _current_usage(self) -> Dict[str, Dict[str, Fraction]]:
        """Per-node usage now: brought up to date from the pod writes since the last time (each write
        moves a pod's requests on or off a node), or summed over every pod when those are no longer
        in the event log."""
        usage = self._node_usage
        changes = None
        if usage is not None:
            try:
                changes = self.store.events_after("pods", self._usage_rv)
            except Expired:
                pass
        if usage is None or changes is None:
            usage = self._node_usage = self._all_usage(self.store.items("pods"))
        else:
            for event in changes:
                if event.old is not None:
                    self._count(usage, event.old, -1)
                if event.type != "DELETED":
                    self._count(usage, event.obj, 1)
                else:
                    self._requests.pop(event.obj["metadata"].get("uid", ""), None)
        self._usage_rv = self.store.rv
        return usage

    def _count(self, usage: Dict[str, Dict[str, Fraction]], pod: JsonObj, sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) what a pod takes of its node: a bound pod not finished."""
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in usage or (pod.get("status") or {}).get("phase") in TERMINAL:
            return
        uid = pod["metadata"].get("uid", "")
        requests = self._requests.get(uid)
        if requests is None:
            requests = self._requests[uid] = pod_requests(pod)
        used = usage[node]
        used["pods"] += sign
        for name, value in requests.items():
            used[name] = used.get(name, Fraction(0)) + sign * value

    def _used(self, node: str) -> Dict[str, Fraction]:
        if self._usage is not None and node in self._usage:
            return self._usage[node]
        return self._all_usage(self.store.items("pods")).get(node, {"pods": Fraction(0)})

    def _fit_reasons(self, pod: JsonObj, node: NodeState) -> List[str]:
        """Why ``pod`` cannot go on ``node`` (none: it fits), in the order of the default scheduler's
        filter plugins (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit); the first
        failing plugin names the node's reason."""
        spec = pod.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if node.unschedulable and not _tolerates(tolerations, UNSCHEDULABLE_TAINT):
            return ["node(s) were unschedulable"]
        taints = list(node.taints)
        if node.lost:
            taints.insert(0, Taint("node.kubernetes.io/unreachable", "", "NoSchedule"))
        for taint in taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
                return ["node(s) had untolerated taint {%s: %s}" % (taint.key, taint.value)]
        if not _affinity_matches(pod, node):
            return ["node(s) didn't match Pod's node affinity/selector"]
        used = self._used(node.config.name)
        reasons = []
        if used["pods"] + 1 > node.allocatable["pods"]:
            reasons.append("Too many pods")
        for name, value in sorted(pod_requests(pod).items()):
            if value <= 0:
                continue
            if used.get(name, Fraction(0)) + value > node.allocatable.get(name, Fraction(0)):
                reasons.append("Insufficient %s" % name)
        return reasons

    def _schedule(self, pod: JsonObj, now: float) -> None:
        spec = pod.get("spec") or {}
        if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
            return
        if pod["metadata"].get("deletionTimestamp"):
            return
        counts: Dict[str, int] = {}
        chosen: Optional[NodeState] = None
        for node in self.nodes.values():
            reasons = self._fit_reasons(pod, node)
            if not reasons:
                chosen = node
                break
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
        if chosen is not None:
            self._bind(pod, chosen.config.name, now)
            return
        if chosen is None and len(self.nodes) > 0:
            # framework.FitError.Error(): "<n> <reason>" strings sorted, joined by ", "
            histogram = sorted("%d %s" % (n, reason) for reason, n in counts.items())
            message = "0/%d nodes are available: %s." % (len(self.nodes), ", ".join(histogram))
        else:
            message = "no nodes available to schedule pods"
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current and current.get("message") == message and current.get("status") == "False":
            return
        self.events.pod(pod, "Warning", "FailedScheduling", message, SCHEDULER, now=now)
        new = json_copy(pod)
        status = new.setdefault("status", {})
        status["conditions"] = [c for c in conditions if c.get("type") != "PodScheduled"] + [{
            "type": "PodScheduled", "status": "False", "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(now), "reason": "Unschedulable", "message": message}]
        self._write(new)

    def _bind(self, pod: JsonObj, node: str, now: float) -> None:
        run = self._run_for(pod)
        new = json_copy(pod)
        new["spec"]["nodeName"] = node
        status = new.setdefault("status", {})
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"] + [{
            "type": "PodScheduled", "status": "True", "lastProbeTime": None,
            "lastTransitionTime": self._transition(run, "PodScheduled", "True", now)}]
        self._write(new)
        if self._usage is not None:
            self._count(self._usage, new, 1)
        self.events.pod(new, "Normal", "Scheduled", "Successfully assigned %s/%s to %s" % (
            run.namespace, run.name, node), SCHEDULER, now=now)
        self._start_kubelet(run, node, now)
        self._note_taint_deadline(new, self.nodes[node], now)

    def _start_kubelet(self, run: PodRun, node: str, now: float) -> None:
        run.node = node
        run.bound_at = now
        run.pod_ip = "10.244.%d.%d" % (self._ip_counter // 250, 2 + self._ip_counter % 250)
        self._ip_counter += 1
        for container in run.containers:
            container.next_at = now + self.config.container_create_seconds
        run.dirty = True

    # ------------------------------------------------------------------ kubelet

    def _kubelet(self, pod: JsonObj, now: float) -> None:
        run = self._run_for(pod)
        node_name = pod["spec"]["nodeName"]
        node = self.nodes.get(node_name)
        if node is None or node.lost:
            return
        if run.node is None:
            self._start_kubelet(run, node_name, now)
        deleting = pod["metadata"].get("deletionTimestamp")
        if run.frozen and not deleting:
            for container in run.containers:
                self._reap_real(run, container, now)
            self._flush(pod, run, now)
            return
        spec = pod.get("spec") or {}
        if deleting:
            self._terminate(pod, run, now)
        else:
            deadline = spec.get("activeDeadlineSeconds")
            if (deadline and run.bound_at is not None and now >= run.bound_at + deadline
                    and run.override is None and self._phase(pod, run) not in TERMINAL):
                if any(c.real is not None for c in run.containers):
                    self._stop_real(pod, run, now, int(spec.get("terminationGracePeriodSeconds", 30)))
                else:
                    self._kill_all(run, now, 137, "Error")
                run.override = ("Failed", "DeadlineExceeded",
                                "Pod was active on the node longer than the specified deadline")
                self.events.pod(pod, "Normal", "DeadlineExceeded", run.override[2], node=run.node, now=now)
                run.frozen = True
            elif (run.storage_evict_at is not None and now >= run.storage_evict_at and run.override is None
                  and any(c.state == "running" for c in run.containers)):
                self._kill_all(run, now, 137, "Error")
                self._mark_evicted(pod, run, now, run.storage_message)
            else:
                for container in run.containers:
                    self._step_container(pod, run, container, now)
                if run.sync_at is not None and now >= run.sync_at and not run.frozen:
                    self._sync_real(pod, run, now)
        # the terminal status is written first and the object removed on the next pass (kubelet >= 1.27)
        was_terminal = (pod.get("status") or {}).get("phase") in TERMINAL
        pod = self._flush(pod, run, now)
        if deleting and was_terminal and all(c.state == "terminated" for c in run.containers):
            self.store.delete("pods", run.namespace, run.name)
            self._forget(run.uid)

    def _step_container(self, pod: JsonObj, run: PodRun, c: ContainerRun, now: float) -> None:
        ended: Optional[Tuple[int, str, str]] = None
        if c.state == "waiting" and c.real is not None:  # created, not started yet
            ended = self._poll_real(c, now)
            if ended is None and self.runtime is not None and self.runtime.started(c.real):
                c.state, c.reason, c.message = "running", "", ""
                c.started_at = now
                run.dirty = True
        elif c.state == "waiting" and now >= c.next_at:
            if c.reason in ("ContainerCreating", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError",
                            "CreateContainerError"):
                self._create_container(pod, run, c, now)
            elif c.reason == "CrashLoopBackOff":
                if self.runtime is not None:
                    self._create_container(pod, run, c, now)
                else:
                    self._run_container(pod, run, c, now)
        elif c.state == "running" and c.real is not None:
            ended = self._poll_real(c, now)
            if ended is None and c.exit_at is not None and now >= c.exit_at:
                ended = (c.exit_plan[0], c.exit_plan[1], "")  # a driver action ends it
        elif c.state == "running" and c.exit_at is not None and now >= c.exit_at:
            ended = (c.exit_plan[0], c.exit_plan[1], "")
        if ended is not None:
            code, reason = ended[0], ended[1]
            self._finish(c, now, code, reason, ended[2])
            if reason == "OOMKilled" and run.node is not None:
                self.events.node(run.node, "Warning", "SystemOOM", "System OOM encountered, victim process: %s, pid: %d"
                                 % (_process_name(c.spec), 1000 + self._ip_counter), now)
            run.dirty = True
            policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                c.restart_count += 1
                c.last_state = {"terminated": c.terminated}
                delay = min(MAX_BACKOFF, self.config.crash_backoff_seconds * 2 ** (c.restart_count - 1))
                c.state, c.reason = "waiting", "CrashLoopBackOff"
                self.events.pod(pod, "Warning", "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)"
                                % (c.name, run.name, run.namespace, run.uid), node=run.node, container=c.name,
                                now=now)
                c.message = "back-off %ds restarting failed container=%s pod=%s_%s(%s)" % (
                    max(1, int(delay)), c.name, run.name, run.namespace, run.uid)
                c.next_at = now + delay

    def _create_container(self, pod: JsonObj, run: PodRun, c: ContainerRun, now: float) -> None:
        previous = (c.reason, c.message)

        def event(etype: str, reason: str, message: str) -> None:
            self.events.pod(pod, etype, reason, message, node=run.node, container=c.name, now=now)
        if parse_reference(c.image) is None:
            c.reason, c.message, c.next_at = "InvalidImageName", invalid_name_message(c.image), float("inf")
            event("Warning", "InspectFailed", c.message)
            event("Warning", "Failed", "Error: InvalidImageName")
        elif not self._pullable(c.image):
            if c.reason == "ErrImagePull":
                delay = min(MAX_BACKOFF, self.config.image_backoff_seconds * 2 ** max(0, c.pull_failures - 1))
                c.reason, c.message, c.next_at = "ImagePullBackOff", backoff_message(c.image), now + delay
                event("Normal", "BackOff", 'Back-off pulling image "%s"' % c.image)
                event("Warning", "Failed", "Error: ImagePullBackOff")
            else:
                c.pull_failures += 1
                c.reason = "ErrImagePull"
                c.message = "rpc error: code = NotFound desc = " + pull_error_message(c.image)
                c.next_at = now + self.config.image_backoff_seconds / 2
                event("Normal", "Pulling", 'Pulling image "%s"' % c.image)
                event("Warning", "Failed", 'Failed to pull image "%s": %s' % (c.image, c.message))
                event("Warning", "Failed", "Error: ErrImagePull")
        else:
            problem = self._config_error(pod, c)
            if problem is None:
                try:
                    self._run_container(pod, run, c, now)
                except ContainerConfigError as e:
                    problem = (e.reason, e.message)
            if problem is None:
                if c.restart_count == 0:
                    event("Normal", "Pulling", 'Pulling image "%s"' % c.image)
                    event("Normal", "Pulled", 'Successfully pulled image "%s" in %dms' % (
                        c.image, int(self.config.container_create_seconds * 1000)))
                event("Normal", "Created", "Created container: %s" % c.name)
                event("Normal", "Started", "Started container %s" % c.name)
                return
            c.reason, c.message, c.next_at = problem[0], problem[1], now + self.config.tick_seconds
            if problem[0] != "ContainerCreating" and (c.reason, c.message) != previous:
                event("Warning", "Failed", "Error: %s" % problem[1])
        if (c.reason, c.message) != previous:
            run.dirty = True

    def publish_image(self, image: str) -> None:
        """The image is pushed to its registry: pulls of it succeed from now on."""
        with self.store.lock:
            self.published |= {image, normalised(image)}

    def _pullable(self, image: str) -> bool:
        if self.runtime is not None:
            return self.runtime.image(image) is not None
        if image in self.published or normalised(image) in self.published:
            return True
        if self.pullable is not None:
            return image in self.pullable or normalised(image) in self.pullable
        return "does-not-exist" not in image

    def _config_error(self, pod: JsonObj, c: ContainerRun) -> Optional[Tuple[str, str]]:
        """CreateContainerConfigError for env from a missing Secret (key); a missing Secret volume
        keeps the container in ContainerCreating (the kubelet retries the mount)."""
        namespace = pod["metadata"]["namespace"]
        for var in c.spec.get("env") or []:
            ref = ((var.get("valueFrom") or {}).get("secretKeyRef")) if isinstance(var, dict) else None
            if not ref or ref.get("optional"):
                continue
            secret = self.store.get("secrets", namespace, ref.get("name", ""))
            if secret is None:
                return "CreateContainerConfigError", 'secret "%s" not found' % ref.get("name", "")
            if ref.get("key") not in (secret.get("data") or {}):
                return ("CreateContainerConfigError",
                        "couldn't find key %s in Secret %s/%s" % (ref.get("key"), namespace, ref.get("name")))
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            secret_ref = volume.get("secret")
            if isinstance(secret_ref, dict) and not secret_ref.get("optional") and \
                    self.store.get("secrets", namespace, secret_ref.get("secretName", "")) is None:
                return "ContainerCreating", ""
        return None

    def _limit_mib(self, c: ContainerRun) -> Optional[float]:
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
        return None if limit is None else float(parse_quantity(limit) / 2 ** 20)

    @staticmethod
    def _storage_limit(c: ContainerRun) -> Optional[Fraction]:
        limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
        return None if limit is None else parse_quantity(limit)

    def _storage_excess(self, run: PodRun) -> str:
        """The kubelet's eviction message when a container's local storage use exceeds its limit, else ''.

        A container's writable layer and logs count against its own ``ephemeral-storage`` limit.
        (The kubelet also bounds the pod's total, which differs only by emptyDir volumes, whose use
        is not simulated.)
        """
        for c in run.containers:
            limit = self._storage_limit(c)
            if limit is not None and Fraction(c.disk_mib) * 2 ** 20 > limit:
                return 'Container %s exceeded its local ephemeral storage limit "%s". ' % (
                    c.name, (c.spec.get("resources") or {}).get("limits", {}).get("ephemeral-storage"))
        return ""

    def _run_container(self, pod: JsonObj, run: PodRun, c: ContainerRun, now: float) -> None:
        if self.runtime is not None:
            self._run_real(pod, run, c, now)
            return
        c.state, c.reason, c.message = "running", "", ""
        c.started_at = now
        c.container_id = "containerd://" + hashlib.sha256(
            ("%s/%s/%d/%f" % (run.uid, c.name, c.restart_count, now)).encode()).hexdigest()
        command = c.spec.get("command")
        args = c.spec.get("args")
        c.log.append("podgahp-sim: pod %s/%s container %s on node %s: command=%s args=%s" % (
            run.namespace, run.name, c.name, run.node, json.dumps(command), json.dumps(args)))
        text = _env_value(c.spec, "PODGAHP_SIM_LOG")
        if text:
            c.log.extend(text.splitlines())
        message = self._storage_excess(run)
        if message and run.storage_evict_at is None:
            run.storage_evict_at = now + min(STORAGE_EVICT_AFTER_SECONDS, c.run_seconds / 2)
            run.storage_message = message
        limit = self._limit_mib(c)
        if c.memory_mib is not None and limit is not None and c.memory_mib > limit:
            c.exit_at = now + min(OOM_AFTER_SECONDS, c.run_seconds)
            c.exit_plan = (137, "OOMKilled")
        else:
            c.exit_at = now + c.run_seconds
            c.exit_plan = (c.exit_code, "Completed" if c.exit_code == 0 else "Error")
        run.dirty = True

    def _finish(self, c: ContainerRun, now: float, code: int, reason: str, message: str = "") -> None:
        was_running = c.state == "running"
        if c.real is not None and self.runtime is not None and self.runtime.running(c.real):
            self.runtime.signal(c.real, signal.SIGKILL)  # ended by the kubelet (eviction, driver action)
        c.state, c.reason, c.message = "terminated", "", ""
        c.finished_at = now
        c.exit_at = None
        terminated: JsonObj = {"exitCode": code, "reason": reason}
        if message:
            terminated["message"] = message
        if was_running and c.started_at is not None:
            terminated["startedAt"] = now_rfc3339(c.started_at)
            terminated["finishedAt"] = now_rfc3339(now)
            terminated["containerID"] = c.container_id
            if c.real is None:
                c.log.append("podgahp-sim: container %s exited with code %d (%s)" % (c.name, code, reason))
        c.terminated = terminated

    def _kill_all(self, run: PodRun, now: float, code: int, reason: str) -> None:
        for c in run.containers:
            if c.state == "running":
                self._finish(c, now, code, reason)
            elif c.state == "waiting":
                self._finish(c, now, 137, "ContainerStatusUnknown", UNKNOWN_MESSAGE)
        run.dirty = True

    def _terminate(self, pod: JsonObj, run: PodRun, now: float) -> None:
        """Graceful deletion: SIGTERM now, SIGKILL at the end of the grace period."""
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        if run.sigterm_at is None:
            run.sigterm_at = now
            for c in run.containers:
                if c.state == "running":
                    self.events.pod(pod, "Normal", "Killing", "Stopping container %s" % c.name, node=run.node,
                                    container=c.name, now=now)
                    if c.real is not None:
                        self._signal_real(c, now, grace)
                    elif c.sigterm_seconds <= grace:
                        c.exit_at = min(c.exit_at or float("inf"), now + c.sigterm_seconds)
                        c.exit_plan = (c.sigterm_exit_code, "Completed" if c.sigterm_exit_code == 0 else "Error")
                    else:
                        c.exit_at = min(c.exit_at or float("inf"), now + grace)
                        c.exit_plan = (137, "Error")
                elif c.state == "waiting":
                    self._finish(c, now, 137, "ContainerStatusUnknown", UNKNOWN_MESSAGE)
            run.dirty = True
        for c in run.containers:
            if c.real is not None:
                self._reap_real(run, c, now)
            elif c.state == "running" and c.exit_at is not None and now >= c.exit_at:
                self._finish(c, now, *c.exit_plan)
                run.dirty = True

    # ------------------------------------------------------------------ real containers (a runtime attached)

    def _run_real(self, pod: JsonObj, run: PodRun, c: ContainerRun, now: float) -> None:
        """Create and start the container through the runtime (ContainerConfigError if it cannot)."""
        assert self.runtime is not None
        node = self.nodes[run.node or ""]
        c.real = self.runtime.create(pod, c.spec, c.restart_count, pod_ip=run.pod_ip, host_ip=node.ip,
                                     allocatable=node.allocatable)
        c.state, c.reason, c.message = "waiting", "ContainerCreating", ""  # running once its process is
        c.container_id = "containerd://" + hashlib.sha256(c.real.id.encode()).hexdigest()
        c.exit_at = c.kill_at = None
        if run.sync_at is None:
            run.sync_at = now + self.config.kubelet_sync_seconds
        run.dirty = True

    def _poll_real(self, c: ContainerRun, now: float) -> Optional[Tuple[int, str, str]]:
        """(code, reason, message) once the real container has ended; SIGKILL when its grace is over."""
        if c.real is None or self.runtime is None or c.state == "terminated":
            return None
        if c.kill_at is not None and now >= c.kill_at:
            c.kill_at = None
            self.runtime.signal(c.real, signal.SIGKILL)
        ended = self.runtime.poll(c.real)
        return None if ended is None else (ended.code, ended.reason, ended.message)

    def _reap_real(self, run: PodRun, c: ContainerRun, now: float) -> None:
        ended = self._poll_real(c, now)
        if ended is not None:
            self._finish(c, now, *ended)
            run.dirty = True

    def _signal_real(self, c: ContainerRun, now: float, grace: float) -> None:
        """SIGTERM now and SIGKILL when ``grace`` is over (at once without a grace period)."""
        assert c.real is not None and self.runtime is not None
        if grace <= 0:
            self.runtime.signal(c.real, signal.SIGKILL)
        else:
            self.runtime.signal(c.real, signal.SIGTERM)
            c.kill_at = now + grace

    def _stop_real(self, pod: JsonObj, run: PodRun, now: float, grace: float) -> None:
        """The kubelet kills the pod (deadline): its running containers get SIGTERM and their grace."""
        for c in run.containers:
            if c.state == "running" and c.real is not None:
                self.events.pod(pod, "Normal", "Killing", "Stopping container %s" % c.name, node=run.node,
                                container=c.name, now=now)
                self._signal_real(c, now, grace)
            elif c.state == "running":
                self._finish(c, now, 137, "Error")
            elif c.state == "waiting":
                self._finish(c, now, 137, "ContainerStatusUnknown", UNKNOWN_MESSAGE)
        run.dirty = True

    def _sync_real(self, pod: JsonObj, run: PodRun, now: float) -> None:
        """The kubelet's periodic sync: volume contents follow their objects; local storage over a
        limit evicts the pod."""
        assert self.runtime is not None
        run.sync_at = now + self.config.kubelet_sync_seconds
        node = self.nodes[run.node or ""]
        self.runtime.sync_volumes(pod, run.pod_ip, node.ip, node.allocatable)
        message = self.runtime.storage_excess(pod, [c.real for c in run.containers if c.real is not None])
        if message and any(c.state == "running" for c in run.containers):
            self._kill_all(run, now, 137, "Error")
            self._mark_evicted(pod, run, now, message)

    # ------------------------------------------------------------------ status

    def _phase(self, pod: JsonObj, run: PodRun) -> str:
        if run.override is not None:
            return run.override[0]
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        states = [c.state for c in run.containers]
        if states and all(s == "terminated" for s in states):
            codes = [int(c.terminated.get("exitCode", 0)) for c in run.containers]
            if policy == "Never" or pod["metadata"].get("deletionTimestamp"):
                return "Succeeded" if all(code == 0 for code in codes) else "Failed"
            if policy == "OnFailure" and all(code == 0 for code in codes):
                return "Succeeded"
        if any(s != "waiting" or c.restart_count for s, c in zip(states, run.containers)):
            return "Running"
        return "Pending"

    def _container_status(self, c: ContainerRun, phase: str) -> JsonObj:
        ready = c.state == "running" and phase == "Running"
        status: JsonObj = {"name": c.name, "image": normalised(c.image),
                           "imageID": image_id(c.image) if c.started_at is not None else "",
                           "ready": ready, "restartCount": c.restart_count, "started": c.state == "running"}
        if c.container_id and (c.state != "waiting" or c.restart_count):
            status["containerID"] = c.container_id
        if c.state == "running":
            status["state"] = {"running": {"startedAt": now_rfc3339(c.started_at)}}
        elif c.state == "terminated":
            status["state"] = {"terminated": dict(c.terminated)}
        else:
            waiting = {"reason": c.reason}
            if c.message:
                waiting["message"] = c.message
            status["state"] = {"waiting": waiting}
        status["lastState"] = json_copy(c.last_state)
        return status

    def _render(self, pod: JsonObj, run: PodRun, now: float) -> JsonObj:
        old = pod.get("status") or {}
        phase = self._phase(pod, run)
        statuses = [self._container_status(c, phase) for c in run.containers]
        unready = [s["name"] for s in statuses if not s["ready"]]
        status: JsonObj = {"phase": phase}
        if run.override is not None and run.override[1]:
            status["reason"], status["message"] = run.override[1], run.override[2]
        conditions: List[JsonObj] = []
        if run.disruption is not None:
            conditions.append(dict(run.disruption))

        def cond(ctype: str, value: str, reason: str = "", message: str = "") -> None:
            entry: JsonObj = {"type": ctype, "status": value, "lastProbeTime": None,
                              "lastTransitionTime": self._transition(run, ctype, value, now)}
            if reason:
                entry["reason"] = reason
            if message:
                entry["message"] = message
            conditions.append(entry)

        sandbox = phase not in TERMINAL and not run.frozen
        cond("PodReadyToStartContainers", "True" if sandbox else "False")
        cond("Initialized", "True")
        if phase in TERMINAL:
            why = "PodCompleted" if phase == "Succeeded" else "PodFailed"
            cond("Ready", "False", why)
            cond("ContainersReady", "False", why)
        elif unready or phase != "Running":
            message = "containers with unready status: [%s]" % " ".join(unready)
            cond("Ready", "False", "ContainersNotReady", message)
            cond("ContainersReady", "False", "ContainersNotReady", message)
        else:
            cond("Ready", "True")
            cond("ContainersReady", "True")
        cond("PodScheduled", "True")
        status["conditions"] = conditions
        node = self.nodes.get(run.node or "")
        if node is not None:
            status["hostIP"] = node.ip
            status["hostIPs"] = [{"ip": node.ip}]
        if run.pod_ip:
            status["podIP"] = run.pod_ip
            status["podIPs"] = [{"ip": run.pod_ip}]
        status["startTime"] = now_rfc3339(run.bound_at)
        status["containerStatuses"] = statuses
        status["qosClass"] = old.get("qosClass", "BestEffort")
        return status

    def _flush(self, pod: JsonObj, run: PodRun, now: float) -> JsonObj:
        if not run.dirty:
            return pod
        run.dirty = False
        status = self._render(pod, run, now)
        if status == pod.get("status"):
            return pod
        new = json_copy(pod)
        new["status"] = status
        return self._write(new)

    # ------------------------------------------------------------------ garbage collector

    def _collect_garbage(self, candidates: List[Tuple[str, JsonObj]], now: float) -> Set[Key]:
        """Delete the objects among ``candidates`` whose owners have all been gone ``gc_seconds``;
        returns the keys still waiting for that."""
        known = {"Pod", "Secret"}
        waiting: Set[Key] = set()
        for resource, obj in candidates:
            refs = obj["metadata"].get("ownerReferences") or []
            uid = obj["metadata"]["uid"]
            if not refs or any(r.get("kind") not in known or self.store.by_uid(r.get("uid", "")) is not None
                               for r in refs):
                self.orphaned_since.pop(uid, None)
                continue
            since = self.orphaned_since.setdefault(uid, now)
            key = (resource, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            if now - since >= self.config.gc_seconds:
                self.orphaned_since.pop(uid, None)
                log.debug("garbage-collecting %s %s/%s", resource, key[1], key[2])
                self.store.delete(resource, key[1], key[2])
            else:
                waiting.add(key)
        return waiting

    # ------------------------------------------------------------------ driver actions

    def evict(self, namespace: str, name: str, resource: str = "memory") -> JsonObj:
        """Kubelet node-pressure eviction: Failed/Evicted, DisruptionTarget=True (TerminationByKubelet)."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            run = self._run_for(pod)
            now = time.time()
            c = run.containers[0] if run.containers else None
            usage = format_quantity(Fraction(int((c.memory_mib or 1024) if c else 1024) * 2 ** 20), True)
            request = ((c.spec.get("resources") or {}).get("requests") or {}).get(resource, "0") if c else "0"
            message = ("The node was low on resource: %s. Threshold quantity: 100Mi, available: 51200Ki. "
                       % resource)
            if c is not None:
                message += "Container %s was using %s, request is %s, has larger consumption of %s. " % (
                    c.name, usage, request, resource)
            for container in run.containers:
                if container.state != "terminated":
                    self._finish(container, now, 137, "ContainerStatusUnknown" if resource == "memory" else "Error",
                                 UNKNOWN_MESSAGE if resource == "memory" else "")
            self._mark_evicted(pod, run, now, message)
            return self._flush(pod, run, now)

    def _mark_evicted(self, pod: JsonObj, run: PodRun, now: float, message: str) -> None:
        """Failed/Evicted with the kubelet's message, its Warning event and DisruptionTarget condition."""
        run.override = ("Failed", "Evicted", message)
        self.events.pod(pod, "Warning", "Evicted", message, node=run.node, now=now)
        run.disruption = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": now_rfc3339(now), "reason": "TerminationByKubelet",
                          "message": message}
        run.frozen = True
        run.dirty = True

    def eviction(self, namespace: str, name: str, grace: Optional[int] = None) -> JsonObj:
        """The Eviction API: DisruptionTarget=True (EvictionByEvictionAPI), then graceful deletion
        (``grace`` seconds, else the pod's own); a pod on no node, or finished, goes at once."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            if pod["metadata"].get("deletionTimestamp"):
                return pod
            run = self._run_for(pod)
            now = time.time()
            run.disruption = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": now_rfc3339(now), "reason": "EvictionByEvictionAPI",
                              "message": "Eviction API: evicting"}
            run.dirty = True
            self.wake(pod)
            if run.node is None:
                self._flush(pod, run, now)
                return self.store.delete("pods", namespace, name) or pod
            pod = self._flush(pod, run, now)
            seconds = grace if grace is not None else int(pod["spec"].get("terminationGracePeriodSeconds", 30))
            return self.graceful_delete(pod, max(seconds, 0), now)

    def preempt(self, namespace: str, name: str) -> JsonObj:
        """Scheduler preemption: DisruptionTarget=True (PreemptionByScheduler), then graceful deletion."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            run = self._run_for(pod)
            now = time.time()
            run.disruption = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": now_rfc3339(now), "reason": "PreemptionByScheduler",
                              "message": "%s: preempting to accommodate a higher priority pod"
                              % pod["spec"].get("schedulerName", "default-scheduler")}
            run.dirty = True
            self.events.pod(pod, "Normal", "Preempted", "Preempted by a pod on node %s" % (run.node or "(none)"),
                            SCHEDULER, now=now)
            if run.node is None:
                self._flush(pod, run, now)
                return self.store.delete("pods", namespace, name) or pod
            pod = self._flush(pod, run, now)
            return self.graceful_delete(pod, int(pod["spec"].get("terminationGracePeriodSeconds", 30)), now)

    def graceful_delete(self, pod: JsonObj, grace: int, now: float) -> JsonObj:
        """Set deletionTimestamp (+ grace) and let the kubelet finish; used by the DELETE route too."""
        new = json_copy(pod)
        meta = new["metadata"]
        if meta.get("deletionTimestamp"):
            old_grace = int(meta.get("deletionGracePeriodSeconds") or 0)
            if grace >= old_grace:
                return pod
        meta["deletionTimestamp"] = now_rfc3339(now + grace)
        meta["deletionGracePeriodSeconds"] = grace
        run = self.runs.get(meta["uid"])
        if run is not None and run.sigterm_at is not None:
            for c in run.containers:
                if c.state == "running" and c.exit_at is not None:
                    if c.exit_at > now + grace:
                        c.exit_at, c.exit_plan = now + grace, (137, "Error")
        return self._write(new)

    def node_lost(self, namespace: str, name: str) -> JsonObj:
        """The pod's node stops reporting: its pods keep their phase, get NodeLost and Ready=False."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            node_name = pod["spec"].get("nodeName")
            if not node_name or node_name not in self.nodes:
                raise ValueError("pod %s/%s is not bound to a node" % (namespace, name))
            self.nodes[node_name].lost = True
            now = time.time()
            result = pod
            for other in self.store.items("pods"):
                if other["spec"].get("nodeName") != node_name:
                    continue
                run = self._run_for(other)
                phase = (other.get("status") or {}).get("phase", "Pending")
                if phase in TERMINAL:
                    continue
                new = json_copy(other)
                status = new.setdefault("status", {})
                status["reason"] = "NodeLost"
                status["message"] = "Node %s which was running pod %s is unresponsive" % (node_name, other[
                    "metadata"]["name"])
                for c in status.get("conditions") or []:
                    if c.get("type") in ("Ready", "ContainersReady"):
                        c["status"] = "False"
                        c["lastTransitionTime"] = now_rfc3339(now)
                for cs in status.get("containerStatuses") or []:
                    cs["ready"] = False
                run.frozen = True
                written = self._write(new)
                if other["metadata"]["name"] == name and other["metadata"]["namespace"] == namespace:
                    result = written
            return result

    def node_recovered(self, node: str) -> None:
        """Undo :meth:`node_lost`: the kubelet reports again (pods stay as they were)."""
        with self.store.lock:
            self.nodes[node].lost = False

    def set_phase(self, namespace: str, name: str, phase: str, reason: str = "", message: str = "",
                  exit_code: Optional[int] = None) -> JsonObj:
        """Force a phase.  Terminal phases terminate the containers (exit code 0 / 1 unless given)."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            run = self._run_for(pod)
            self.wake(pod)
            now = time.time()
            if run.node is None and pod["spec"].get("nodeName"):
                self._start_kubelet(run, pod["spec"]["nodeName"], now)
            if phase in TERMINAL:
                code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                for c in run.containers:
                    if c.state != "terminated":
                        if c.state == "waiting" and c.started_at is None:
                            c.started_at = now
                            c.state = "running"
                        self._finish(c, now, code, "Completed" if code == 0 else "Error")
                run.frozen = True
            elif phase == "Running":
                for c in run.containers:
                    if c.state == "waiting":
                        self._run_container(pod, run, c, now)
            else:
                run.frozen = True
            run.override = (phase, reason, message) if phase != "Running" else None
            run.dirty = True
            if run.node is None:
                new = json_copy(pod)
                new.setdefault("status", {}).update({"phase": phase})
                if reason:
                    new["status"]["reason"], new["status"]["message"] = reason, message
                return self._write(new)
            return self._flush(pod, run, now)

    def exit_now(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """Make the running containers of the pod exit at the next tick with this code."""
        with self.store.lock:
            pod = self._pod(namespace, name)
            run = self._run_for(pod)
            self.wake(pod)
            for c in run.containers:
                c.exit_code = exit_code
                if c.state == "running":
                    c.exit_at = time.time()
                    c.exit_plan = (exit_code, "Completed" if exit_code == 0 else "Error")
                else:
                    c.run_seconds = 0.0

    def logs(self, uid: str, container: str) -> Optional[List[str]]:
        run = self.runs.get(uid)
        if run is None:
            return None
        for c in run.containers:
            if c.name == container:
                if c.real is not None and self.runtime is not None:
                    return self.runtime.log_lines(c.real)
                return list(c.log)
        return None

    def container_waiting(self, uid: str, container: str) -> Optional[str]:
        """The waiting reason of a container that never started, else ``None``."""
        run = self.runs.get(uid)
        if run is None:
            return "ContainerCreating"
        for c in run.containers:
            if c.name == container and c.started_at is None and c.state == "waiting":
                return c.reason
        return None

    # ------------------------------------------------------------------ nodes and the taint manager

    def update_node(self, name: str, labels: Dict[str, str], taints: List[Taint], unschedulable: bool,
                    now: Optional[float] = None) -> None:
        """An admin's change of a node (``kubectl label``, ``taint``, ``cordon``/``uncordon``): pods
        not yet bound see it at the next pass; running pods a new ``NoExecute`` taint does not let
        stay are evicted (at once, or after the ``tolerationSeconds`` they tolerate it for)."""
        now = time.time() if now is None else now
        with self.store.lock:
            node = self.nodes[name]
            kept = [t for t in taints if t.key not in DERIVED_TAINTS]
            if unschedulable != node.unschedulable:
                status = "NodeNotSchedulable" if unschedulable else "NodeSchedulable"
                self.events.node(name, "Normal", status, "Node %s status is now: %s" % (name, status), now)
            if (node.labels, node.taints, node.unschedulable) == (labels, kept, unschedulable):
                return
            node.tainted_at = {t: node.tainted_at.get(t, now) for t in kept if t.effect == "NoExecute"}
            node.labels, node.taints, node.unschedulable = dict(labels), kept, unschedulable
            node.version += 1
            for pod in self.store.items("pods"):
                if pod["spec"].get("nodeName") == name:
                    self.taint_deadlines.pop(pod["metadata"]["uid"], None)
                    self._note_taint_deadline(pod, node, now)
            self._evict_tainted(now)

    def _note_taint_deadline(self, pod: JsonObj, node: NodeState, now: float) -> None:
        """When the pod must leave ``node`` for its ``NoExecute`` taints: at once for one it does not
        tolerate; for one it tolerates only for ``tolerationSeconds``, that long after the taint came
        or the pod was bound, whichever is later (the shortest of its tolerations counts)."""
        if not node.tainted_at or (pod.get("status") or {}).get("phase") in TERMINAL \
                or pod["metadata"].get("deletionTimestamp"):
            return
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        run = self.runs.get(pod["metadata"]["uid"])
        bound = run.bound_at if run is not None and run.bound_at is not None else now
        due: Optional[float] = None
        for taint, since in node.tainted_at.items():
            matching = [t for t in tolerations if _tolerates([t], taint)]
            seconds = [float(t["tolerationSeconds"]) for t in matching
                       if isinstance(t.get("tolerationSeconds"), (int, float))]
            if not matching:
                at = now
            elif len(seconds) == len(matching):  # every toleration of it is for a while only
                at = max(since, bound) + max(0.0, min(seconds))
            else:
                continue
            due = at if due is None else min(due, at)
        if due is not None:
            self.taint_deadlines[pod["metadata"]["uid"]] = due

    def _evict_tainted(self, now: float) -> None:
        """The taint manager: delete the pods whose time on a ``NoExecute``-tainted node is over
        (DisruptionTarget ``DeletionByTaintManager``, then graceful deletion with the pod's grace)."""
        for uid, due in list(self.taint_deadlines.items()):
            if due > now:
                continue
            del self.taint_deadlines[uid]
            pod = self.store.by_uid(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp") \
                    or (pod.get("status") or {}).get("phase") in TERMINAL:
                continue
            run = self._run_for(pod)
            run.disruption = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None,
                              "lastTransitionTime": now_rfc3339(now), "reason": "DeletionByTaintManager",
                              "message": "Taint manager: deleting due to NoExecute taint"}
            run.dirty = True
            self.wake(pod)
            meta = pod["metadata"]
            self.events.pod(pod, "Normal", "TaintManagerEviction", "Marking for deletion Pod %s/%s"
                            % (meta["namespace"], meta["name"]), TAINT_EVICTION, now=now)
            pod = self._flush(pod, run, now)
            self.graceful_delete(pod, int(pod["spec"].get("terminationGracePeriodSeconds", 30)), now)

    def node_objects(self) -> List[JsonObj]:
        """Node API objects (read-only view)."""
        result = []
        for node in self.nodes.values():
            capacity = {k: format_quantity(v, k in ("memory", "ephemeral-storage")) for k, v in
                        node.allocatable.items()}
            ready = "Unknown" if node.lost else "True"
            taints = list(node.taints) + ([UNSCHEDULABLE_TAINT] if node.unschedulable else []) + (
                [Taint("node.kubernetes.io/unreachable", "", "NoSchedule")] if node.lost else [])
            spec: JsonObj = {}
            if taints:  # omitted when empty, as the API server's encoding does
                spec["taints"] = [dict({"key": t.key, "effect": t.effect}, **({"value": t.value} if t.value else {}),
                                       **({"timeAdded": now_rfc3339(node.tainted_at[t])} if t in node.tainted_at
                                          else {})) for t in taints]
            if node.unschedulable:
                spec["unschedulable"] = True
            result.append({
                "metadata": {"name": node.config.name, "labels": dict(node.labels),
                             "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, node.config.name)),
                             "resourceVersion": str(node.version), "creationTimestamp": now_rfc3339(self.started)},
                "spec": spec,
                "status": {"capacity": capacity, "allocatable": dict(capacity),
                           "conditions": [{"type": "Ready", "status": ready,
                                           "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"}],
                           "addresses": [{"type": "InternalIP", "address": node.ip},
                                         {"type": "Hostname", "address": node.config.name}],
                           "nodeInfo": {"kubeletVersion": self.config.git_version,
                                        "kubeProxyVersion": self.config.git_version,
                                        "osImage": "podgahp simulated node", "kernelVersion": "sim",
                                        "containerRuntimeVersion": "containerd://sim",
                                        "operatingSystem": "linux", "architecture": "amd64",
                                        "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, node.config.name).hex,
                                        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, node.config.name)),
                                        "bootID": str(uuid.uuid5(uuid.NAMESPACE_OID, node.config.name))}},
            })
        return result
