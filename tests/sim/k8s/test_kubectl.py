"""kubectl, the admin's everyday tool, against the simulated cluster as against a real one: HTTPS with
the kubeconfig's CA, discovery and short names, server-side tables, Events in describe, create and
apply with validation on, logs, watch, delete, auth can-i."""

from __future__ import annotations

import calendar
import json
import os
import re
import shutil
import subprocess
import time
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


REPO = Path(__file__).resolve().parents[3]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_explain_reads_the_schemas_over_openapi_v3_and_v2(sim: KubeSim, kubectl: Kubectl) -> None:
    resources = kubectl.out("explain", "pods.spec.containers.resources")
    assert "FIELD: resources <ResourceRequirements>" in resources
    assert re.search(r"^  limits\s+<map\[string\]string>", resources, re.M)
    assert re.search(r"^  requests\s+<map\[string\]string>", resources, re.M)
    assert re.search(r"^  verbs\s+<\[\]string> -required-", kubectl.out("explain", "roles.rules"), re.M)
    assert "GROUP:      rbac.authorization.k8s.io" in kubectl.out("explain", "rolebindings")
    v2 = kubectl.out("explain", "pods.spec.tolerations", "--output=plaintext-openapiv2")
    assert "RESOURCE: tolerations <[]Object>" in v2
    assert re.search(r"^   tolerationSeconds\s+<integer>", v2, re.M)
    asked = sim.requests("GET", r"^/openapi/v2$")
    assert asked and "protobuf" in asked[-1].headers.get("accept", "")
    unknown = kubectl.run("explain", "pods.spec.nosuchfield", check=False)
    assert unknown.returncode != 0 and 'field "nosuchfield" does not exist' in unknown.stderr


def resource_rules(kubectl: Kubectl, *args: str) -> Dict[str, str]:
    """``kubectl auth can-i --list``'s resource rows as {Resources: Verbs} (a non-resource row starts blank)."""
    lines = kubectl.out("auth", "can-i", "--list", *args).splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[1:] if line[:1].strip()]
    return {row[0]: row[-1] for row in rows}


def test_auth_can_i_list_shows_the_rules(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    admin = kubectl.table("auth", "can-i", "--list")
    assert admin[0] == {"Resources": "*.*", "Non-Resource URLs": "[]", "Resource Names": "[]", "Verbs": "[*]"}
    assert resource_rules(kubectl)["selfsubjectaccessreviews.authorization.k8s.io"] == "[create]"
    kubectl.run("apply", "-f", str(REPO / "docs" / "podgahp-rbac.yaml"))
    account = Kubectl(sim.write_kubeconfig(str(tmp_path / "sa"), namespace="pilots",
                                           token=sim.service_account_token("pilots", "podgahp")), tmp_path)
    granted = resource_rules(account)
    assert granted["pods"] == "[create get list watch patch delete]"
    assert granted["pods/log"] == "[get]" and granted["secrets"] == "[create get update patch]"
    assert "*.*" not in granted
    assert "pods" not in resource_rules(account, "-n", "default")
    sim.deny("delete", "pods", "pilots")
    review = kubectl.run("auth", "can-i", "--list")
    assert review.returncode == 0 and "delete pods in pilots" in review.stderr


def test_cluster_info_names_the_control_plane(sim: KubeSim, kubectl: Kubectl) -> None:
    out = ANSI.sub("", kubectl.out("cluster-info"))
    assert f"Kubernetes control plane is running at {sim.url}" in out


def scheduled_message(sim: KubeSim, name: str) -> str:
    pod = sim.pod("pilots", name) or {}
    found = [c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"]
    return str(found[0].get("message") or "") if found else ""


def test_cordon_taint_and_uncordon_steer_the_scheduler(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    assert "node/node-a cordoned" in kubectl.out("cordon", "node-a")
    kubectl.run("cordon", "node-b")
    assert [n["STATUS"] for n in kubectl.table("get", "nodes")] == ["Ready,SchedulingDisabled"] * 2
    assert kubectl.table("get", "nodes")[0]["STATUS"] == "Ready,SchedulingDisabled"
    create(kubectl, tmp_path, "p1")
    sim.wait_for(lambda: scheduled_message(sim, "p1") == "0/2 nodes are available: 2 node(s) were unschedulable.",
                 what="p1 unschedulable on cordoned nodes")
    assert "node/node-a tainted" in kubectl.out("taint", "node", "node-a", "dedicated=pilots:NoSchedule")
    assert "node/node-a uncordoned" in kubectl.out("uncordon", "node-a")
    node = sim.api.cluster.node_objects()[0]
    assert node["spec"].get("unschedulable") is None and node["spec"]["taints"] == [
        {"key": "dedicated", "value": "pilots", "effect": "NoSchedule"}]
    sim.wait_for(lambda: scheduled_message(sim, "p1") == "0/2 nodes are available: 1 node(s) had untolerated "
                 "taint {dedicated: pilots}, 1 node(s) were unschedulable.", what="p1 held off by the taint")
    tolerant = tmp_path / "tolerant.yaml"
    tolerant.write_text(POD.format(name="p2", seconds=60, image_key="image")
                        + "  tolerations: [{key: dedicated, operator: Equal, value: pilots, effect: NoSchedule}]\n")
    kubectl.run("create", "-f", str(tolerant))
    assert sim.wait_for_pod("pilots", "p2", lambda p: bool(p and p["spec"].get("nodeName")))["spec"][
        "nodeName"] == "node-a"
    assert not (sim.pod("pilots", "p1") or {})["spec"].get("nodeName")
    kubectl.run("uncordon", "node-b")
    assert sim.wait_for_pod("pilots", "p1", lambda p: bool(p and p["spec"].get("nodeName")))["spec"][
        "nodeName"] == "node-b"
    kubectl.run("taint", "node", "node-a", "dedicated-")
    assert "taints" not in kubectl.out("get", "node", "node-a", "-o", "jsonpath={.spec}")
    refused = kubectl.run("taint", "node", "node-a", "bad key=x:NoSchedule", check=False)
    assert refused.returncode != 0


def test_noexecute_taint_evicts_pods_that_do_not_tolerate_it(sim: KubeSim, kubectl: Kubectl,
                                                             tmp_path: Path) -> None:
    for name, tolerations in (("goes", ""), ("stays", "  tolerations: [{key: maint, operator: Exists}]\n"),
                              ("later", "  tolerations: [{key: maint, operator: Exists, effect: NoExecute, "
                                        "tolerationSeconds: 2}]\n")):
        path = tmp_path / f"{name}.yaml"
        path.write_text(POD.format(name=name, seconds=60, image_key="image") + "  nodeName: node-a\n" + tolerations)
        kubectl.run("create", "-f", str(path))
        sim.wait_for_phase("pilots", name, "Running")
    kubectl.run("taint", "node", "node-a", "maint=now:NoExecute")
    tainted = json.loads(kubectl.out("get", "node", "node-a", "-o", "json"))["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in tainted] == [("maint", "NoExecute")] and tainted[0]["timeAdded"]
    sim.wait_for(lambda: sim.pod("pilots", "goes") is None and sim.pod("pilots", "later") is None,
                 what="the pods not tolerating the taint (for long) evicted")
    stays = sim.pod("pilots", "stays")
    assert stays is not None and not stays["metadata"].get("deletionTimestamp")
    events = json.loads(kubectl.out("get", "events", "-o", "json"))["items"]
    evicted = {e["involvedObject"]["name"]: e["firstTimestamp"] for e in events
               if e["reason"] == "TaintManagerEviction"}
    assert sorted(evicted) == ["goes", "later"]
    assert all(e["source"]["component"] == "taint-eviction-controller" for e in events
               if e["reason"] == "TaintManagerEviction")

    def stamp(text: str) -> float:
        return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))
    # the pod tolerating the taint for 2 s went no sooner (stamps are whole seconds)
    assert stamp(evicted["later"]) - stamp(tainted[0]["timeAdded"]) >= 2


def test_describe_node_shows_its_lease_taints_and_pods(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    path = tmp_path / "p1.yaml"
    path.write_text(POD.format(name="p1", seconds=60, image_key="image") + "  nodeName: node-a\n")
    kubectl.run("create", "-f", str(path))
    sim.wait_for_phase("pilots", "p1", "Running")
    kubectl.run("taint", "node", "node-a", "dedicated=pilots:NoSchedule")
    described = kubectl.out("describe", "node", "node-a")
    assert re.search(r"^  HolderIdentity:\s+node-a$", described, re.M), described
    assert "Failed to get lease" not in described
    assert re.search(r"^Taints:\s+dedicated=pilots:NoSchedule$", described, re.M)
    assert re.search(r"^  pilots\s+p1\s", described, re.M)  # Non-terminated Pods


def test_drain_evicts_through_the_eviction_api(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    for name in ("a1", "a2"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(POD.format(name=name, seconds=60, image_key="image") + "  nodeName: node-a\n")
        kubectl.run("create", "-f", str(path))
        sim.wait_for_phase("pilots", name, "Running")
    drained = kubectl.run("drain", "node-a", "--force", "--timeout=60s")
    assert "evicting pod pilots/a1" in drained.stderr + drained.stdout
    assert "pod/a1 evicted" in drained.stdout and "node/node-a drained" in drained.stdout
    assert sim.pod("pilots", "a1") is None and sim.pod("pilots", "a2") is None
    assert [r.method for r in sim.requests("POST", r"/pods/a1/eviction$")] == ["POST"]
    # each pod was marked before it went, as the Eviction API marks it (the watch history keeps it)
    with sim.store.lock:
        history = [e.obj for e in sim.store.events_after("pods", 0) if e.obj["metadata"]["name"] in ("a1", "a2")]
    marked = {pod["metadata"]["name"]: c["reason"] for pod in history
              for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "DisruptionTarget"}
    assert marked == {"a1": "EvictionByEvictionAPI", "a2": "EvictionByEvictionAPI"}
    assert kubectl.table("get", "nodes")[0]["STATUS"] == "Ready,SchedulingDisabled"


def test_wait_returns_when_met_and_within_its_timeout(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    create(kubectl, tmp_path, "p1")
    assert "pod/p1 condition met" in kubectl.out("wait", "--for=condition=Ready", "pod/p1", "--timeout=30s")
    kubectl.run("cordon", "node-a")
    kubectl.run("cordon", "node-b")
    create(kubectl, tmp_path, "stuck")
    # kubectl's own timeout ends it: the watch it opens is answered at once even while nothing changes
    for condition in ("--for=condition=Ready", "--for=delete", "--for=jsonpath={.status.phase}=Running"):
        waited = subprocess.run([str(KUBECTL), "wait", condition, "pod/stuck", "--timeout=2s"], env=kubectl.env,
                                capture_output=True, text=True, timeout=30)
        assert waited.returncode != 0 and "timed out waiting for the condition on pods/stuck" in waited.stderr
    sim.clear_requests()
    deleting = subprocess.Popen([str(KUBECTL), "wait", "--for=delete", "pod/stuck", "--timeout=60s"],
                                env=kubectl.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sim.wait_for(lambda: any(r.query.get("watch") in ("true", "1") and "stuck" in r.query.get("fieldSelector", "")
                                 for r in sim.requests("GET", r"/namespaces/pilots/pods$")),
                     what="kubectl wait's watch open")
        kubectl.run("delete", "pod", "stuck", "--wait=false")
        out, err = deleting.communicate(timeout=60)
    finally:
        deleting.kill()
    assert deleting.returncode == 0 and "pod/stuck condition met" in out, (out, err)


def test_rbac_manifest_is_stored_and_listed_as_applied(sim: KubeSim, kubectl: Kubectl, tmp_path: Path) -> None:
    applied = kubectl.out("apply", "-f", str(REPO / "docs" / "podgahp-rbac.yaml"))
    assert applied.splitlines() == ["serviceaccount/podgahp created", "role.rbac.authorization.k8s.io/podgahp created",
                                    "rolebinding.rbac.authorization.k8s.io/podgahp created"]
    assert [r["NAME"] for r in kubectl.table("get", "roles")] == ["podgahp"]
    wide = kubectl.out("get", "rolebindings", "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert re.fullmatch(r"podgahp\s+Role/podgahp\s+\S+\s+pilots/podgahp", wide[1].strip())  # no users, no groups
    assert [r["NAME"] for r in kubectl.table("get", "serviceaccounts")] == ["podgahp"]
    everywhere = kubectl.table("get", "roles", "--all-namespaces")
    assert [(r["NAMESPACE"], r["NAME"]) for r in everywhere] == [("pilots", "podgahp")]
    assert kubectl.out("get", "roles", "-n", "default").strip() in ("", "No resources found in default namespace.")
    role = kubectl.out("get", "role", "podgahp", "-o", "jsonpath={.rules[0].verbs}")
    assert role == '["create","get","list","watch","patch","delete"]'
    assert "unchanged" in kubectl.out("apply", "-f", str(REPO / "docs" / "podgahp-rbac.yaml")).splitlines()[1]
    # the token the manifest's comments tell an admin to create acts with the Role's rights
    token = kubectl.out("create", "token", "podgahp").strip()
    account = Kubectl(sim.write_kubeconfig(str(tmp_path / "sa"), namespace="pilots", token=token), tmp_path)
    assert account.out("auth", "can-i", "create", "pods").strip() == "yes"
    assert account.run("auth", "can-i", "create", "pods", "-n", "default", check=False).stdout.strip() == "no"
    missing = kubectl.run("create", "token", "nobody", check=False)
    assert missing.returncode != 0 and 'serviceaccounts "nobody" not found' in missing.stderr


def test_the_readmes_kubeconfig_for_podgahp_holds_its_identity_alone(sim: KubeSim, kubectl: Kubectl,
                                                                    tmp_path: Path) -> None:
    """The README's lines that make podgahp's kubeconfig, run as written (their directory moved into the
    test's): the file acts as the ServiceAccount with the Role's rights and holds no admin credential."""
    kubectl.out("apply", "-n", "pilots", "-f", str(REPO / "docs" / "podgahp-rbac.yaml"))
    block = (REPO / "README.md").read_text().split("### From install to a first pilot", 1)[1].split("```sh\n", 1)[1]
    block = block.split("```", 1)[0].replace("\\\n", " ")
    lines = [line for line in block.splitlines() if "$KC" in line or line.startswith("KC=")]
    assert lines and lines[0].startswith("KC=") and "auth can-i --list" in lines[-1]
    here = str(tmp_path / "podgahp")
    script = "set -e\n" + "\n".join(line.replace("/etc/condor-ce/podgahp", here) for line in lines) + "\n"
    done = subprocess.run(["bash", "-c", script], env=kubectl.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pods" in done.stdout and "create" in done.stdout  # the rights it lists
    made = Path(here) / "kubeconfig"
    assert made.stat().st_mode & 0o777 == 0o644 and not (Path(here) / "kubeconfig.ca").exists()
    config = made.read_text()
    assert "client-key" not in config and "client-certificate" not in config and str(sim.token) not in config
    account = Kubectl(str(made), tmp_path)
    assert "system:serviceaccount:pilots:podgahp" in account.out("auth", "whoami")
    assert account.out("auth", "can-i", "create", "pods").strip() == "yes"
    assert account.run("auth", "can-i", "create", "pods", "-n", "default", check=False).stdout.strip() == "no"
