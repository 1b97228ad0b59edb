"""The simulator's kubelet as a node of any Kubernetes API server (``podgahp sim node``).

It registers its Node (capacity, allocatable, conditions, addresses, ``daemonEndpoints``), renews its
Lease in ``kube-node-lease`` and posts its status every ``heartbeat_seconds``, as a kubelet does; runs
the pods the API server's scheduler binds to it; writes their status through ``pods/status``; forwards
the Events its kubelet records; serves the kubelet's log endpoint (:mod:`.kubeletapi`); and finishes a
graceful deletion as a kubelet does: SIGTERM, the grace period, SIGKILL, the terminal status, then the
final delete with ``gracePeriodSeconds=0``.

The kubelet is the simulated cluster's own (:class:`podgahp_sim.k8s.cluster.Cluster`, modelled or
runc containers), run over a local mirror of this node's pods and of the Secrets and ConfigMaps they
use: the mirror is fed by a watch of the API server; what the kubelet writes of a pod's status goes
back through ``pods/status``. The mirror's scheduler never runs (every mirrored pod is bound here)
and its garbage collector touches only the mirror.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Set, Tuple

from ..k8s.cluster import Cluster
from ..k8s.config import SimConfig, SimNode, Taint
from ..k8s.runc import RuncRuntime
from ..k8s.store import Expired, JsonObj, Store, json_copy, now_rfc3339
from ..k8s.volumes import Identity
from .client import ApiError, Client, Kubeconfig
from .kubeletapi import KubeletServer

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
MIRRORED_KINDS = ("secrets", "configmaps")
WATCH_SECONDS = 5
#: How often the Secrets and ConfigMaps that pods here name but the mirror lacks are read again (a
#: pilot's input Secret is made just after its pod), between the full reads of ``sync_seconds``.
MISSING_SECONDS = 1.0


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name, what it offers, how its containers run."""

    name: str
    cpus: str = "4"
    memory: str = "16Gi"
    gpus: int = 0
    pods: int = 110
    runtime: str = "model"
    """``model`` (containers simulated from their ``PODGAHP_SIM_*`` variables) or ``runc``."""
    images: Mapping[str, str] = field(default_factory=dict)
    runtime_dir: str = "/var/lib/podgahp-sim"
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels of the Node besides ``kubernetes.io/hostname``, ``kubernetes.io/os`` and ``kubernetes.io/arch``."""
    taints: Tuple[Taint, ...] = ()
    """The Node's taints as it registers (``--register-with-taints``)."""
    heartbeat_seconds: float = 10.0
    """How often the Lease is renewed and the Node's status posted."""
    lease_seconds: int = 40
    tick_seconds: float = 0.1
    run_seconds: float = 2.0
    """How long a modelled container runs unless its ``PODGAHP_SIM_RUN_SECONDS`` says otherwise."""
    container_create_seconds: float = 0.2
    """From a pod's arrival to its containers' start (image pull included), modelled containers."""
    sigterm_exit_seconds: float = 1.0
    """How long a modelled container takes to exit after SIGTERM."""
    sync_seconds: float = 5.0
    """How often the Secrets and ConfigMaps of running pods are read again (their volumes follow)."""
    event_log_size: int = 1000
    """Changes of each kind the node's own store keeps (its kubelet's Events among them): a pass that
    records more Events than that forwards the newest ones and drops the others, as a kubelet's event
    recorder drops what is over its rate."""


def references(pod: JsonObj) -> Set[Tuple[str, str]]:
    """The (resource, name) of every Secret and ConfigMap a pod's containers and volumes name."""
    found: Set[Tuple[str, str]] = set()
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for var in c.get("env") or []:
            source = var.get("valueFrom") or {}
            if (source.get("secretKeyRef") or {}).get("name"):
                found.add(("secrets", source["secretKeyRef"]["name"]))
            if (source.get("configMapKeyRef") or {}).get("name"):
                found.add(("configmaps", source["configMapKeyRef"]["name"]))
        for each in c.get("envFrom") or []:
            if (each.get("secretRef") or {}).get("name"):
                found.add(("secrets", each["secretRef"]["name"]))
            if (each.get("configMapRef") or {}).get("name"):
                found.add(("configmaps", each["configMapRef"]["name"]))
    for volume in spec.get("volumes") or []:
        if (volume.get("secret") or {}).get("secretName"):
            found.add(("secrets", volume["secret"]["secretName"]))
        if (volume.get("configMap") or {}).get("name"):
            found.add(("configmaps", volume["configMap"]["name"]))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if (source.get("secret") or {}).get("name"):
                found.add(("secrets", source["secret"]["name"]))
            if (source.get("configMap") or {}).get("name"):
                found.add(("configmaps", source["configMap"]["name"]))
    return found


class NodeAgent:
    """Start with :meth:`start`, stop with :meth:`stop` (its pods' containers are killed; the Node stays,
    as a stopped kubelet's does, and the node lifecycle controller marks it not ready)."""

    def __init__(self, kubeconfig: Kubeconfig, spec: NodeSpec, client_ca_pem: Optional[bytes] = None) -> None:
        self.spec = spec
        self.api = Client(kubeconfig)
        self.kubeconfig = kubeconfig
        config = SimConfig(nodes=(SimNode(spec.name, cpu=spec.cpus, memory=spec.memory, gpus=spec.gpus,
                                          pods=spec.pods, labels=dict(spec.labels), taints=spec.taints),),
                           tick_seconds=spec.tick_seconds, runtime=spec.runtime, images=dict(spec.images),
                           runtime_dir=spec.runtime_dir, gc_seconds=3600.0, run_seconds=spec.run_seconds,
                           container_create_seconds=spec.container_create_seconds,
                           sigterm_exit_seconds=spec.sigterm_exit_seconds, event_log_size=spec.event_log_size)
        self.store = Store(config.event_log_size)
        self.cluster = Cluster(self.store, config)
        self.cluster.nodes[spec.name].ip = "127.0.0.1"
        self.config = config
        self.kubelet_api = KubeletServer(self._logs, client_ca_pem)
        self.runtime: Optional[RuncRuntime] = None
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._remote: Dict[str, JsonObj] = {}
        """uid -> the pod as the API server last sent it (under the store's lock, as the mirror)."""
        self._pushed: Dict[str, JsonObj] = {}
        """uid -> the status last written through pods/status (under the store's lock)."""
        self._event_cursor = 0
        self._remote_events: Dict[Tuple[str, str], str] = {}
        """(namespace, local event name) -> the Event's name on the API server."""
        self._synced_at = 0.0
        self._missing_at = 0.0
        self._tokens: Dict[Tuple[str, str], str] = {}
        self.registered = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "NodeAgent":
        if self.spec.runtime == "runc":
            host, port = _host_port(self.kubeconfig.server)
            runtime = RuncRuntime(self.config.runtime_dir, self.config.images, self.store.get,
                                  Identity(token=self._token, ca_pem=self.kubeconfig.ca_pem), (host, port),
                                  pids_limit=self.config.pids_limit, log_max_bytes=self.config.container_log_max_bytes)
            runtime.start()
            self.runtime = runtime
            self.cluster.attach_runtime(runtime)
        self.kubelet_api.start()
        self._register()
        for target, name in ((self._heartbeat, "heartbeat"), (self._watch_pods, "pods"), (self._loop, "kubelet")):
            thread = threading.Thread(target=target, name="sim-node-" + name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self.kubelet_api.stop()
        if self.runtime is not None:
            self.runtime.stop()
            self.runtime = None

    # ------------------------------------------------------------------ the Node and its Lease

    def _node_status(self) -> JsonObj:
        node = self.cluster.nodes[self.spec.name]
        allocatable = {"cpu": self.spec.cpus, "memory": self.spec.memory, "pods": str(self.spec.pods),
                       "ephemeral-storage": node.config.ephemeral_storage}
        if self.spec.gpus:
            allocatable["nvidia.com/gpu"] = str(self.spec.gpus)
        now = now_rfc3339()

        def condition(ctype: str, status: str, reason: str, message: str) -> JsonObj:
            return {"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastHeartbeatTime": now, "lastTransitionTime": self._started}
        return {
            "capacity": dict(allocatable), "allocatable": allocatable,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": self.spec.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_api.port}},
            "nodeInfo": {"machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.spec.name).hex, "systemUUID": "",
                         "bootID": self._boot, "kernelVersion": platform.release(), "osImage": "podgahp-sim",
                         "containerRuntimeVersion": "podgahp-sim://" + self.spec.runtime,
                         "kubeletVersion": "v0.0.0-podgahp-sim", "kubeProxyVersion": "v0.0.0-podgahp-sim",
                         "operatingSystem": "linux", "architecture": "amd64"},
        }

    def _register(self) -> None:
        self._started = now_rfc3339()
        self._boot = str(uuid.uuid4())
        labels = dict(self.cluster.nodes[self.spec.name].labels)
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in self.spec.taints]
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.spec.name, "labels": labels},
                "spec": {"taints": taints} if taints else {}, "status": self._node_status()}
        try:
            self.api.call("POST", "/api/v1/nodes", body)
        except ApiError as e:
            if e.status != 409:
                raise
        self._post_status()
        self._renew_lease()
        self.registered.set()
        log.info("node %s registered, kubelet endpoint 127.0.0.1:%d", self.spec.name, self.kubelet_api.port)

    def _post_status(self) -> None:
        self.api.call("PATCH", "/api/v1/nodes/%s/status" % self.spec.name, {"status": self._node_status()},
                      content_type="application/strategic-merge-patch+json")

    def _renew_lease(self) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NODE_LEASE_NAMESPACE
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        spec = {"holderIdentity": self.spec.name, "leaseDurationSeconds": self.spec.lease_seconds, "renewTime": now}
        try:
            self.api.call("PATCH", "%s/%s" % (path, self.spec.name), {"spec": spec},
                          content_type="application/merge-patch+json")
        except ApiError as e:
            if e.status != 404:
                raise
            self.api.call("POST", path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                         "metadata": {"name": self.spec.name, "namespace": NODE_LEASE_NAMESPACE},
                                         "spec": spec})

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.spec.heartbeat_seconds):
            try:
                self._renew_lease()
                self._post_status()
            except (ApiError, OSError) as e:
                log.warning("node %s: heartbeat failed: %s", self.spec.name, e)

    # ------------------------------------------------------------------ the pods bound here

    def _watch_pods(self) -> None:
        path = "/api/v1/pods"
        selector = {"fieldSelector": "spec.nodeName=" + self.spec.name}
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    listed = self.api.get(path, selector)
                    version = str((listed.get("metadata") or {}).get("resourceVersion") or "")
                    self._replace_all([dict(p) for p in listed.get("items") or []])
                # short watches, resumed from where they ended: a stop waits for one at most
                for event in self.api.watch(path, dict(selector, resourceVersion=version, allowWatchBookmarks="true"),
                                            timeout=WATCH_SECONDS):
                    if self._stop.is_set():
                        return
                    obj = dict(event.get("object") or {})
                    if event.get("type") == "ERROR":
                        version = ""  # expired: list again
                        break
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._mirror(obj)
                    elif event.get("type") == "DELETED":
                        self._unmirror(obj)
            except (ApiError, OSError, ValueError) as e:
                if self._stop.is_set():
                    return
                log.warning("node %s: pod watch: %s", self.spec.name, e)
                version = ""
                self._stop.wait(1.0)

    def _replace_all(self, pods: List[JsonObj]) -> None:
        uids = {p["metadata"]["uid"] for p in pods}
        with self.store.lock:
            for local in self.store.items("pods"):
                if local["metadata"]["uid"] not in uids:
                    self._unmirror(local)
        for pod in pods:
            self._mirror(pod)

    def _mirror(self, pod: JsonObj) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        for resource, name in sorted(references(pod)):
            if self.store.get(resource, meta["namespace"], name) is None:
                self._fetch(resource, meta["namespace"], name)
        with self.store.lock:
            self._remote[uid] = pod
            local = self.store.get("pods", meta["namespace"], meta["name"])
            if local is not None and local["metadata"]["uid"] != uid:
                self.store.delete("pods", meta["namespace"], meta["name"])
                local = None
            if local is None:
                copy = json_copy(pod)
                self.store.create("pods", copy)
                self._pushed.setdefault(uid, json_copy(pod.get("status") or {}))
                return
            merged = json_copy(pod)
            merged["status"] = json_copy(local.get("status") or {})
            merged["metadata"]["resourceVersion"] = local["metadata"]["resourceVersion"]
            if merged["metadata"] != local["metadata"] or merged.get("spec") != local.get("spec"):
                self.store.update("pods", merged)

    def _unmirror(self, pod: JsonObj) -> None:
        meta = pod["metadata"]
        with self.store.lock:
            local = self.store.get("pods", meta["namespace"], meta["name"])
            if local is not None and local["metadata"]["uid"] == meta.get("uid"):
                self.store.delete("pods", meta["namespace"], meta["name"])
            self._remote.pop(str(meta.get("uid")), None)
            self._pushed.pop(str(meta.get("uid")), None)

    def _fetch(self, resource: str, namespace: str, name: str) -> None:
        """Mirror one Secret or ConfigMap (removed from the mirror when the API server has it no longer)."""
        try:
            obj = self.api.get("/api/v1/namespaces/%s/%s/%s" % (namespace, resource, name))
        except ApiError as e:
            if e.status == 404:
                with self.store.lock:
                    self.store.delete(resource, namespace, name)
                return
            log.warning("node %s: read %s %s/%s: %s", self.spec.name, resource, namespace, name, e)
            return
        except OSError as e:
            log.warning("node %s: read %s %s/%s: %s", self.spec.name, resource, namespace, name, e)
            return
        obj["metadata"] = {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())}
        with self.store.lock:
            current = self.store.get(resource, namespace, name)
            if current is None:
                self.store.create(resource, obj)
            elif {k: v for k, v in current.items() if k != "metadata"} != {k: v for k, v in obj.items() if k != "metadata"}:
                obj["metadata"]["uid"] = current["metadata"]["uid"]
                self.store.update(resource, obj)

    def _token(self, namespace: str, account: str) -> str:
        """A token of a pod's service account, through the TokenRequest API (the node may ask for its pods')."""
        key = (namespace, account)
        if key not in self._tokens:
            try:
                answer = self.api.call("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % key,
                                       {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                        "spec": {"audiences": [], "expirationSeconds": 86400}})
                self._tokens[key] = str((answer.get("status") or {}).get("token") or "")
            except (ApiError, OSError) as e:
                log.warning("node %s: no token for %s/%s: %s", self.spec.name, namespace, account, e)
                return ""
        return self._tokens[key]

    # ------------------------------------------------------------------ the kubelet loop

    def _loop(self) -> None:
        while not self._stop.wait(self.spec.tick_seconds):
            try:
                self.cluster.tick()
                # Events first: whoever sees a pod's new status finds the Events that came with it
                self._push_events()
                self._push_statuses()
                if time.monotonic() - self._synced_at >= self.spec.sync_seconds:
                    self._synced_at = time.monotonic()
                    self._sync_objects()
                elif time.monotonic() - self._missing_at >= MISSING_SECONDS:
                    self._missing_at = time.monotonic()
                    self._fetch_missing()
            except Exception:  # keep running the node; the failure is logged with its traceback
                log.exception("node %s: kubelet pass failed", self.spec.name)

    def _push_statuses(self) -> None:
        with self.store.lock:
            local = {p["metadata"]["uid"]: p for p in self.store.items("pods")}
            todo = [(uid, p["metadata"]["namespace"], p["metadata"]["name"], json_copy(p.get("status") or {}))
                    for uid, p in local.items() if p.get("status") != self._pushed.get(uid)]
            gone = [(uid, pod) for uid, pod in self._remote.items() if uid not in local]
        for uid, namespace, name, status in todo:
            try:
                self.api.call("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (namespace, name),
                              {"metadata": {"uid": uid}, "status": status},
                              content_type="application/merge-patch+json")
                with self.store.lock:
                    self._pushed[uid] = status
            except ApiError as e:
                if e.status in (404, 409, 422):  # gone, or another pod of that name: the watch tells
                    with self.store.lock:
                        self._pushed[uid] = status
                else:
                    log.warning("node %s: status of pod %s/%s: %s", self.spec.name, namespace, name, e)
        for uid, pod in gone:
            # the kubelet removed a pod whose deletion it finished: the final delete, as a kubelet's
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                try:
                    self.api.call("DELETE", "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"]),
                                  {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                                   "preconditions": {"uid": uid}})
                except ApiError as e:
                    if e.status not in (404, 409):
                        log.warning("node %s: final delete of %s/%s: %s", self.spec.name, meta["namespace"],
                                    meta["name"], e)
                        continue
            with self.store.lock:
                self._remote.pop(uid, None)
                self._pushed.pop(uid, None)

    def _push_events(self) -> None:
        with self.store.lock:
            try:
                changes = self.store.events_after("events", self._event_cursor)
            except Expired:
                # More Events since the last pass than the log holds (a burst of pods bound here): the
                # ones still in it are forwarded, the older are dropped. Left unanswered, the same
                # expiry stopped every later pass, and with it every status this node writes.
                changes = list(self.store.logs.get("events", ()))
                log.warning("node %s: more Events in one pass than its log holds (%d); the older ones are not "
                            "recorded", self.spec.name, self.store.log_size)
            self._event_cursor = self.store.rv
        for change in changes:
            event = change.obj
            namespace, name = event["metadata"]["namespace"], event["metadata"]["name"]
            key = (namespace, name)
            try:
                if change.type == "ADDED":
                    body = {k: v for k, v in event.items() if k not in ("metadata", "eventTime")}
                    body["involvedObject"] = {k: v for k, v in event["involvedObject"].items() if k != "resourceVersion"}
                    # named as a kubelet names its Events: <object>.<hex nanoseconds>
                    body["metadata"] = {"name": name, "namespace": namespace}
                    made = self.api.call("POST", "/api/v1/namespaces/%s/events" % namespace, body)
                    self._remote_events[key] = str(made["metadata"]["name"])
                elif change.type == "MODIFIED" and key in self._remote_events:
                    self.api.call("PATCH", "/api/v1/namespaces/%s/events/%s" % (namespace, self._remote_events[key]),
                                  {"count": event.get("count"), "lastTimestamp": event.get("lastTimestamp")},
                                  content_type="application/merge-patch+json")
                elif change.type == "DELETED":
                    self._remote_events.pop(key, None)
            except ApiError as e:
                log.info("node %s: event %s/%s not recorded: %s", self.spec.name, namespace, name, e)

    def _wanted(self) -> Set[Tuple[str, str, str]]:
        """(resource, namespace, name) of every Secret and ConfigMap the pods here name; caller holds
        the store's lock."""
        return {(resource, p["metadata"]["namespace"], name)
                for p in self.store.items("pods") for resource, name in references(p)}

    def _fetch_missing(self) -> None:
        """Read the Secrets and ConfigMaps named by pods here that the mirror does not hold yet: a pod
        waits for its volume about a second, not ``sync_seconds`` (which read every one of them)."""
        with self.store.lock:
            missing = [key for key in self._wanted() if self.store.get(*key) is None]
        for resource, namespace, name in sorted(missing):
            self._fetch(resource, namespace, name)

    def _sync_objects(self) -> None:
        with self.store.lock:
            wanted = self._wanted()
            held = {(r, o["metadata"]["namespace"], o["metadata"]["name"])
                    for r in MIRRORED_KINDS for o in self.store.items(r)}
        for resource, namespace, name in sorted(wanted):
            self._fetch(resource, namespace, name)
        with self.store.lock:
            for resource, namespace, name in held - wanted:
                self.store.delete(resource, namespace, name)

    def has_pod(self, namespace: str, name: str) -> bool:
        """Whether the pod has reached this node (its mirror)."""
        with self.store.lock:
            return self.store.get("pods", namespace, name) is not None

    def _logs(self, namespace: str, pod: str, container: str) -> "Optional[Tuple[List[str], bool] | str]":
        with self.store.lock:
            local = self.store.get("pods", namespace, pod)
            if local is None:
                # the API server asks for the pods bound here only: one the watch has not brought yet
                return "ContainerCreating"
            uid = local["metadata"]["uid"]
            waiting = self.cluster.container_waiting(uid, container)
            if waiting:
                return waiting
            lines = self.cluster.logs(uid, container)
            if lines is None:
                return None
            run = self.cluster.runs.get(uid)
            ended = run is not None and all(c.state == "terminated" for c in run.containers if c.name == container)
            return lines, ended


def _host_port(server: str) -> Tuple[str, int]:
    rest = server.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    return host.strip("[]") or rest, int(port or 443)

