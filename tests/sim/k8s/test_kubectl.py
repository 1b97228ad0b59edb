"""kubectl, the admin's everyday tool, against the simulated cluster as against a real one: HTTPS with
the kubeconfig's CA, discovery and short names, server-side tables, Events in describe, create and
apply with validation on, logs, watch, delete, auth can-i."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from podgahp_sim.k8s import KubeSim, SimConfig, SimNode
from test_k8s_support import kubectl_version

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl on this machine (make system-deps installs one)")

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
                              timeout=60)
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


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    nodes = (SimNode("node-a", cpu="4", memory="8Gi"), SimNode("node-b", cpu="4", memory="8Gi"))
    with KubeSim(SimConfig(nodes=nodes, namespaces=("default", "pilots"), tick_seconds=0.05,
                           container_create_seconds=0.05)) as running:
        yield running


@pytest.fixture
def kubectl(sim: KubeSim, tmp_path: Path) -> Kubectl:
    return Kubectl(sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace="pilots"), tmp_path)


def create(kubectl: Kubectl, tmp_path: Path, name: str, seconds: float = 60, image_key: str = "image",
           check: bool = True) -> subprocess.CompletedProcess:
    path = tmp_path / f"{name}.yaml"
    path.write_text(POD.format(name=name, seconds=seconds, image_key=image_key))
    extra = [] if kubectl.validate else ["--validate=false"]
    return kubectl.run("create", "-f", str(path), *extra, check=check)


def test_get_with_short_names_and_wide_tables(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    create(kubectl, tmp_path, "p1")
    sim.wait_for_phase("pilots", "p1", "Running")
    rows = kubectl.table("get", "po", "-o", "wide")
    assert list(rows[0]) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                             "READINESS GATES"]
    assert (rows[0]["NAME"], rows[0]["READY"], rows[0]["STATUS"], rows[0]["RESTARTS"]) == ("p1", "1/1", "Running", "0")
    assert rows[0]["NODE"] == sim.pod("pilots", "p1")["spec"]["nodeName"]  # type: ignore[index]
    assert rows[0]["IP"].startswith("10.244.")
    nodes = kubectl.table("get", "no", "-o", "wide")
    assert [n["NAME"] for n in nodes] == ["node-a", "node-b"]
    assert list(nodes[0])[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert nodes[0]["STATUS"] == "Ready" and nodes[0]["VERSION"] == sim.config.git_version
    assert "INTERNAL-IP" in nodes[0] and "CONTAINER-RUNTIME" in nodes[0]
    assert [n["NAME"] for n in kubectl.table("get", "ns")] == ["default", "pilots"]
    assert kubectl.table("get", "pc")[0]["NAME"] == "system-cluster-critical"


def test_describe_shows_events_and_get_events(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    create(kubectl, tmp_path, "p1", seconds=0.2)
    sim.wait_for_phase("pilots", "p1", "Succeeded")
    described = kubectl.out("describe", "pod", "p1")
    assert "Status:           Succeeded" in described
    events = described.split("Events:", 1)[1]
    for reason in ("Scheduled", "Pulling", "Pulled", "Created", "Started"):
        assert re.search(rf"Normal\s+{reason}\s", events), (reason, events)
    listed = kubectl.table("get", "ev")
    assert {e["REASON"] for e in listed} >= {"Scheduled", "Started"}
    assert all(e["OBJECT"] == "pod/p1" for e in listed)


def test_create_validates_on_the_server(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    if not kubectl.validate:
        pytest.skip("this kubectl validates with OpenAPI v2 protobuf, which the simulator does not serve")
    refused = create(kubectl, tmp_path, "typo", image_key="imagee", check=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in refused.stderr
    assert sim.pod("pilots", "typo") is None
    assert sim.requests("POST", "/pods$")[-1].query.get("fieldValidation") == "Strict"


def test_apply_create_then_update(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(POD.format(name="app", seconds=60, image_key="image"))
    extra = [] if kubectl.validate else ["--validate=false"]
    assert "pod/app created" in kubectl.out("apply", "-f", str(path), *extra)
    path.write_text(path.read_text().replace("labels: {app: pilot}", "labels: {app: pilot, tier: backfill}"))
    assert "pod/app configured" in kubectl.out("apply", "-f", str(path), *extra)
    labels = sim.pod("pilots", "app")["metadata"]["labels"]  # type: ignore[index]
    assert labels == {"app": "pilot", "tier": "backfill"}
    assert kubectl.table("get", "pods", "-l", "tier=backfill")[0]["NAME"] == "app"


def test_logs_watch_and_delete(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    with subprocess.Popen([str(KUBECTL), "get", "pods", "-w", "--request-timeout=0"], env=kubectl.env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as watch:
        try:
            watched(sim, kubectl, tmp_path, watch)
        finally:
            watch.kill()
    assert 'pod "p1" deleted' in kubectl.out("delete", "pod", "p1")
    assert sim.pod("pilots", "p1") is None


def watched(sim: KubeSim, kubectl: Kubectl, tmp_path: Path, watch: "subprocess.Popen[str]") -> None:
    """The pilot's lines as ``kubectl get pods -w`` prints them, up to Completed (the test's timeout
    bounds a watch that prints nothing). The pod is created once the watch is open, so that its first
    line is the pod as created (Pending), however late kubectl gets to print it."""
    sim.wait_for(lambda: any(r.query.get("watch") in ("true", "1")
                             for r in sim.requests("GET", r"/namespaces/pilots/pods$")), what="kubectl's watch open")
    create(kubectl, tmp_path, "p1", seconds=0.3)
    sim.wait_for_phase("pilots", "p1", "Succeeded")
    assert "hello from p1" in kubectl.out("logs", "p1")
    assert watch.stdout is not None
    seen: List[str] = []
    while not any("Completed" in line for line in seen):
        line = watch.stdout.readline()
        assert line, f"watch ended after {seen}"
        seen.append(line)
    assert seen[0].split()[:1] == ["NAME"]
    assert any(re.match(r"p1\s+0/1\s+(Pending|ContainerCreating)\s", line) for line in seen[1:])


def test_auth_can_i(sim: KubeSim, kubectl: Kubectl) -> None:
    assert kubectl.out("auth", "can-i", "create", "pods").strip() == "yes"
    sim.deny("delete", "pods", "pilots")
    denied = kubectl.run("auth", "can-i", "delete", "pods", check=False)
    assert denied.returncode == 1 and denied.stdout.strip() == "no"


def test_client_certificate_and_wrong_ca(sim: KubeSim, tmp_path: Path) -> None:
    certified = Kubectl(sim.write_kubeconfig(str(tmp_path / "cert-kubeconfig"), namespace="pilots",
                                             client_cert=True), tmp_path)
    assert certified.out("get", "pods").strip() in ("", "No resources found in pilots namespace.")
    other = KubeSim(SimConfig())
    stranger = tmp_path / "stranger"
    text = Path(sim.write_kubeconfig(str(stranger))).read_text()
    ca_line = next(line for line in text.splitlines() if "certificate-authority-data" in line)
    import base64
    wrong_ca = "    certificate-authority-data: " + base64.b64encode(other.ca_pem).decode()
    stranger.write_text(text.replace(ca_line, wrong_ca))
    refused = Kubectl(str(stranger), tmp_path).run("get", "pods", check=False)
    assert refused.returncode != 0 and "certificate" in refused.stderr


def test_health_endpoints_answer_ok(kubectl: Kubectl) -> None:
    for path in ("/healthz", "/readyz", "/livez"):
        assert kubectl.out("get", "--raw", path) == "ok"
    assert "readyz check passed" in kubectl.out("get", "--raw", "/readyz?verbose")


def test_auth_whoami_names_the_identity(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    rows = kubectl.table("auth", "whoami")
    assert rows[0] == {"ATTRIBUTE": "Username", "VALUE": sim.config.user}
    token = sim.service_account_token("pilots", "podgahp")
    account = Kubectl(sim.write_kubeconfig(str(tmp_path / "sa"), namespace="pilots", token=token), tmp_path)
    assert account.table("auth", "whoami")[0]["VALUE"] == "system:serviceaccount:pilots:podgahp"


RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: podgahp, namespace: {namespace}}}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
"""


def test_create_namespace_then_rbac_objects_are_stored_only_in_a_namespace_that_exists(
        kubectl: Kubectl, tmp_path: Path) -> None:
    path = tmp_path / "role.yaml"
    path.write_text(RBAC.format(namespace="later"))
    refused = kubectl.run("apply", "-f", str(path), check=False)
    assert refused.returncode != 0 and 'namespaces "later" not found' in refused.stderr
    assert "namespace/later created" in kubectl.out("create", "namespace", "later")
    again = kubectl.run("create", "namespace", "later", check=False)
    assert again.returncode != 0 and "AlreadyExists" in again.stderr
    assert "later" in [row["NAME"] for row in kubectl.table("get", "namespaces")]
    assert "role.rbac.authorization.k8s.io/podgahp created" in kubectl.out("apply", "-f", str(path))
    assert [row["NAME"] for row in kubectl.table("get", "roles", "-n", "later")] == ["podgahp"]
