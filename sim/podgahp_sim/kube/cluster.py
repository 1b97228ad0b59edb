"""A cluster made of a real control plane (:mod:`.controlplane`) and simulated nodes (:mod:`.node`) in
this process: what ``podgahp sim k8s --control-plane DIR`` runs, and what the tests run the Kubernetes
backend and the simulator-fidelity tests against besides the simulated API server.

Owns the nodes' lifecycle around the control plane's, namespaces made ready for pods (the
controller-manager has made their ``default`` ServiceAccount), and :func:`serve`. Offers the reads of
``KubeSim`` (pods, logs, the request log of pod and Secret creations and deletions) over the real API
server, and the hand of the nodes' kubelet (a container exits, an image is pushed to its registry).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .client import ApiError, Client, read_kubeconfig
from .controlplane import ControlPlane, Request
from .node import NodeAgent, NodeSpec

log = logging.getLogger(__name__)


class KubeCluster:
    """A control plane from ``binaries`` with ``nodes``; start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, binaries: Path, nodes: Sequence[NodeSpec], base: Optional[Path] = None) -> None:
        self.plane = ControlPlane(binaries, base)
        self.node_specs = list(nodes)
        self.nodes: List[NodeAgent] = []
        self._admin: Optional[Client] = None

    @property
    def url(self) -> str:
        return self.plane.url

    @property
    def admin(self) -> Client:
        if self._admin is None:
            self._admin = Client(read_kubeconfig(str(self.plane.admin_kubeconfig)))
        return self._admin

    def start(self, timeout: float = 180.0) -> "KubeCluster":
        deadline = time.monotonic() + timeout
        self.plane.start(timeout)
        try:
            for spec in self.node_specs:
                kubeconfig = read_kubeconfig(str(self.plane.node_kubeconfig(spec.name)))
                self.nodes.append(NodeAgent(kubeconfig, spec, client_ca_pem=self.plane.ca_pem).start())
            self.wait(lambda: self._nodes_ready(), deadline, "every node Ready")
        except BaseException:
            self.stop()
            raise
        return self

    def _nodes_ready(self) -> bool:
        items = self.admin.get("/api/v1/nodes").get("items") or []
        ready = {n["metadata"]["name"] for n in items
                 if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions") or [])}
        return all(spec.name in ready for spec in self.node_specs)

    def wait(self, ready: Callable[[], bool], deadline: float, what: str) -> None:
        while not ready():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what}: not within the time given; logs in {self.plane.path('logs')}")
            time.sleep(0.1)

    def add_namespace(self, name: str, labels: Optional[Mapping[str, str]] = None, timeout: float = 60.0) -> None:
        """Make namespace ``name`` (if new) and wait until pods can be made in it."""
        try:
            self.admin.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": name, "labels": dict(labels or {})}})
        except ApiError as e:
            if e.status != 409:
                raise
        self.wait(lambda: self._has_default_account(name), time.monotonic() + timeout,
                  f"the default ServiceAccount of namespace {name}")

    def _has_default_account(self, namespace: str) -> bool:
        try:
            self.admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            return True
        except ApiError:
            return False

    def delete_namespace(self, name: str) -> None:
        try:
            self.admin.call("DELETE", f"/api/v1/namespaces/{name}", {"propagationPolicy": "Background"})
        except ApiError as e:
            if e.status != 404:
                raise

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        self.plane.kubeconfig(Path(path), namespace=namespace)
        return path

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes.clear()
        self.plane.stop()

    def __enter__(self) -> "KubeCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def describe(self) -> Dict[str, Any]:
        return dict(self.plane.describe(), nodes=[n.spec.name for n in self.nodes])

    # ------------------------------------------------------------------ KubeSim's reads and hand

    def pod(self, namespace: str, name: str) -> Optional[Dict[str, Any]]:
        try:
            return self.admin.get("/api/v1/namespaces/%s/pods/%s" % (namespace, name))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pods(self, namespace: str) -> List[Dict[str, Any]]:
        listed = self.admin.get("/api/v1/namespaces/%s/pods" % namespace)
        return sorted(listed.get("items") or [], key=lambda p: str(p["metadata"]["name"]))

    def logs(self, namespace: str, name: str, container: Optional[str] = None) -> List[str]:
        """What the container printed so far (through the API server's log proxy to its node); nothing
        for a pod the server no longer has, as ``KubeSim.logs``."""
        query = {"container": container} if container else None
        try:
            return self.admin.text("/api/v1/namespaces/%s/pods/%s/log" % (namespace, name), query).splitlines()
        except ApiError as e:
            if e.status == 404 and self.pod(namespace, name) is None:
                return []
            raise

    def requests(self, method: Optional[str] = None, path: Optional[str] = None, since: int = 0) -> List[Request]:
        """The pod and Secret creations and deletions served so far (:meth:`ControlPlane.requests`)."""
        return self.plane.requests(method, path, since)

    def exit_pod(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """Make the pod's containers exit now (or as soon as they start) with ``exit_code``: on the node
        it is bound to (modelled containers)."""
        pod = self.pod(namespace, name)
        node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        agents = [a for a in self.nodes if a.spec.name == node]
        if not agents:
            raise KeyError("pod %s/%s is on no node of this cluster (%r)" % (namespace, name, node))
        agent = agents[0]
        self.wait(lambda: agent.has_pod(namespace, name), time.monotonic() + 30,
                  "pod %s/%s on node %s" % (namespace, name, node))
        agent.cluster.exit_now(namespace, name, exit_code)

    def publish_image(self, image: str) -> None:
        """Push ``image`` to its registry: every node pulls it from now on (modelled containers)."""
        for agent in self.nodes:
            agent.cluster.publish_image(image)


def serve(binaries: str, kubeconfig_path: str, namespace: str = "default", namespaces: Sequence[str] = (),
          nodes: Sequence[NodeSpec] = (), ready: Optional[Callable[[KubeCluster], None]] = None,
          stop: Optional[threading.Event] = None) -> None:
    """Run a control plane from ``binaries`` with ``nodes`` until SIGINT/SIGTERM (or ``stop``), the
    admin kubeconfig (context namespace ``namespace``) at ``kubeconfig_path``."""
    done = stop or threading.Event()
    handlers: Dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, lambda *_: done.set())
    try:
        with KubeCluster(Path(binaries), nodes) as cluster:
            for name in dict.fromkeys([namespace, *namespaces]):
                cluster.add_namespace(name)
            cluster.write_kubeconfig(kubeconfig_path, namespace=namespace)
            os.chmod(kubeconfig_path, 0o600)
            log.info("control plane %s", json.dumps(cluster.describe()))
            if ready is not None:
                ready(cluster)
            while not done.wait(0.5):
                pass
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
