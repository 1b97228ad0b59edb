"""The two engines the Kubernetes tests run against: the simulated API server (``podgahp_sim.k8s``)
and the real control plane (Kubernetes' own kube-apiserver, etcd, scheduler and controller-manager,
built from Debian's sources by ``harness.controlplane``) with the simulator's kubelets as its nodes.

A test asks for the ``engine`` fixture's parameter through the ``both_engines`` mark (a module's
``pytestmark`` or a test's own); without it a test runs on the simulator alone, as the tests that
inject faults the real server cannot be made to show (dropped or expired watches, clock skew) or
drive the simulator's hand (evictions, preemption, phases set by the test) must. A test marked
``fault_proxy`` too reaches the real API server through a proxy that injects its 5xx answers and
latency (tests/faultproxy.py). The real engine is one control plane per test process
(session-scoped, started at its first use), each test a namespace of its own.

:class:`RealEngine` offers the reading part of ``KubeSim``'s interface (pods, secrets, waits, logs,
a kubeconfig) over the real API server, so that a test written against the simulator's reads runs
on both.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets as random
import ssl
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import yaml

from faultproxy import FaultProxy
from paths import DOCS
from podgahp_sim.k8s.http import Fault, RequestRecord
from podgahp_sim.kube.client import ApiError, read_kubeconfig
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.controlplane import Request
from podgahp_sim.k8s import PodLimitRange, PodQuota
from podgahp_sim.k8s.sim import PodWaits
from podgahp_sim.k8s.store import json_copy
from podgahp_sim.kube.node import NodeAgent, NodeSpec
from podgahp_sim.kube.pki import write_kubeconfig
from polling import wait_until

ENGINES = ("simulated", "real")
JsonObj = Dict[str, Any]

#: The nodes of the real engine: as the simulator's default nodes (two of 4 CPUs and 16 GiB), with the
#: fast clocks of the simulator fixtures.
NODES = tuple(NodeSpec("sim-node-%d" % i, cpus="4", memory="16Gi", tick_seconds=0.05, run_seconds=0.5,
                       container_create_seconds=0.05, sigterm_exit_seconds=0.2) for i in (1, 2))


def control_plane_binaries() -> Path:
    """The control plane's binaries: those of the directory ``PODGAHP_TEST_CONTROL_PLANE`` names (any
    release, laid out as ``podgahp sim k8s --control-plane`` takes it), else Debian's, built from its
    sources the first time (make k8s-control-plane does it before the tests; a failed build fails the
    test that needs it, it never skips)."""
    from harness.controlplane import build_control_plane

    chosen = os.environ.get("PODGAHP_TEST_CONTROL_PLANE")
    return Path(chosen) if chosen else build_control_plane()


def shipped_role() -> Dict[str, Any]:
    """The Role of docs/podgahp-rbac.yaml, as an admin applies it: the rights podgahp's identity needs in
    the pilots' namespace."""
    (role,) = [d for d in yaml.safe_load_all((DOCS / "podgahp-rbac.yaml").read_text()) if d and d["kind"] == "Role"]
    return dict(role)


def start_real_cluster(base: Optional[Path] = None, nodes: Sequence[NodeSpec] = NODES) -> KubeCluster:
    return KubeCluster(control_plane_binaries(), nodes, base=base).start()


@contextlib.contextmanager
def joined_node(cluster: KubeCluster, spec: NodeSpec) -> Iterator[NodeAgent]:
    """A node agent of ``spec`` joined to the real cluster, for the tests that need a node of their
    own (a runc one, tainted so that only their pods go there); stopped and its Node deleted after."""
    agent = NodeAgent(read_kubeconfig(str(cluster.plane.node_kubeconfig(spec.name))), spec,
                      client_ca_pem=cluster.plane.ca_pem).start()
    try:
        yield agent
    finally:
        agent.stop()
        cluster.admin.call("DELETE", "/api/v1/nodes/" + spec.name)


def namespace_for(test_name: str) -> str:
    """A namespace of its own for a test (a DNS label: at most 63 characters)."""
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:50].strip("-")
    return "%s-%s" % (stem or "t", random.token_hex(3))


ACCOUNT = "podgahp-test"
"""The ServiceAccount a test's backends are: cluster-admin until the test enforces a Role (the simulator
allows everything until then too), then that Role's rights alone."""


class RealEngine(PodWaits):
    """One test's view of the real cluster: its namespace, a ServiceAccount and its token, and
    KubeSim's reads (and ``enforce_role``) over the real API server. :meth:`close` removes what the
    namespace's deletion does not (the account's ClusterRoleBinding)."""

    name = "real"

    def __init__(self, cluster: KubeCluster, namespace: str, proxied: bool = False) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.proxy: Optional[FaultProxy] = None
        """With ``proxied``: the fault-injecting proxy the test's clients reach the API server through
        (:meth:`url`, :meth:`write_kubeconfig`), offering KubeSim's ``fail_next``, ``delay_next`` and
        ``requests``."""
        if proxied:
            pki = cluster.plane.pki
            assert pki is not None
            serving = pki.serving("fault-proxy-%s" % random.token_hex(4), "127.0.0.1")
            self.proxy = FaultProxy(cluster.url, cluster.plane.ca_pem, serving).start()
        self.api = cluster.admin
        self.user = "system:serviceaccount:%s:%s" % (namespace, ACCOUNT)
        self._binding = "podgahp-test-" + namespace
        self._create("/api/v1/namespaces/%s/serviceaccounts" % namespace,
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}})
        self._create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": self._binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]})
        answer = self.api.call("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, ACCOUNT), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}})
        self.token = str(answer["status"]["token"])
        wait_until(lambda: self._allowed("list", "", "nodes", ""), "the account's cluster-admin binding in effect")
        self._requests_before = len(cluster.requests())

    def close(self) -> None:
        self._unbind()
        if self.proxy is not None:
            self.proxy.stop()

    def fail_next(self, count: int = 1, status: int = 500, method: str = ".*", path: str = ".*",
                  retry_after: Optional[int] = None) -> Fault:
        assert self.proxy is not None, "the test is not marked fault_proxy"
        return self.proxy.fail_next(count, status, method, path, retry_after)

    def delay_next(self, seconds: float, count: int = 1, method: str = ".*", path: str = ".*") -> Fault:
        assert self.proxy is not None, "the test is not marked fault_proxy"
        return self.proxy.delay_next(seconds, count, method, path)

    def clear_faults(self) -> None:
        if self.proxy is not None:
            with self.proxy.lock:
                self.proxy.faults.clear()

    def _create(self, path: str, body: JsonObj) -> None:
        """Create an object, or find it there (a ServiceAccount of an earlier test of the namespace)."""
        try:
            self.api.call("POST", path, body)
        except ApiError as e:
            if e.status != 409:
                raise

    def _unbind(self) -> None:
        try:
            self.api.call("DELETE", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + self._binding)
        except ApiError as e:
            if e.status != 404:
                raise

    @property
    def url(self) -> str:
        return self.proxy.url if self.proxy is not None else self.cluster.url

    @property
    def resource_version(self) -> str:
        """The API server's latest resourceVersion (a list's)."""
        return str(self.api.get("/api/v1/namespaces/%s/pods" % self.namespace)["metadata"]["resourceVersion"])

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.cluster.plane.ca_pem.decode("ascii"))

    def write_kubeconfig(self, path: str, namespace: Optional[str] = None, context_name: str = "podgahp-real",
                         token: Optional[str] = None, server: Optional[str] = None) -> str:
        """A kubeconfig of the test's ServiceAccount (its token, or ``token``), context namespace the test's,
        of the API server (or of ``server``, a proxy in front of it)."""
        write_kubeconfig(Path(path), server or self.url, self.cluster.plane.ca_pem, {"token": token or self.token},
                         namespace=namespace or self.namespace, context=context_name)
        return path

    def write_service_account(self, directory: str, namespace: str, account: str) -> Dict[str, str]:
        """As KubeSim's: the in-cluster service-account directory of ``account`` (``token``, ``ca.crt``,
        ``namespace``) and the environment its pod sees (``KUBERNETES_SERVICE_HOST`` / ``_PORT``)."""
        answer = self.api.call("POST", "/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, account), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}})
        files = {"token": str(answer["status"]["token"]).encode(), "namespace": namespace.encode(),
                 "ca.crt": self.cluster.plane.ca_pem}
        os.makedirs(directory, exist_ok=True)
        for name, data in files.items():
            Path(directory, name).write_bytes(data)
        server = urllib.parse.urlsplit(self.url)
        return {"KUBERNETES_SERVICE_HOST": str(server.hostname), "KUBERNETES_SERVICE_PORT": str(server.port)}

    def empty_namespace(self) -> None:
        """Remove every pod (at once), Secret, ConfigMap and Event of the namespace but what the
        controllers keep there (ServiceAccounts' token Secrets, ``kube-root-ca.crt``): for the tests that
        name the ``default`` namespace, each starts from an empty one as on a fresh simulator."""
        base = "/api/v1/namespaces/" + self.namespace
        for pod in self.api.get(base + "/pods").get("items") or []:
            try:
                self.api.call("DELETE", "%s/pods/%s" % (base, pod["metadata"]["name"]), {"gracePeriodSeconds": 0})
            except ApiError as e:
                if e.status != 404:
                    raise
        for resource, keep in (("secrets", lambda o: o.get("type") == "kubernetes.io/service-account-token"),
                               ("configmaps", lambda o: o["metadata"]["name"] == "kube-root-ca.crt"),
                               ("events", lambda o: False)):
            for obj in self.api.get("%s/%s" % (base, resource)).get("items") or []:
                if not keep(obj):
                    try:
                        self.api.call("DELETE", "%s/%s/%s" % (base, resource, obj["metadata"]["name"]))
                    except ApiError as e:
                        if e.status != 404:
                            raise
        wait_until(lambda: not self.api.get(base + "/pods").get("items"), "namespace %s without pods" % self.namespace)

    def _allowed(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        review = self.api.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": self.user, "groups": ["system:serviceaccounts", "system:authenticated"],
                     "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                            "namespace": namespace}}})
        return bool((review.get("status") or {}).get("allowed"))

    def enforce_role(self, role: JsonObj) -> None:
        """The account gets this Role's rights in the test's namespace, and nothing else (as KubeSim's)."""
        body = json_copy(role)
        body["metadata"] = {"name": "podgahp-test", "namespace": self.namespace}
        base = "/apis/rbac.authorization.k8s.io/v1/namespaces/%s" % self.namespace
        try:
            self.api.call("DELETE", base + "/roles/podgahp-test")
        except ApiError as e:
            if e.status != 404:
                raise
        self.api.call("POST", base + "/roles", body)
        self.api.call("POST", base + "/rolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "podgahp-test"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "podgahp-test"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": self.namespace}]}) \
            if not self._get(base + "/rolebindings/podgahp-test") else None
        self._unbind()
        rule = (body.get("rules") or [{}])[0]
        wait_until(lambda: not self._allowed("list", "", "nodes", "") and self._allowed(
            rule["verbs"][0], rule["apiGroups"][0], rule["resources"][0], self.namespace),
            "the Role alone in effect for %s" % self.user)

    def set_quota(self, quota: Optional[PodQuota]) -> None:
        """The namespace's ResourceQuota ``quota.name`` (KubeSim's ``set_quota``): made, with its
        ``hard``, and waited for until the quota controller has counted what the namespace uses (the
        admission plugin refuses pods until then); ``None`` removes the namespace's quotas."""
        base = "/api/v1/namespaces/%s/resourcequotas" % self.namespace
        for old in self.api.get(base).get("items") or []:
            self.api.call("DELETE", "%s/%s" % (base, old["metadata"]["name"]))
        if quota is None:
            return
        self.api.call("POST", base, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": quota.name},
                                     "spec": {"hard": dict(quota.hard)}})
        wait_until(lambda: ((self._get("%s/%s" % (base, quota.name)) or {}).get("status") or {}).get("used")
                   is not None, "ResourceQuota %s counted by the quota controller" % quota.name, 60)

    def set_limit_range(self, limit_range: Optional[PodLimitRange]) -> None:
        """The namespace's LimitRange of ``type: Container`` (KubeSim's ``set_limit_range``); ``None``
        removes the namespace's LimitRanges."""
        base = "/api/v1/namespaces/%s/limitranges" % self.namespace
        for old in self.api.get(base).get("items") or []:
            self.api.call("DELETE", "%s/%s" % (base, old["metadata"]["name"]))
        if limit_range is not None:
            item = {"type": "Container", "max": dict(limit_range.max), "default": dict(limit_range.default),
                    "defaultRequest": dict(limit_range.default_request)}
            self.api.call("POST", base, {"apiVersion": "v1", "kind": "LimitRange",
                                         "metadata": {"name": limit_range.name}, "spec": {"limits": [item]}})

    def label_namespace(self, name: str, labels: Mapping[str, Optional[str]]) -> None:
        """KubeSim's ``label_namespace``, as ``kubectl label namespace`` does it (a merge patch)."""
        self.api.call("PATCH", "/api/v1/namespaces/" + name, {"metadata": {"labels": dict(labels)}},
                      content_type="application/merge-patch+json")

    def _get(self, path: str) -> Optional[JsonObj]:
        try:
            return self.api.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pod(self, namespace: str, name: str) -> Optional[JsonObj]:
        return self.cluster.pod(namespace, name)

    def pods(self, namespace: Optional[str] = None) -> List[JsonObj]:
        return self.cluster.pods(namespace or self.namespace)

    def add_priority_class(self, name: str, value: int) -> None:
        """A PriorityClass of the cluster (kept if there: it is cluster-wide, as KubeSim's)."""
        self._create("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})

    def secret(self, namespace: str, name: str) -> Optional[JsonObj]:
        return self._get("/api/v1/namespaces/%s/secrets/%s" % (namespace, name))

    def secrets(self, namespace: Optional[str] = None) -> List[JsonObj]:
        """The namespace's Secrets but its ServiceAccounts' tokens (which the simulator does not make)."""
        listed = self.api.get("/api/v1/namespaces/%s/secrets" % (namespace or self.namespace))
        return sorted((s for s in listed.get("items") or [] if s.get("type") != "kubernetes.io/service-account-token"),
                      key=lambda s: s["metadata"]["name"])

    def tick(self) -> None:
        """KubeSim's pass of its loop by hand: the real cluster's controllers run by themselves."""

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        return wait_until(predicate, what, timeout, 0.05)

    def logs(self, namespace: str, name: str, container: Optional[str] = None) -> List[str]:
        return self.cluster.logs(namespace, name, container)

    def requests(self, method: Optional[str] = None, path: Optional[str] = None
                 ) -> List[Union[Request, RequestRecord]]:
        """As KubeSim's request log: with the fault proxy, every request the test's clients sent through
        it (those it answered with a fault included); else the pod and Secret creations and deletions
        the API server served since this view was made or cleared (its audit log)."""
        if self.proxy is not None:
            return list(self.proxy.requests(method, path))
        return list(self.cluster.requests(method, path, since=self._requests_before))

    def clear_requests(self) -> None:
        if self.proxy is not None:
            with self.proxy.lock:
                self.proxy.log.clear()
        self._requests_before = len(self.cluster.requests())

    def exit_pod(self, namespace: str, name: str, exit_code: int = 0) -> None:
        self.cluster.exit_pod(namespace, name, exit_code)

    def publish_image(self, image: str) -> None:
        self.cluster.publish_image(image)
