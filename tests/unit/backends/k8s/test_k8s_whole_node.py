"""Whole-node pilots get a pod the size of a whole node of their queue, or are held saying why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml
from kubernetes.utils import parse_quantity

from gahp.agent import Agent
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.backends.k8s.wholenode import NODES_CACHE_SECONDS, WholeNodeSizer, allows, largest, quantity
from gahp.core.config import Knobs
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.core.errors import AuthError, ConfigError, InvalidJob
from engines import ACCOUNT, RealEngine, shipped_role
from paths import DOCS
from polling import wait_until
from k8s_helpers import NAMESPACE, BackendFactory, knobs_for, make_job, pod_of
from podgahp_sim.k8s import KubeSim, SimConfig, SimNode, Taint

pytestmark = pytest.mark.both_engines


def node(name: str, cpu: str, memory: str, labels: Dict[str, str] = {}, taints: List[Dict[str, str]] = [],
         unschedulable: bool = False) -> Dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)},
            "spec": {"taints": list(taints), "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": memory}}}


NODES = [
    node("small", "4", "16Gi"),
    node("big-gpu", "64", "256Gi", {"gpu": "yes"}, [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]),
    node("big-cordoned", "96", "512Gi", unschedulable=True),
    node("medium", "15500m", "64Gi", {"pool": "pilots"}),
    node("odd", "not-a-quantity", "1Gi"),
]


@pytest.mark.parametrize("value, expected", [("4", 4.0), ("3500m", 3.5), ("16Gi", 16 * 2 ** 30), ("1k", 1000.0),
                                             ("64Mi", 64 * 2 ** 20), ("x", None), ("1Qi", None)])
def test_quantities(value: str, expected: object) -> None:
    assert quantity(value) == expected


@pytest.mark.parametrize("template, expected", [
    ({"spec": {}}, ("medium", 15, 64 * 1024 * 95 // 100)),  # the cordoned node and the tainted one are out
    ({"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}, ("big-gpu", 64, 256 * 1024 * 95 // 100)),
    ({"spec": {"tolerations": [{"key": "gpu", "value": "false"}]}}, ("medium", 15, 64 * 1024 * 95 // 100)),
    ({"spec": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"gpu": "yes"}}}, ("big-gpu", 64, 256 * 1024 * 95 // 100)),
    ({"spec": {"nodeSelector": {"pool": "pilots"}}}, ("medium", 15, 62259)),
    ({"spec": {"nodeSelector": {"pool": "none"}}}, None),
], ids=["plain", "tolerates-gpu", "wrong-toleration", "selects-gpu", "selects-pool", "selects-nothing"])
def test_largest_node_the_template_allows(template: Dict[str, Any], expected: object) -> None:
    found = largest(NODES, template)
    if expected is None:
        assert found is None
        return
    assert found is not None
    name, cpus, memory = expected  # type: ignore[misc]
    assert (found.cpus, found.memory_mb) == (cpus, memory) and f"node {name} " in found.source


def test_no_schedule_taint_without_effect_match() -> None:
    tainted = node("t", "8", "8Gi", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    assert allows(tainted, {"spec": {}})  # only NoSchedule and NoExecute keep pods away


def queue(**knobs: str):  # type: ignore[no-untyped-def]
    return KubernetesSettings.from_knobs(Knobs(dict({"PODGAHP_K8S_QUEUES": "cpu"}, **knobs))).queue("cpu")


def test_sizes_and_caps(tmp_path: Path) -> None:
    listed: List[int] = []
    now = [0.0]

    def list_nodes(_: object) -> List[Dict[str, Any]]:
        listed.append(1)
        return NODES

    sizer = WholeNodeSizer(list_nodes, clock=lambda: now[0])
    job = make_job(tmp_path, whole_node=True, cpus=1, memory_mb=2000)
    sized = sizer.sized(job, queue(PODGAHP_K8S_MAX_CPUS="16", PODGAHP_K8S_MAX_MEMORY_MB="65536"), {"spec": {}})
    assert (sized.cpus, sized.memory_mb) == (15, 62259)
    with pytest.raises(InvalidJob, match=r"15 cores of node medium .*allows at most 8 per pilot \(PODGAHP_K8S_CPU_MAX_CPUS"):
        sizer.sized(job, queue(), {"spec": {}})
    assert len(listed) == 1  # one list of nodes for a while
    now[0] += NODES_CACHE_SECONDS + 1
    sizer.size(queue(), {"spec": {}})
    assert len(listed) == 2
    fixed = sizer.sized(job, queue(PODGAHP_K8S_CPU_WHOLE_NODE_CPUS="6", PODGAHP_K8S_CPU_WHOLE_NODE_MEMORY_MB="24000"),
                        {"spec": {}})
    assert (fixed.cpus, fixed.memory_mb) == (6, 24000) and len(listed) == 2  # no listing needed


def test_what_cannot_be_sized_is_refused_saying_why(tmp_path: Path) -> None:
    def forbidden(_: object) -> List[Dict[str, Any]]:
        raise AuthError("403 Forbidden: nodes is forbidden")

    with pytest.raises(InvalidJob, match=r"listing the cluster's nodes is not allowed .*PODGAHP_K8S_CPU_WHOLE_NODE_CPUS"):
        WholeNodeSizer(forbidden).size(queue(), {"spec": {}})
    with pytest.raises(InvalidJob, match=r"queue cpu runs no whole-node pilots \(PODGAHP_K8S_CPU_WHOLE_NODE = hold\)"):
        WholeNodeSizer(forbidden).size(queue(PODGAHP_K8S_CPU_WHOLE_NODE="hold"), {"spec": {}})
    with pytest.raises(InvalidJob, match="no node of the cluster takes queue cpu's pods"):
        WholeNodeSizer(lambda _: NODES).size(queue(), {"spec": {"nodeSelector": {"pool": "none"}}})


@pytest.mark.parametrize("knobs, message", [
    ({"PODGAHP_K8S_WHOLE_NODE": "always"}, "is not one of largest, hold"),
    ({"PODGAHP_K8S_WHOLE_NODE_CPUS": "8"}, "set both, or neither"),
], ids=["mode", "half-a-size"])
def test_whole_node_knobs(knobs: Dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        queue(**knobs)


@pytest.fixture
def sim() -> Any:
    """A cluster of a small node, a large tainted GPU node and a medium node labelled for pilots."""
    nodes = (SimNode("small", cpu="4", memory="16Gi"),
             SimNode("gpu", cpu="32", memory="128Gi", gpus=4, labels={"gpu": "yes"},
                     taints=(Taint("gpu", "true", "NoSchedule"),)),
             SimNode("medium", cpu="8", memory="32Gi", labels={"pool": "pilots"}))
    with KubeSim(SimConfig(namespaces=(NAMESPACE,), nodes=nodes, tick_seconds=0.05, run_seconds=0.5,
                           container_create_seconds=0.05)) as running:
        yield running


def test_a_whole_node_pilot_gets_the_largest_node_of_its_queue(make_backend: BackendFactory, sim: KubeSim,
                                                                tmp_path: Path) -> None:
    template = tmp_path / "gpu.yaml"
    template.write_text("apiVersion: v1\nkind: Pod\nspec:\n  nodeSelector: {gpu: \"yes\"}\n  tolerations:\n"
                        "  - {key: gpu, operator: Exists, effect: NoSchedule}\n  containers: [{name: pilot}]\n")
    backend = make_backend(PODGAHP_K8S_QUEUES="cpu, gpu", PODGAHP_K8S_GPU_POD_TEMPLATE=str(template),
                           PODGAHP_K8S_MAX_MEMORY_MB="200000")
    plain = backend.submit(make_job(tmp_path, sandbox="ce_h_1.0_1", whole_node=True, queue="cpu"))
    gpu = backend.submit(make_job(tmp_path, sandbox="ce_h_2.0_1", whole_node=True, queue="gpu"))
    ordinary = backend.submit(make_job(tmp_path, sandbox="ce_h_3.0_1", queue="cpu", cpus=1, memory_mb=256))

    def requests(job_id: str) -> Dict[str, str]:
        pod = pod_of(sim, job_id)
        assert pod is not None
        return pod["spec"]["containers"][0]["resources"]["requests"]  # type: ignore[index, no-any-return]

    assert (requests(plain)["cpu"], requests(plain)["memory"]) == ("8", f"{32 * 1024 * 95 // 100}Mi")
    assert (requests(gpu)["cpu"], requests(gpu)["memory"]) == ("32", f"{128 * 1024 * 95 // 100}Mi")
    assert (requests(ordinary)["cpu"], requests(ordinary)["memory"]) == ("1", "256Mi")


@pytest.mark.simulator_only("starts simulators of its own")
def test_a_whole_node_pilot_is_held_where_nodes_cannot_be_listed(tmp_path: Path) -> None:
    from podgahp_sim.k8s import RbacRule

    with KubeSim(SimConfig(namespaces=(NAMESPACE,), rbac_deny=(RbacRule("list", "nodes"),))) as denied:
        from gahp.backends.k8s.backend import KubernetesBackend

        config = denied.write_kubeconfig(str(tmp_path / "denied"), namespace=NAMESPACE)
        backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(config))))
        try:
            with pytest.raises(InvalidJob, match="listing the cluster's nodes is not allowed"):
                backend.submit(make_job(tmp_path, whole_node=True))
            assert not denied.pods(NAMESPACE)
        finally:
            backend.close()


def docs_node_reader() -> List[Dict[str, Any]]:
    """The ClusterRole and ClusterRoleBinding that docs/kubernetes.md gives for whole-node pilots."""
    text = (DOCS / "kubernetes.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "podgahp-node-reader" in b]
    return [d for d in yaml.safe_load_all(block) if d]


def test_the_node_reader_cluster_role_of_the_docs_works_as_written(real_engine: RealEngine, tmp_path: Path) -> None:
    """On the real control plane, as the shipped Role's account: a whole-node pilot is held saying
    which right it lacks, and with the docs' ClusterRole bound (to the test's account: the docs name
    ``podgahp`` in ``pilots``) it gets the largest node's whole cores and 95% of its memory."""
    engine = real_engine
    engine.enforce_role(shipped_role())
    kubeconfig = engine.write_kubeconfig(str(tmp_path / "kubeconfig"))

    def backend_submit(sandbox: str) -> str:
        backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig))))
        try:
            return backend.submit(make_job(tmp_path, sandbox=sandbox, whole_node=True))
        finally:
            backend.close()

    with pytest.raises(InvalidJob, match="listing the cluster's nodes is not allowed"):
        backend_submit("ce_wn_1.0_1")
    cluster_role, binding = docs_node_reader()
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "podgahp", "namespace": NAMESPACE}]
    binding["subjects"] = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": engine.namespace}]
    made = []
    try:
        for doc, path in ((cluster_role, "clusterroles"), (binding, "clusterrolebindings")):
            engine.api.call("POST", "/apis/rbac.authorization.k8s.io/v1/" + path, doc)
            made.append("/apis/rbac.authorization.k8s.io/v1/%s/%s" % (path, doc["metadata"]["name"]))
        wait_until(lambda: engine._allowed("list", "", "nodes", ""), "the docs' ClusterRole in effect")
        job_id = backend_submit("ce_wn_2.0_1")
        nodes = engine.api.get("/api/v1/nodes")["items"]
        cpus = max(int(quantity(n["status"]["allocatable"]["cpu"]) or 0) for n in nodes)
        memory_mib = max(int(quantity(n["status"]["allocatable"]["memory"]) or 0) for n in nodes) // 2 ** 20
        pod = engine.pod(engine.namespace, job_id.split("/")[2])
        assert pod is not None
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert (requests["cpu"], parse_quantity(requests["memory"])) == (
            str(cpus), parse_quantity(f"{memory_mib * 95 // 100}Mi"))
    finally:
        for path in reversed(made):
            engine.api.call("DELETE", path)
