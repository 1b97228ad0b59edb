"""Simulated Kubernetes API server for tests and demos: a stateful HTTPS server speaking the pod,
secret, namespace, node, priority-class and self-subject-access-review REST surface of the official
``kubernetes`` Python client, with a scheduler and kubelet simulation behind it.

Owns :class:`KubeSim` (server lifecycle, kubeconfig, state access, fault injection, driver actions,
request log) and :func:`serve` (the blocking entry point of ``podgahp sim k8s``).  The pieces live in
:mod:`podgahp_sim.k8s`.  It must not import ``gahp.backends`` or the ``kubernetes`` client: code under
test reaches it only over HTTP, through a kubeconfig written by :meth:`KubeSim.write_kubeconfig`.

It serves HTTPS by default, with a CA of its own (:mod:`podgahp_sim.k8s.tls`), and authenticates a
request by the bearer token or by a client certificate that CA signed; the kubeconfig carries the CA
(``certificate-authority-data``), and :meth:`KubeSim.write_service_account` lays out the in-cluster
service-account directory.  ``tls=False`` serves plain HTTP.  ConfigMaps, ServiceAccounts, Roles,
RoleBindings and Deployments are stored (no controllers) so that manifests apply with kubectl; a
service account's token (:meth:`KubeSim.service_account_token`) is authorized by the Roles bound to it.

Simulated container behaviour is configured by env vars (``value`` only) of each container:

* ``PODGAHP_SIM_RUN_SECONDS`` - seconds it runs before exiting (default ``SimConfig.run_seconds``, 2)
* ``PODGAHP_SIM_EXIT_CODE`` - exit code when it exits on its own (default 0; non-zero -> ``Error``)
* ``PODGAHP_SIM_MEMORY_MIB`` - memory it uses; above its memory limit it is ``OOMKilled`` (137)
  0.5 s after start (or at its exit, if sooner)
* ``PODGAHP_SIM_LOG`` - text it prints after its start line
* ``PODGAHP_SIM_SIGTERM_SECONDS`` - seconds from SIGTERM to exit (default ``SimConfig.sigterm_exit_seconds``,
  1); longer than the grace period -> SIGKILL at its end (137)
* ``PODGAHP_SIM_SIGTERM_EXIT_CODE`` - exit code after SIGTERM (default ``SimConfig.sigterm_exit_code``, 143)

Every container first prints ``podgahp-sim: pod <ns>/<name> container <c> on node <node>:
command=<json> args=<json>`` and on exit ``podgahp-sim: container <c> exited with code <n> (<reason>)``;
``GET .../pods/<name>/log`` returns those lines.

Real containers: ``KubeSim(runtime="runc", images={"pilot:1": "/rootfs"})`` (or ``SimConfig.runtime``)
runs every container through runc from a bundle made of its pod spec (:mod:`podgahp_sim.k8s.runc`):
real processes, exit codes, cgroup limits and OOM kills, signals on deletion, volumes and logs; the
images are those of ``images`` only, and the ``PODGAHP_SIM_*`` variables mean nothing.  Scheduling,
GPUs, image pulls and pod networking stay modelled (containers share the host's network).

Image pulls: every valid reference is pullable except names containing ``does-not-exist``
(``ErrImagePull`` / ``ImagePullBackOff``), unless ``SimConfig.pullable_images`` lists the only
pullable images; invalid references give ``InvalidImageName``.

Documented simplifications: init containers are stored but not run; strategic merge patch merges the
lists named in ``podgahp_sim.k8s.patch.MERGE_KEYS`` by key and replaces the others; ``resourceVersion``
on list is ignored (always the latest state); quantity syntax errors are 400 as on a real server
(the body cannot be decoded), not 422; RBAC 403s for create name no object (the name is not known
at authorization time); status written through ``/status`` stays until the kubelet's next
transition of that pod overwrites it.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import logging
import os
import re
import secrets
import signal
import ssl
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import yaml

from .cluster import SIM_ENV, Cluster
from .config import PodLimitRange, PodQuota, RbacRule, SimConfig, SimNode, Taint
from .http import Api, Fault, RequestRecord, Server, make_server
from .runc import RuncRuntime, RuntimeUnavailable
from .store import JsonObj, Store
from .tls import ClientCert, ClusterCa
from .volumes import Identity

__all__ = ["KubeSim", "SimConfig", "SimNode", "Taint", "RbacRule", "PodQuota", "PodLimitRange", "RequestRecord", "Fault",
           "SIM_ENV", "RuntimeUnavailable", "serve"]

log = logging.getLogger(__name__)


class PodWaits:
    """Waits on a pod, for any class with ``pod(namespace, name)`` and ``wait_for(predicate, timeout,
    what)``: the simulator, and the tests' view of the real control plane."""

    def pod(self, namespace: str, name: str) -> Optional[JsonObj]:
        raise NotImplementedError

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        raise NotImplementedError

    def wait_for_pod(self, namespace: str, name: str, predicate: Callable[[Optional[JsonObj]], bool],
                     timeout: float = 10.0) -> Optional[JsonObj]:
        """Wait until ``predicate(pod or None)`` holds; returns that pod (``None`` if it is gone)."""
        box: Dict[str, Optional[JsonObj]] = {}

        def check() -> bool:
            box["pod"] = self.pod(namespace, name)
            return bool(predicate(box["pod"]))
        self.wait_for(check, timeout, "pod %s/%s condition" % (namespace, name))
        return box.get("pod")

    def wait_for_phase(self, namespace: str, name: str, *phases: str, timeout: float = 10.0) -> JsonObj:
        pod = self.wait_for_pod(namespace, name,
                                lambda p: p is not None and (p.get("status") or {}).get("phase") in phases, timeout)
        assert pod is not None
        return pod


class KubeSim(PodWaits):
    """A simulated API server on ``127.0.0.1`` (port 0 by default) with its cluster loop.

    Use as a context manager or call :meth:`start` / :meth:`stop`.  All methods are thread-safe.
    """

    def __init__(self, config: Optional[SimConfig] = None, host: str = "127.0.0.1", port: int = 0,
                 tls: bool = True, runtime: Optional[str] = None, images: Optional[Mapping[str, str]] = None) -> None:
        """``tls``: serve HTTPS with a CA of its own (as every real API server does); ``False``
        serves plain HTTP, which clients must be told to accept for a bearer token.  ``runtime``
        and ``images`` override :attr:`SimConfig.runtime` and :attr:`SimConfig.images`."""
        config = config or SimConfig()
        if runtime is not None:
            config = _replace(config, runtime=runtime)
        if images is not None:
            config = _replace(config, images=dict(images))
        if config.runtime not in ("model", "runc"):
            raise ValueError("runtime must be 'model' or 'runc', not %r" % config.runtime)
        self.config = config
        self.ca: Optional[ClusterCa] = ClusterCa(_cert_hosts(host)) if tls else None
        self.store = Store(self.config.event_log_size)
        self.cluster = Cluster(self.store, self.config)
        self.api = Api(self.store, self.cluster, self.config)
        self._host = host
        self._port = port
        self._server: Optional[Server] = None
        self._threads: List[threading.Thread] = []
        self._stopping = threading.Event()
        self._tokens: Dict[Tuple[str, str], str] = {}
        self.runtime: Optional[RuncRuntime] = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "KubeSim":
        """Bind, start serving and ticking; returns once requests are accepted.  With the runc
        runtime, first removes what stopped simulators left (:class:`RuntimeUnavailable` if this
        machine cannot run containers)."""
        if self._server is not None:
            return self
        self._server = make_server(self.api, self._host, self._port,
                                   self.ca.context if self.ca is not None else None)
        if self.config.runtime == "runc":
            try:
                self._start_runtime()
            except BaseException:
                self._server.server_close()
                self._server = None
                raise
        self._stopping.clear()
        self.store.closed = False
        serve_thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="k8s-sim-http", daemon=True)
        tick_thread = threading.Thread(target=self._loop, name="k8s-sim-cluster", daemon=True)
        self._threads = [serve_thread, tick_thread]
        for thread in self._threads:
            thread.start()
        return self

    def _start_runtime(self) -> None:
        identity = Identity(token=self._pod_token, ca_pem=self.ca.ca_pem if self.ca is not None else b"")
        runtime = RuncRuntime(self.config.runtime_dir, self.config.images, self.store.get, identity,
                              (self._host, self.port), pids_limit=self.config.pids_limit,
                              log_max_bytes=self.config.container_log_max_bytes)
        runtime.start()
        self.runtime = runtime
        self.cluster.attach_runtime(runtime)

    def _pod_token(self, namespace: str, account: str) -> str:
        """The token of a service account as a pod's projected volume carries it (one per account)."""
        key = (namespace, account)
        if key not in self._tokens:
            self._tokens[key] = self.service_account_token(namespace, account)
        return self._tokens[key]

    def stop(self) -> None:
        """Stop the loop and the server; open watch streams end.  Real containers are killed and
        everything of them removed."""
        if self._server is None:
            return
        self._stopping.set()
        self.store.close()
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        for thread in self._threads:
            thread.join(timeout=5)
        self._server = None
        if self.runtime is not None:
            self.runtime.stop()
            self.runtime = None

    def __enter__(self) -> "KubeSim":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stopping.wait(self.config.tick_seconds):
            try:
                self.cluster.tick()
            except Exception:  # keep simulating; the failure is logged with its traceback
                log.exception("simulated cluster tick failed")

    def tick(self) -> None:
        """Run one scheduler/kubelet pass now (in addition to the background loop)."""
        self.cluster.tick()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulated API server is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self.ca is not None else "http"
        host = "[%s]" % self._host if ":" in self._host else self._host
        return "%s://%s:%d" % (scheme, host, self.port)

    @property
    def ca_pem(self) -> bytes:
        """The cluster CA certificate (PEM); the server's certificate is valid for its host."""
        if self.ca is None:
            raise RuntimeError("the simulated API server runs without TLS")
        return self.ca.ca_pem

    def client_context(self) -> Optional[ssl.SSLContext]:
        """An ``SSLContext`` that trusts this server (for raw HTTP clients); ``None`` without TLS."""
        if self.ca is None:
            return None
        return ssl.create_default_context(cadata=self.ca.ca_pem.decode("ascii"))

    def client_cert(self, user: str = "podgahp", groups: Tuple[str, ...] = ()) -> ClientCert:
        """A client certificate signed by the cluster CA; the server authenticates it as ``user``."""
        if self.ca is None:
            raise RuntimeError("client certificates need TLS")
        return self.ca.client_cert(user, groups)

    def write_kubeconfig(self, path: str, namespace: str = "default", context_name: str = "podgahp-sim",
                         token: Optional[str] = None, client_cert: bool = False) -> str:
        """Write a kubeconfig for this server and return ``path``.

        With TLS the cluster entry carries ``certificate-authority-data``; the user authenticates with
        the bearer token, or with a client certificate when ``client_cert`` is true.  ``token``
        overrides the accepted token (e.g. a wrong one to provoke 401s)."""
        cluster: Dict[str, Any] = {"server": self.url}
        if self.ca is not None:
            cluster["certificate-authority-data"] = _b64(self.ca.ca_pem)
        user: Dict[str, Any]
        if client_cert:
            cert = self.client_cert()
            user = {"client-certificate-data": _b64(cert.cert_pem), "client-key-data": _b64(cert.key_pem)}
        else:
            user = {"token": token if token is not None else (self.api.token or "unused")}
        doc = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": context_name, "cluster": cluster}],
            "users": [{"name": context_name, "user": user}],
            "contexts": [{"name": context_name,
                          "context": {"cluster": context_name, "user": context_name, "namespace": namespace}}],
            "current-context": context_name,
        }
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(doc, f, default_flow_style=False)
        return path

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token for service account ``namespace/name``: its requests are authorized by the Roles
        that RoleBindings in their namespace bind to it (and nothing else)."""
        token = "sa-" + secrets.token_hex(16)
        self.api.sa_tokens[token] = f"system:serviceaccount:{namespace}:{name}"
        return token

    def write_service_account(self, directory: str, namespace: str = "default",
                              account: Optional[str] = None) -> Dict[str, str]:
        """Lay out an in-cluster service-account directory (``token``, ``ca.crt``, ``namespace``) as
        the kubelet mounts it in a pod, and return the environment a pod of this cluster sees
        (``KUBERNETES_SERVICE_HOST`` / ``_PORT``).  With ``account``, the token is that service
        account's (authorized by RBAC objects); else the cluster's admin token."""
        os.makedirs(directory, exist_ok=True)
        token = self.service_account_token(namespace, account) if account else (self.api.token or "unused")
        files = {"token": token.encode(), "namespace": namespace.encode()}
        if self.ca is not None:
            files["ca.crt"] = self.ca.ca_pem
        for name, data in files.items():
            with open(os.path.join(directory, name), "wb") as f:
                f.write(data)
        return {"KUBERNETES_SERVICE_HOST": self._host, "KUBERNETES_SERVICE_PORT": str(self.port)}

    # ------------------------------------------------------------------ state

    def pods(self, namespace: Optional[str] = None) -> List[JsonObj]:
        """Copies of the stored pods (sorted by namespace, name)."""
        with self.store.lock:
            return copy.deepcopy(self.store.items("pods", namespace))

    def pod(self, namespace: str, name: str) -> Optional[JsonObj]:
        with self.store.lock:
            return copy.deepcopy(self.store.get("pods", namespace, name))

    def secrets(self, namespace: Optional[str] = None) -> List[JsonObj]:
        with self.store.lock:
            return copy.deepcopy(self.store.items("secrets", namespace))

    def secret(self, namespace: str, name: str) -> Optional[JsonObj]:
        with self.store.lock:
            return copy.deepcopy(self.store.get("secrets", namespace, name))

    @property
    def resource_version(self) -> str:
        return str(self.store.rv)

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        """Poll ``predicate`` until it returns something truthy; ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError("%s not reached within %.1f s" % (what, timeout))
            time.sleep(min(0.02, self.config.tick_seconds))

    # ------------------------------------------------------------------ runtime settings

    @property
    def token(self) -> Optional[str]:
        return self.api.token

    @token.setter
    def token(self, value: Optional[str]) -> None:
        """Change the accepted bearer token (``None``: no authentication)."""
        self.api.token = value

    def deny(self, verb: str, resource: str, namespace: Optional[str] = None) -> None:
        """Add an RBAC denial (see :class:`RbacRule`)."""
        self.api.rbac_deny.append(RbacRule(verb, resource, namespace))

    def allow_all(self) -> None:
        self.api.rbac_deny.clear()
        self.api.role = None

    def enforce_role(self, role: JsonObj) -> None:
        """Authorize requests as RBAC would for an identity bound to this one ``Role`` (a manifest as
        a dict) and nothing else: what its core-group rules do not grant in its namespace is 403."""
        rules = []
        for rule in role.get("rules") or []:
            if "" not in (rule.get("apiGroups") or []):
                continue
            rules.append((frozenset(rule.get("resources") or []), frozenset(rule.get("verbs") or [])))
        self.api.role = (str((role.get("metadata") or {}).get("namespace") or "default"), rules)

    def set_quota(self, quota: Optional[PodQuota]) -> None:
        self.api.quota = quota

    def set_limit_range(self, limit_range: Optional[PodLimitRange]) -> None:
        self.api.limit_range = limit_range

    def label_namespace(self, name: str, labels: Mapping[str, Optional[str]]) -> None:
        """Set (or with ``None`` remove) labels of namespace ``name``: Pod Security's
        ``pod-security.kubernetes.io/enforce``, say."""
        with self.store.lock:
            current = self.api.namespaces[name]["metadata"].setdefault("labels", {})
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value

    def add_namespace(self, name: str) -> None:
        with self.store.lock:
            self.api.add_namespace(name)

    def add_priority_class(self, name: str, value: int) -> None:
        self.api.priority_classes[name] = value

    # ------------------------------------------------------------------ faults

    def fail_next(self, count: int = 1, status: int = 500, method: str = ".*", path: str = ".*",
                  body: Optional[JsonObj] = None, retry_after: Optional[int] = None, delay: float = 0.0) -> Fault:
        """Answer the next ``count`` requests matching ``method`` (regex, full match) and ``path``
        (regex, searched) with ``status`` and a ``Status`` body (``Retry-After`` header if given)."""
        fault = Fault(re.compile(method), re.compile(path), status, count, body, retry_after, delay)
        with self.api.request_lock:
            self.api.faults.append(fault)
        return fault

    def delay_next(self, seconds: float, count: int = 1, method: str = ".*", path: str = ".*") -> Fault:
        """Sleep ``seconds`` before serving the next matching requests (to provoke client timeouts)."""
        return self.fail_next(count, 0, method, path, delay=seconds)

    def clear_faults(self) -> None:
        with self.api.request_lock:
            self.api.faults.clear()

    def drop_watches(self) -> None:
        """End every open watch stream now (clients see the stream close normally)."""
        self.store.drop_watches()

    def compact(self) -> None:
        """Forget the event log: watches from any older resource version get ``ERROR`` 410 Expired."""
        self.store.compact()

    # ------------------------------------------------------------------ driver actions

    def evict(self, namespace: str, name: str, resource: str = "memory") -> JsonObj:
        """Node-pressure eviction: ``Failed``/``Evicted``, ``DisruptionTarget`` condition."""
        return copy.deepcopy(self.cluster.evict(namespace, name, resource))

    def preempt(self, namespace: str, name: str) -> JsonObj:
        """Preemption by the scheduler: ``DisruptionTarget``, then graceful deletion."""
        return copy.deepcopy(self.cluster.preempt(namespace, name))

    def node_lost(self, namespace: str, name: str) -> JsonObj:
        """The node of this pod stops reporting: ``NodeLost``, ``Ready=False``, kubelet frozen."""
        return copy.deepcopy(self.cluster.node_lost(namespace, name))

    def node_recovered(self, node: str) -> None:
        self.cluster.node_recovered(node)

    def publish_image(self, image: str) -> None:
        """Push ``image`` to its registry: pods waiting on it pull it at their next back-off, new pods at once."""
        self.cluster.publish_image(image)

    def set_pod_phase(self, namespace: str, name: str, phase: str, reason: str = "", message: str = "",
                      exit_code: Optional[int] = None) -> JsonObj:
        """Force a phase (terminal phases terminate the containers and freeze the pod)."""
        return copy.deepcopy(self.cluster.set_phase(namespace, name, phase, reason, message, exit_code))

    def exit_pod(self, namespace: str, name: str, exit_code: int = 0) -> None:
        """Make the pod's containers exit now (or as soon as they start) with ``exit_code``."""
        self.cluster.exit_now(namespace, name, exit_code)

    def logs(self, namespace: str, name: str, container: Optional[str] = None) -> List[str]:
        """What the container printed so far (first container by default)."""
        with self.store.lock:
            pod = self.store.get("pods", namespace, name)
            if pod is None:
                return []
            if container is None:
                container = pod["spec"]["containers"][0]["name"]
            return self.cluster.logs(pod["metadata"]["uid"], str(container)) or []

    # ------------------------------------------------------------------ request log

    def requests(self, method: Optional[str] = None, path: Optional[str] = None) -> List[RequestRecord]:
        """Requests served so far, optionally filtered by method and path regex (searched)."""
        pattern = re.compile(path) if path is not None else None
        with self.api.request_lock:
            return [r for r in self.api.requests if (method is None or r.method == method)
                    and (pattern is None or pattern.search(r.path))]

    def clear_requests(self) -> None:
        with self.api.request_lock:
            self.api.requests.clear()


def serve(port: int, kubeconfig_path: str, namespace: str = "default", nodes: int = 2, node_cpu: str = "4",
          node_memory: str = "16Gi", node_gpus: int = 0, token: Optional[str] = None, host: str = "127.0.0.1",
          run_seconds: Optional[float] = None, namespaces: Optional[List[str]] = None,
          ready: Optional[Callable[[KubeSim], None]] = None, stop: Optional[threading.Event] = None,
          tls: bool = True, runtime: str = "model", images: Optional[Mapping[str, str]] = None,
          runtime_dir: Optional[str] = None) -> None:
    """Run a simulator until SIGINT/SIGTERM (or ``stop`` is set): ``podgahp sim k8s``.

    Writes a kubeconfig for it to ``kubeconfig_path`` (context namespace ``namespace``), then calls
    ``ready(sim)`` so the caller can print where it listens.  ``port`` 0 picks a free port.
    """
    node_list = tuple(SimNode("sim-node-%d" % (i + 1), cpu=node_cpu, memory=node_memory, gpus=node_gpus)
                      for i in range(nodes))
    all_namespaces = tuple(dict.fromkeys([namespace] + list(namespaces or [])))
    config = SimConfig(nodes=node_list, namespaces=all_namespaces)
    if token is not None:
        config = _replace(config, token=token)
    if run_seconds is not None:
        config = _replace(config, run_seconds=run_seconds)
    config = _replace(config, runtime=runtime, images=dict(images or {}))
    if runtime_dir is not None:
        config = _replace(config, runtime_dir=runtime_dir)
    done = stop or threading.Event()
    handlers: Dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, lambda *_: done.set())
    try:
        with KubeSim(config, host=host, port=port, tls=tls) as sim:
            sim.write_kubeconfig(kubeconfig_path, namespace=namespace)
            os.chmod(kubeconfig_path, 0o600)
            log.info("simulated Kubernetes API server at %s, kubeconfig %s", sim.url, kubeconfig_path)
            if ready is not None:
                ready(sim)
            while not done.wait(0.5):
                pass
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _cert_hosts(host: str) -> Tuple[str, ...]:
    """Names the server certificate is valid for: its address, plus the loopback names."""
    hosts = [host]
    try:
        if ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_unspecified:
            hosts += ["127.0.0.1", "localhost"]
    except ValueError:
        pass
    return tuple(dict.fromkeys(hosts))


def _replace(config: SimConfig, **changes: Any) -> SimConfig:
    import dataclasses
    return dataclasses.replace(config, **changes)
