"""kubectl, the admin's everyday tool, against the simulated cluster as against a real one: HTTPS with
the kubeconfig's CA, discovery and short names, server-side tables, Events in describe, create and
apply with validation on, logs, watch, delete, auth can-i, cordon, taints, drain and wait.

Every test runs on both engines (the real control plane's two nodes are named as the simulator's),
in a namespace of the test's own on the real one; where 1.20 says it otherwise, the test expects the
release's own words, and what only the simulator shows (its request log) is checked there alone.
"""

from __future__ import annotations

import base64
import calendar
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from engines import ACCOUNT, NODES, RealEngine
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode
from polling import wait_until
from test_k8s_support import kubectl_version

KUBECTL = shutil.which("kubectl")
pytestmark = [pytest.mark.skipif(KUBECTL is None, reason="no kubectl on this machine (make system-deps installs one)"),
              pytest.mark.both_engines]

NODE_A, NODE_B = (spec.name for spec in NODES)
WAIT = 60.0
"""Seconds to wait for what the cluster does by itself (the real scheduler retries an unschedulable
pod after a back-off of up to 10 s, or when a node changes)."""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: pilot}}
spec:
  restartPolicy: Never
  containers:
  - name: pilot
    {image_key}: registry.example/pilot:1
    command: [/bin/pilot]
    env: [{{name: PODGAHP_SIM_RUN_SECONDS, value: "{seconds}"}}, {{name: PODGAHP_SIM_LOG, value: "hello from {name}"}}]
    resources: {{requests: {{cpu: 100m, memory: 64Mi}}}}
"""


class Kubectl:
    def __init__(self, kubeconfig: str, home: Path) -> None:
        self.env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(home))
        # kubectl >= 1.27 validates through the server (OpenAPI v3); older ones need OpenAPI v2 protobuf
        self.validate = kubectl_version(str(KUBECTL)) >= (1, 27)

    def run(self, *args: str, check: bool = True, stdin: Optional[str] = None) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(KUBECTL), *args], env=self.env, capture_output=True, text=True, input=stdin,
                              timeout=90)
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc

    def out(self, *args: str) -> str:
        return str(self.run(*args).stdout)

    def table(self, *args: str) -> List[Dict[str, str]]:
        """Rows of a printed table as {COLUMN: cell} (columns split on runs of two spaces)."""
        lines = self.out(*args).splitlines()
        header = re.split(r"\s{2,}", lines[0].strip())
        return [dict(zip(header, re.split(r"\s{2,}", line.strip()))) for line in lines[1:]]

    def popen(self, *args: str) -> "subprocess.Popen[str]":
        """kubectl in the background, logging its requests (``-v=6``) to its stderr: see :func:`watch_opened`."""
        return subprocess.Popen([str(KUBECTL), "-v=6", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@dataclass
class Cluster:
    """One engine as these tests see it: ``engine`` its reads (KubeSim's, or RealEngine's over the
    real API server), ``namespace`` the test's, ``admin`` kubectl as the cluster's admin (context
    namespace the test's), ``sim`` the simulator on the simulated engine (its request log), else None."""

    engine: Any
    namespace: str
    admin: Kubectl
    home: Path
    sim: Optional[KubeSim]

    @property
    def real(self) -> bool:
        return self.sim is None

    def account(self, name: str, token: Optional[str] = None) -> Kubectl:
        """kubectl as ServiceAccount ``name`` of the namespace (a token made by ``kubectl create token``)."""
        token = token or self.admin.out("create", "token", name).strip()
        path = self.home / f"kubeconfig-{name}"
        return Kubectl(self.engine.write_kubeconfig(str(path), namespace=self.namespace, token=token), self.home)

    def pod(self, name: str) -> Optional[Dict[str, Any]]:
        found: Optional[Dict[str, Any]] = self.engine.pod(self.namespace, name)
        return found

    def wait_for(self, predicate: Any, what: str, timeout: float = WAIT) -> Any:
        return self.engine.wait_for(predicate, timeout, what)

    def wait_for_phase(self, name: str, *phases: str) -> Dict[str, Any]:
        found: Dict[str, Any] = self.engine.wait_for_phase(self.namespace, name, *phases, timeout=WAIT)
        return found


def simulated_cluster(tmp_path: Path) -> Iterator[Cluster]:
    nodes = tuple(SimNode(spec.name, cpu=spec.cpus, memory=spec.memory) for spec in NODES)
    with KubeSim(SimConfig(nodes=nodes, namespaces=("default", "pilots"), tick_seconds=0.05,
                           container_create_seconds=0.05)) as sim:
        admin = Kubectl(sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace="pilots"), tmp_path)
        yield Cluster(sim, "pilots", admin, tmp_path, sim)


def real_view(real: RealEngine, home: Path) -> Cluster:
    """The test's namespace of the real control plane, kubectl as its admin (a client certificate)."""
    admin = Kubectl(real.cluster.write_kubeconfig(str(home / "kubeconfig"), namespace=real.namespace), home)
    return Cluster(real, real.namespace, admin, home, None)


def real_cluster_of(real: RealEngine, tmp_path: Path) -> Iterator[Cluster]:
    """:func:`real_view`, the nodes' cordons and taints put back as they were afterwards (the cluster
    serves the process's next tests)."""
    before = {name: real.api.get("/api/v1/nodes/" + name)["spec"] for name in (NODE_A, NODE_B)}
    try:
        yield real_view(real, tmp_path)
    finally:
        for name, spec in before.items():
            real.api.call("PATCH", "/api/v1/nodes/" + name,
                          {"spec": {"unschedulable": spec.get("unschedulable"), "taints": spec.get("taints")}},
                          content_type="application/merge-patch+json")


@pytest.fixture
def cluster(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if engine == "real":
        yield from real_cluster_of(request.getfixturevalue("real_engine"), tmp_path)
    else:
        yield from simulated_cluster(tmp_path)


def create(cluster: Cluster, name: str, seconds: float = 60, image_key: str = "image", check: bool = True,
           extra: str = "") -> subprocess.CompletedProcess:
    path = cluster.home / f"{name}.yaml"
    path.write_text(POD.format(name=name, seconds=seconds, image_key=image_key) + extra)
    validate = [] if cluster.admin.validate else ["--validate=false"]
    return cluster.admin.run("create", "-f", str(path), *validate, check=check)


def watch_opened(proc: "subprocess.Popen[str]", path: str) -> None:
    """Until kubectl (started by :meth:`Kubectl.popen`) has its watch of ``path`` answered: its
    ``-v=6`` line for that GET (the server answers a watch's headers at once). The test's timeout
    bounds a kubectl that never gets there."""
    assert proc.stderr is not None
    seen: List[str] = []
    while True:
        line = proc.stderr.readline()
        assert line, f"kubectl ended before its watch of {path} was open: {seen}"
        seen.append(line)
        if re.search(r"GET https://\S+%s\?\S*watch=true\S* 200 OK" % re.escape(path), line):
            return


def test_get_with_short_names_and_wide_tables(cluster: Cluster) -> None:
    kubectl = cluster.admin
    create(cluster, "p1")
    cluster.wait_for_phase("p1", "Running")
    rows = kubectl.table("get", "po", "-o", "wide")
    assert list(rows[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                             "READINESS GATES"]
    assert (rows[0]["NAME"], rows[0]["READY"], rows[0]["STATUS"], rows[0]["RESTARTS"]) == ("p1", "1/1", "Running", "0")
    assert rows[0]["NODE"] == cluster.pod("p1")["spec"]["nodeName"]  # type: ignore[index]
    assert rows[0]["IP"].startswith("10.244.")
    nodes = kubectl.table("get", "no", "-o", "wide")
    assert [n["NAME"] for n in nodes] == [NODE_A, NODE_B]
    assert list(nodes[0])[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    kubelet = kubectl.out("get", "node", NODE_A, "-o", "jsonpath={.status.nodeInfo.kubeletVersion}")
    assert nodes[0]["STATUS"] == "Ready" and nodes[0]["VERSION"] == kubelet
    assert "INTERNAL-IP" in nodes[0] and "CONTAINER-RUNTIME" in nodes[0]
    namespaces = [n["NAME"] for n in kubectl.table("get", "ns")]
    assert {"default", "kube-node-lease", "kube-public", "kube-system", cluster.namespace} <= set(namespaces)
    assert namespaces == sorted(namespaces)
    assert kubectl.table("get", "pc")[0]["NAME"] == "system-cluster-critical"


def test_describe_shows_events_and_get_events(cluster: Cluster) -> None:
    create(cluster, "p1", seconds=0.2)
    cluster.wait_for_phase("p1", "Succeeded")
    described = cluster.admin.out("describe", "pod", "p1")
    assert "Status:           Succeeded" in described
    events = described.split("Events:", 1)[1]
    for reason in ("Scheduled", "Pulling", "Pulled", "Created", "Started"):
        assert re.search(rf"Normal\s+{reason}\s", events), (reason, events)
    listed = cluster.admin.table("get", "ev")
    assert {e["REASON"] for e in listed} >= {"Scheduled", "Started"}
    assert all(e["OBJECT"] == "pod/p1" for e in listed)


def test_create_refuses_an_unknown_field(cluster: Cluster) -> None:
    """kubectl's validation: on the server (``fieldValidation=Strict``, 1.25 and later), else kubectl's
    own against the server's OpenAPI v2 schema; nothing is stored either way."""
    if not cluster.admin.validate:
        pytest.skip("this kubectl validates with OpenAPI v2 protobuf, which the simulator does not serve")
    refused = create(cluster, "typo", image_key="imagee", check=False)
    assert refused.returncode != 0
    if cluster.sim is None:  # 1.20 has no server-side field validation
        assert 'unknown field "imagee" in io.k8s.api.core.v1.Container' in refused.stderr
    else:
        assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in refused.stderr
        assert cluster.sim.requests("POST", "/pods$")[-1].query.get("fieldValidation") == "Strict"
    assert cluster.pod("typo") is None


def test_apply_create_then_update(cluster: Cluster) -> None:
    path = cluster.home / "app.yaml"
    path.write_text(POD.format(name="app", seconds=60, image_key="image"))
    extra = [] if cluster.admin.validate else ["--validate=false"]
    assert "pod/app created" in cluster.admin.out("apply", "-f", str(path), *extra)
    path.write_text(path.read_text().replace("labels: {app: pilot}", "labels: {app: pilot, tier: backfill}"))
    assert "pod/app configured" in cluster.admin.out("apply", "-f", str(path), *extra)
    labels = cluster.pod("app")["metadata"]["labels"]  # type: ignore[index]
    assert labels == {"app": "pilot", "tier": "backfill"}
    assert cluster.admin.table("get", "pods", "-l", "tier=backfill")[0]["NAME"] == "app"


def test_logs_watch_and_delete(cluster: Cluster) -> None:
    with cluster.admin.popen("get", "pods", "-w", "--request-timeout=0") as watch:
        try:
            watched(cluster, watch)
        finally:
            watch.kill()
    assert 'pod "p1" deleted' in cluster.admin.out("delete", "pod", "p1")
    assert cluster.pod("p1") is None


def watched(cluster: Cluster, watch: "subprocess.Popen[str]") -> None:
    """The pilot's lines as ``kubectl get pods -w`` prints them, up to Completed (the test's timeout
    bounds a watch that prints nothing). The pod is created once the watch is open, so that its first
    line is the pod as created (Pending), however late kubectl gets to print it."""
    watch_opened(watch, "/namespaces/%s/pods" % cluster.namespace)
    create(cluster, "p1", seconds=0.3)
    cluster.wait_for_phase("p1", "Succeeded")
    assert "hello from p1" in cluster.admin.out("logs", "p1")
    assert watch.stdout is not None
    seen: List[str] = []
    while not any("Completed" in line for line in seen):
        line = watch.stdout.readline()
        assert line, f"watch ended after {seen}"
        seen.append(line)
    assert seen[0].split()[:1] == ["NAME"]
    assert any(re.match(r"p1\s+0/1\s+(Pending|ContainerCreating)\s", line) for line in seen[1:])


ROLE = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {namespace}}}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [{verbs}]
"""

ROLE_ACCOUNT = """\
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {name}, namespace: {namespace}}}
---
""" + ROLE + """\
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects: [{{kind: ServiceAccount, name: {name}, namespace: {namespace}}}]
"""
"""A Role on pods, a ServiceAccount of its name and their binding."""


def can_i(kubectl: Kubectl, *args: str) -> str:
    """``kubectl auth can-i``'s answer: ``yes`` (exit 0) or ``no`` (exit 1)."""
    done = kubectl.run("auth", "can-i", *args, check=False)
    assert (done.returncode, done.stdout.strip()) in ((0, "yes"), (1, "no")), (done.stdout, done.stderr)
    return done.stdout.strip()


def test_auth_can_i(cluster: Cluster) -> None:
    assert can_i(cluster.admin, "create", "pods") == "yes"
    cluster.admin.run("apply", "-f", "-", stdin=ROLE_ACCOUNT.format(name="creator", namespace=cluster.namespace,
                                                                     verbs="create, get"))
    account = cluster.account("creator")
    # (the real server's authorizer sees a new binding a moment later)
    wait_until(lambda: can_i(account, "create", "pods"), "the Role in effect", WAIT, 0.2, lambda a: a == "yes")
    assert can_i(account, "delete", "pods") == "no"
    assert can_i(account, "create", "pods", "-n", "default") == "no"


@pytest.mark.simulator_only("the simulator's denials (KubeSim.deny) are its hand, not RBAC")
def test_auth_can_i_follows_the_simulators_denials(cluster: Cluster) -> None:
    assert cluster.sim is not None
    cluster.sim.deny("delete", "pods", "pilots")
    assert can_i(cluster.admin, "delete", "pods") == "no"


def test_client_certificate_and_wrong_ca(cluster: Cluster) -> None:
    path = str(cluster.home / "cert-kubeconfig")
    if cluster.sim is not None:
        cluster.sim.write_kubeconfig(path, namespace="pilots", client_cert=True)
    else:
        cluster.engine.cluster.write_kubeconfig(path, namespace=cluster.namespace)
    text = Path(path).read_text()
    assert "client-certificate-data" in text and "token" not in text
    certified = Kubectl(path, cluster.home)
    assert certified.out("get", "pods").strip() in ("", f"No resources found in {cluster.namespace} namespace.")
    other = KubeSim(SimConfig())
    ca_line = next(line for line in text.splitlines() if "certificate-authority-data" in line)
    indent = ca_line[:len(ca_line) - len(ca_line.lstrip())]
    stranger = cluster.home / "stranger"
    stranger.write_text(text.replace(ca_line, indent + "certificate-authority-data: "
                                     + base64.b64encode(other.ca_pem).decode()))
    refused = Kubectl(str(stranger), cluster.home).run("get", "pods", check=False)
    assert refused.returncode != 0 and "certificate" in refused.stderr


def test_health_endpoints_answer_ok(cluster: Cluster) -> None:
    for path in ("/healthz", "/readyz", "/livez"):
        assert cluster.admin.out("get", "--raw", path) == "ok"
    assert "readyz check passed" in cluster.admin.out("get", "--raw", "/readyz?verbose")


@pytest.mark.simulator_only("SelfSubjectReview (kubectl auth whoami) came with 1.28; the real engine runs 1.20")
def test_auth_whoami_names_the_identity(cluster: Cluster) -> None:
    assert cluster.sim is not None
    rows = cluster.admin.table("auth", "whoami")
    assert rows[0] == {"ATTRIBUTE": "Username", "VALUE": cluster.sim.config.user}
    cluster.admin.run("create", "serviceaccount", "podgahp")
    assert cluster.account("podgahp").table("auth", "whoami")[0]["VALUE"] == "system:serviceaccount:pilots:podgahp"


def test_create_namespace_then_rbac_objects_are_stored_only_in_a_namespace_that_exists(cluster: Cluster) -> None:
    later = cluster.namespace + "-later"
    kubectl = cluster.admin
    path = cluster.home / "role.yaml"
    path.write_text(ROLE.format(name="podgahp", namespace=later, verbs="get, list"))
    refused = kubectl.run("apply", "-f", str(path), check=False)
    assert refused.returncode != 0 and f'namespaces "{later}" not found' in refused.stderr
    assert f"namespace/{later} created" in kubectl.out("create", "namespace", later)
    try:
        again = kubectl.run("create", "namespace", later, check=False)
        assert again.returncode != 0 and "AlreadyExists" in again.stderr
        assert later in [row["NAME"] for row in kubectl.table("get", "namespaces")]
        assert "role.rbac.authorization.k8s.io/podgahp created" in kubectl.out("apply", "-f", str(path))
        assert [row["NAME"] for row in kubectl.table("get", "roles", "-n", later)] == ["podgahp"]
    finally:
        if cluster.real:
            kubectl.run("delete", "namespace", later, "--wait=false")


REPO = Path(__file__).resolve().parents[3]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.simulator_only("1.20 serves no OpenAPI v3 (kubectl explains from v2 there: the next test)")
def test_explain_reads_the_schemas_over_openapi_v3(cluster: Cluster) -> None:
    assert cluster.sim is not None
    kubectl = cluster.admin
    resources = kubectl.out("explain", "pods.spec.containers.resources")
    assert "FIELD: resources <ResourceRequirements>" in resources
    assert re.search(r"^  limits\s+<map\[string\]string>", resources, re.M)
    assert re.search(r"^  requests\s+<map\[string\]string>", resources, re.M)
    assert re.search(r"^  verbs\s+<\[\]string> -required-", kubectl.out("explain", "roles.rules"), re.M)
    assert "GROUP:      rbac.authorization.k8s.io" in kubectl.out("explain", "rolebindings")
    unknown = kubectl.run("explain", "pods.spec.nosuchfield", check=False)
    assert unknown.returncode != 0 and 'field "nosuchfield" does not exist' in unknown.stderr


def test_explain_reads_the_schemas_over_openapi_v2(cluster: Cluster) -> None:
    kubectl = cluster.admin
    v2 = kubectl.out("explain", "pods.spec.tolerations", "--output=plaintext-openapiv2")
    assert "RESOURCE: tolerations <[]Object>" in v2
    assert re.search(r"^   tolerationSeconds\s+<integer>", v2, re.M)
    rules = kubectl.out("explain", "roles.rules", "--output=plaintext-openapiv2")
    assert re.search(r"^   verbs\s+<\[\]string> -required-", rules, re.M)
    if cluster.sim is not None:  # asked for as protobuf, which is what the simulator serves it as
        asked = cluster.sim.requests("GET", r"^/openapi/v2$")
        assert asked and "protobuf" in asked[-1].headers.get("accept", "")
    unknown = kubectl.run("explain", "pods.spec.nosuchfield", "--output=plaintext-openapiv2", check=False)
    assert unknown.returncode != 0 and 'field "nosuchfield" does not exist' in unknown.stderr


def rbac_manifest(cluster: Cluster) -> str:
    """docs/podgahp-rbac.yaml, its namespace (``pilots``) the test's."""
    path = cluster.home / "podgahp-rbac.yaml"
    path.write_text((REPO / "docs" / "podgahp-rbac.yaml").read_text().replace(
        "namespace: pilots", "namespace: " + cluster.namespace))
    return str(path)


def resource_rules(kubectl: Kubectl, *args: str) -> Dict[str, str]:
    """``kubectl auth can-i --list``'s resource rows as {Resources: Verbs} (a non-resource row starts blank)."""
    lines = kubectl.out("auth", "can-i", "--list", *args).splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[1:] if line[:1].strip()]
    return {row[0]: row[-1] for row in rows}


def shipped_role_account(cluster: Cluster) -> Kubectl:
    """kubectl as the shipped manifest's ServiceAccount, once its Role is in effect."""
    cluster.admin.run("apply", "-f", rbac_manifest(cluster))
    account = cluster.account("podgahp")
    wait_until(lambda: can_i(account, "create", "pods"), "the Role in effect", WAIT, 0.2, lambda a: a == "yes")
    return account


def test_auth_can_i_list_shows_the_rules(cluster: Cluster) -> None:
    admin = cluster.admin.table("auth", "can-i", "--list")
    assert admin[0] == {"Resources": "*.*", "Non-Resource URLs": "[]", "Resource Names": "[]", "Verbs": "[*]"}
    assert resource_rules(cluster.admin)["selfsubjectaccessreviews.authorization.k8s.io"] == "[create]"
    account = shipped_role_account(cluster)
    granted = resource_rules(account)
    assert granted["pods"] == "[create get list watch patch delete]"
    assert granted["pods/log"] == "[get]" and granted["secrets"] == "[create get update patch]"
    assert "*.*" not in granted
    assert "pods" not in resource_rules(account, "-n", "default")


@pytest.mark.simulator_only("the simulator's denials (KubeSim.deny) are its hand, not RBAC")
def test_auth_can_i_list_says_when_denials_make_it_incomplete(cluster: Cluster) -> None:
    assert cluster.sim is not None
    cluster.sim.deny("delete", "pods", "pilots")
    review = cluster.admin.run("auth", "can-i", "--list")
    assert review.returncode == 0 and "delete pods in pilots" in review.stderr


RELEASE_ROWS = {(1, 28): "selfsubjectreviews.authentication.k8s.io"}
"""The release from which ``system:basic-user`` grants a resource, so that ``can-i --list`` shows its row."""


def release_of(version: str) -> Tuple[int, int]:
    major, minor = re.findall(r"\d+", version)[:2]
    return int(major), int(minor)


def can_i_list_of_the_shipped_role(cluster: Cluster, release: Tuple[int, int], *args: str) -> List[str]:
    """What ``kubectl auth can-i --list`` prints for the shipped Role's account, but the rows of
    what later releases than ``release`` add."""
    lines = shipped_role_account(cluster).out("auth", "can-i", "--list", *args).splitlines()
    later = [resource for since, resource in RELEASE_ROWS.items() if since > release]
    return [line for line in lines if line.split()[:1] not in ([r] for r in later)]


@pytest.mark.simulator_only("compares the simulator with the real control plane itself (it starts both)")
def test_auth_can_i_list_of_the_shipped_role_is_the_real_servers(
        cluster: Cluster, real_engine: RealEngine, tmp_path: Path) -> None:
    """The same Role, the same rights as kubectl prints them, in its namespace and in another: the
    Role's rules and, from the API server's default ClusterRoleBindings, the self-reviews, the
    discovery and health paths (twice those two ClusterRoles grant) and the service-account issuer's
    discovery paths. Only the rows of what the simulator's later release grants besides differ."""
    (tmp_path / "real").mkdir()
    real = real_view(real_engine, tmp_path / "real")
    release = release_of(real_engine.cluster.plane.release.text)
    for args in ((), ("-n", "default")):
        simulated = can_i_list_of_the_shipped_role(cluster, release, *args)
        assert simulated == can_i_list_of_the_shipped_role(real, release, *args)
        assert any("[/openid/v1/jwks]" in line for line in simulated)
        assert len([line for line in simulated if "[/healthz]" in line]) == 2


def test_cluster_info_names_the_control_plane(cluster: Cluster) -> None:
    out = ANSI.sub("", cluster.admin.out("cluster-info"))
    assert f"Kubernetes control plane is running at {cluster.engine.url}" in out


def scheduled_message(cluster: Cluster, name: str) -> str:
    pod = cluster.pod(name) or {}
    found = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
    return str(found[0].get("message") or "") if found else ""


def node_name(cluster: Cluster, name: str) -> str:
    found = cluster.wait_for(lambda: (cluster.pod(name) or {}).get("spec", {}).get("nodeName"), f"{name} scheduled")
    return str(found)


def test_cordon_taint_and_uncordon_steer_the_scheduler(cluster: Cluster) -> None:
    kubectl = cluster.admin
    assert f"node/{NODE_A} cordoned" in kubectl.out("cordon", NODE_A)
    kubectl.run("cordon", NODE_B)
    assert [n["STATUS"] for n in kubectl.table("get", "nodes")] == ["Ready,SchedulingDisabled"] * 2
    create(cluster, "p1")
    cluster.wait_for(lambda: scheduled_message(cluster, "p1") == "0/2 nodes are available: 2 node(s) were "
                     "unschedulable.", "p1 unschedulable on cordoned nodes")
    assert f"node/{NODE_A} tainted" in kubectl.out("taint", "node", NODE_A, "dedicated=pilots:NoSchedule")
    assert f"node/{NODE_A} uncordoned" in kubectl.out("uncordon", NODE_A)
    node = json.loads(kubectl.out("get", "node", NODE_A, "-o", "json"))
    assert node["spec"].get("unschedulable") is None and node["spec"]["taints"] == [
        {"key": "dedicated", "value": "pilots", "effect": "NoSchedule"}]
    # 1.20's words for the taint; "untolerated taint" from 1.26 on
    taint = "had taint {dedicated: pilots}, that the pod didn't tolerate" if cluster.real else \
        "had untolerated taint {dedicated: pilots}"
    cluster.wait_for(lambda: scheduled_message(cluster, "p1") == f"0/2 nodes are available: 1 node(s) {taint}, "
                     "1 node(s) were unschedulable.", "p1 held off by the taint")
    create(cluster, "p2", extra="  tolerations: [{key: dedicated, operator: Equal, value: pilots, "
                                "effect: NoSchedule}]\n")
    assert node_name(cluster, "p2") == NODE_A
    assert not (cluster.pod("p1") or {})["spec"].get("nodeName")
    kubectl.run("uncordon", NODE_B)
    assert node_name(cluster, "p1") == NODE_B
    kubectl.run("taint", "node", NODE_A, "dedicated-")
    assert "taints" not in kubectl.out("get", "node", NODE_A, "-o", "jsonpath={.spec}")
    refused = kubectl.run("taint", "node", NODE_A, "bad key=x:NoSchedule", check=False)
    assert refused.returncode != 0


def test_noexecute_taint_evicts_pods_that_do_not_tolerate_it(cluster: Cluster) -> None:
    kubectl = cluster.admin
    for name, tolerations in (("goes", ""), ("stays", "  tolerations: [{key: maint, operator: Exists}]\n"),
                              ("later", "  tolerations: [{key: maint, operator: Exists, effect: NoExecute, "
                                        "tolerationSeconds: 2}]\n")):
        create(cluster, name, extra=f"  nodeName: {NODE_A}\n" + tolerations)
        cluster.wait_for_phase(name, "Running")
    before = time.time()
    kubectl.run("taint", "node", NODE_A, "maint=now:NoExecute")
    tainted = json.loads(kubectl.out("get", "node", NODE_A, "-o", "json"))["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in tainted] == [("maint", "NoExecute")]
    # the simulator stamps a NoExecute taint's timeAdded; 1.20 stores what the client sent (kubectl sends none)
    assert bool(tainted[0].get("timeAdded")) is not cluster.real
    cluster.wait_for(lambda: cluster.pod("goes") is None and cluster.pod("later") is None,
                     "the pods not tolerating the taint (for long) evicted")
    stays = cluster.pod("stays")
    assert stays is not None and not stays["metadata"].get("deletionTimestamp")
    events = [e for e in json.loads(kubectl.out("get", "events", "-o", "json"))["items"]
              if e["reason"] == "TaintManagerEviction"]
    evicted = {e["involvedObject"]["name"]: e["firstTimestamp"] for e in events}
    assert sorted(evicted) == ["goes", "later"]
    # the controller's name in 1.20; taint-eviction-controller from 1.29 on
    component = "taint-controller" if cluster.real else "taint-eviction-controller"
    assert all(e["source"]["component"] == component for e in events)

    def stamp(text: str) -> float:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    # the pod tolerating the taint for 2 s went no sooner (stamps are whole seconds; the server's clock is ours)
    added = stamp(tainted[0]["timeAdded"]) if tainted[0].get("timeAdded") else int(before)
    assert stamp(evicted["later"]) - added >= 2


def test_describe_node_shows_its_lease_taints_and_pods(cluster: Cluster) -> None:
    create(cluster, "p1", extra=f"  nodeName: {NODE_A}\n")
    cluster.wait_for_phase("p1", "Running")
    cluster.admin.run("taint", "node", NODE_A, "dedicated=pilots:NoSchedule")
    described = cluster.admin.out("describe", "node", NODE_A)
    assert re.search(rf"^  HolderIdentity:\s+{NODE_A}$", described, re.M), described
    assert "Failed to get lease" not in described
    assert re.search(r"^Taints:\s+dedicated=pilots:NoSchedule$", described, re.M)
    assert re.search(rf"^  {cluster.namespace}\s+p1\s", described, re.M)  # Non-terminated Pods


def test_drain_evicts_through_the_eviction_api(cluster: Cluster) -> None:
    for name in ("a1", "a2"):
        create(cluster, name, extra=f"  nodeName: {NODE_A}\n")
        cluster.wait_for_phase(name, "Running")
    drained = cluster.admin.run("drain", NODE_A, "--force", "--timeout=60s")
    assert f"evicting pod {cluster.namespace}/a1" in drained.stderr + drained.stdout
    assert "pod/a1 evicted" in drained.stdout and f"node/{NODE_A} drained" in drained.stdout
    assert cluster.pod("a1") is None and cluster.pod("a2") is None
    assert cluster.admin.table("get", "nodes")[0]["STATUS"] == "Ready,SchedulingDisabled"
    if cluster.sim is None:
        return
    sim = cluster.sim
    assert [r.method for r in sim.requests("POST", r"/pods/a1/eviction$")] == ["POST"]
    # each pod was marked before it went, as the Eviction API marks it from 1.26 on (the watch history keeps it)
    with sim.store.lock:
        history = [e.obj for e in sim.store.events_after("pods", 0) if e.obj["metadata"]["name"] in ("a1", "a2")]
    marked = {pod["metadata"]["name"]: c["reason"] for pod in history
              for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "DisruptionTarget"}
    assert marked == {"a1": "EvictionByEvictionAPI", "a2": "EvictionByEvictionAPI"}


def test_wait_returns_when_met_and_within_its_timeout(cluster: Cluster) -> None:
    kubectl = cluster.admin
    create(cluster, "p1")
    assert "pod/p1 condition met" in kubectl.out("wait", "--for=condition=Ready", "pod/p1", "--timeout=60s")
    kubectl.run("cordon", NODE_A)
    kubectl.run("cordon", NODE_B)
    create(cluster, "stuck")
    # kubectl's own timeout ends it: the watch it opens is answered at once even while nothing changes
    for condition in ("--for=condition=Ready", "--for=delete", "--for=jsonpath={.status.phase}=Running"):
        waited = kubectl.run("wait", condition, "pod/stuck", "--timeout=2s", check=False)
        assert waited.returncode != 0 and "timed out waiting for the condition on pods/stuck" in waited.stderr
    deleting = kubectl.popen("wait", "--for=delete", "pod/stuck", "--timeout=60s")
    try:
        watch_opened(deleting, "/namespaces/%s/pods" % cluster.namespace)
        kubectl.run("delete", "pod", "stuck", "--wait=false")
        out, err = deleting.communicate(timeout=60)
    finally:
        deleting.kill()
    assert deleting.returncode == 0 and "pod/stuck condition met" in out, (out, err)


def test_rbac_manifest_is_stored_and_listed_as_applied(cluster: Cluster) -> None:
    kubectl, namespace = cluster.admin, cluster.namespace
    applied = kubectl.out("apply", "-f", rbac_manifest(cluster))
    assert applied.splitlines() == ["serviceaccount/podgahp created", "role.rbac.authorization.k8s.io/podgahp created",
                                    "rolebinding.rbac.authorization.k8s.io/podgahp created"]
    assert [r["NAME"] for r in kubectl.table("get", "roles")] == ["podgahp"]
    wide = kubectl.out("get", "rolebindings", "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert re.fullmatch(rf"podgahp\s+Role/podgahp\s+\S+\s+{namespace}/podgahp", wide[1].strip())  # no users, groups
    # the controller-manager's "default" account is in every namespace (the real engine's own account aside)
    assert [r["NAME"] for r in kubectl.table("get", "serviceaccounts") if r["NAME"] != ACCOUNT] == ["default", "podgahp"]
    everywhere = kubectl.table("get", "roles", "--all-namespaces")
    assert [(r["NAMESPACE"], r["NAME"]) for r in everywhere if r["NAMESPACE"] in (namespace, "default")] == [
        (namespace, "podgahp")]
    assert "podgahp" not in [line.split()[0] for line in kubectl.out("get", "roles", "-n", "default").splitlines()]
    role = kubectl.out("get", "role", "podgahp", "-o", "jsonpath={.rules[0].verbs}")
    assert role == '["create","get","list","watch","patch","delete"]'
    assert "unchanged" in kubectl.out("apply", "-f", rbac_manifest(cluster)).splitlines()[1]
    # the token the manifest's comments tell an admin to create acts with the Role's rights
    account = cluster.account("podgahp")
    wait_until(lambda: can_i(account, "create", "pods"), "the Role in effect", WAIT, 0.2, lambda a: a == "yes")
    assert can_i(account, "create", "pods", "-n", "default") == "no"
    missing = kubectl.run("create", "token", "nobody", check=False)
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr


def test_the_readmes_kubeconfig_for_podgahp_holds_its_identity_alone(cluster: Cluster) -> None:
    """The README's lines that make podgahp's kubeconfig, run as written (their directory moved into the
    test's, their namespace the test's): the file acts as the ServiceAccount with the Role's rights and
    holds no admin credential."""
    kubectl, namespace = cluster.admin, cluster.namespace
    kubectl.out("apply", "-n", namespace, "-f", rbac_manifest(cluster))
    block = (REPO / "README.md").read_text().split("### From install to a first pilot", 1)[1].split("```sh\n", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    lines = [line for line in block.splitlines() if "$KC" in line or line.startswith("KC=")]
    assert lines and lines[0].startswith("KC=") and "auth can-i --list" in lines[-1]
    here = str(cluster.home / "podgahp")
    script = "set -e\n" + "\n".join(line.replace("/etc/condor-ce/podgahp", here).replace(
        "-n pilots ", f"-n {namespace} ").replace("--namespace=pilots", f"--namespace={namespace}")
        for line in lines) + "\n"
    assert f"--namespace={namespace}" in script
    done = subprocess.run(["bash", "-c", script], env=kubectl.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    made = Path(here) / "kubeconfig"
    assert made.stat().st_mode & 0o777 == 0o644 and not (Path(here) / "kubeconfig.ca").exists()
    config = made.read_text()
    assert "client-key" not in config and "client-certificate" not in config
    assert cluster.sim is None or str(cluster.sim.token) not in config
    account = Kubectl(str(made), cluster.home)
    wait_until(lambda: can_i(account, "create", "pods"), "the Role in effect", WAIT, 0.2, lambda a: a == "yes")
    assert can_i(account, "create", "pods", "-n", "default") == "no"
    assert "pods" in resource_rules(account) and "create" in resource_rules(account)["pods"]  # the rights it lists
