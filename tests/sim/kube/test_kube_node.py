"""``podgahp sim node`` as a node of the real control plane, its containers run by runc from this
machine's root filesystem: the real scheduler binds to it, ``kubectl logs`` reaches its log endpoint
through the API server, a node whose agent stops is marked not ready by the node lifecycle
controller, and a burst of pods whose Events overflow the node's own log still has its statuses
written.

The real control plane alone: on the simulated API server the simulator's own kubelets are the nodes.
What the node's containers do (signals and grace periods, deadlines, limits from their cgroups, the
kernel's OOM kill, Secret updates) is tested on both engines in tests/sim/k8s/test_k8s_runtime.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import pytest

from engines import RealEngine, joined_node
from podgahp_sim.k8s.config import Taint
from podgahp_sim.kube.client import ApiError, read_kubeconfig
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.node import NodeAgent, NodeSpec
from polling import wait_until

IMAGE = "registry.example.org/host:1"
ONLY_HERE = Taint("podgahp.test/runc", "yes", "NoSchedule")


@pytest.fixture
def runc_node(real_cluster: KubeCluster, tmp_path: Path) -> Iterator[NodeAgent]:
    """A runc node of its own (tainted: only the pods of these tests go there)."""
    name = "runc-%d" % os.getpid()
    spec = NodeSpec(name, runtime="runc", images={IMAGE: "/"}, runtime_dir=str(tmp_path / "runtime"),
                    labels={"podgahp.test/node": name}, taints=(ONLY_HERE,), tick_seconds=0.05)
    with joined_node(real_cluster, spec) as agent:
        yield agent


def pod(node: NodeAgent, script: str, name: str = "p1", container: Optional[Dict[str, Any]] = None,
        **spec: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"name": "main", "image": IMAGE, "command": ["/bin/sh", "-c", script]}
    body.update(container or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [body],
                     "nodeSelector": {"podgahp.test/node": node.spec.name},
                     "tolerations": [{"key": ONLY_HERE.key, "operator": "Exists"}], **spec}}


def create(engine: RealEngine, body: Dict[str, Any]) -> None:
    engine.api.call("POST", "/api/v1/namespaces/%s/pods" % engine.namespace, body)


def kubectl(engine: RealEngine, tmp_path: Path, *args: str) -> str:
    kubeconfig = engine.write_kubeconfig(str(tmp_path / "kubeconfig"))
    done = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def terminated(found: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    statuses = ((found or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict((statuses[0].get("state") or {}).get("terminated") or {})


@pytest.mark.timeout(120)
def test_the_real_scheduler_binds_to_it_and_kubectl_logs_reaches_its_log_endpoint(
        real_engine: RealEngine, runc_node: NodeAgent, tmp_path: Path) -> None:
    create(real_engine, pod(runc_node, "echo hello from $(hostname)"))
    done = real_engine.wait_for_phase(real_engine.namespace, "p1", "Succeeded", "Failed", timeout=60)
    assert done["spec"]["nodeName"] == runc_node.spec.name and done["status"]["phase"] == "Succeeded"
    events = real_engine.api.get("/api/v1/namespaces/%s/events" % real_engine.namespace)["items"]
    # the scheduler writes events.k8s.io Events: in core/v1 they name it as reportingComponent, source is {}
    assert any(e["reason"] == "Scheduled" and e.get("reportingComponent") == "default-scheduler" for e in events)
    assert (terminated(done)["exitCode"], terminated(done)["reason"]) == (0, "Completed")
    assert kubectl(real_engine, tmp_path, "logs", "p1").splitlines() == ["hello from p1"]


@pytest.mark.timeout(150)
def test_a_node_whose_agent_stops_is_marked_not_ready(real_cluster: KubeCluster) -> None:
    name = "stopping-%d" % os.getpid()
    agent = NodeAgent(read_kubeconfig(str(real_cluster.plane.node_kubeconfig(name))),
                      NodeSpec(name, taints=(ONLY_HERE,)), client_ca_pem=real_cluster.plane.ca_pem).start()

    def ready() -> str:
        node = real_cluster.admin.get("/api/v1/nodes/" + name)
        return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")
    try:
        assert wait_until(ready, "the node Ready", done=lambda s: s == "True") == "True"
        agent.stop()
        # the controller-manager's node-monitor-grace-period (40 s by default) after the last heartbeat
        assert wait_until(ready, "the node not ready", timeout=100, interval=1, done=lambda s: s != "True") == "Unknown"
        wait_until(lambda: any(t["key"] == "node.kubernetes.io/unreachable" for t in
                               real_cluster.admin.get("/api/v1/nodes/" + name)["spec"].get("taints") or []),
                   "the node tainted unreachable", timeout=30)
    finally:
        agent.stop()
        try:
            real_cluster.admin.call("DELETE", "/api/v1/nodes/" + name)
        except ApiError:
            pass


@pytest.mark.timeout(150)
def test_a_burst_of_events_over_the_nodes_log_still_has_every_status_written(real_engine: RealEngine) -> None:
    """Pods bound at once to a node whose log keeps 2 changes: its first pass records more Events than
    that. It forwards the newest, and every pod's status still reaches the API server (the expired
    cursor once stopped every later pass of the node, and 1,000 pilots through a CE stalled so)."""
    name = "burst-%d" % os.getpid()
    spec = NodeSpec(name, taints=(ONLY_HERE,), tick_seconds=1.0, run_seconds=1.0, container_create_seconds=0.05,
                    event_log_size=2)
    names = ["b%d" % i for i in range(8)]
    with joined_node(real_engine.cluster, spec) as agent:
        for pod_name in names:
            body = pod(agent, "true", name=pod_name, nodeName=name)
            body["spec"]["containers"][0]["image"] = "pilot:1"
            del body["spec"]["nodeSelector"]
            create(real_engine, body)
        for pod_name in names:
            done = real_engine.wait_for_phase(real_engine.namespace, pod_name, "Succeeded", "Failed", timeout=60)
            assert done["status"]["phase"] == "Succeeded", done["status"]
        events = real_engine.api.get("/api/v1/namespaces/%s/events" % real_engine.namespace)["items"]
        assert any(e["reason"] == "Started" and e["involvedObject"]["name"] in names for e in events)


@pytest.mark.timeout(150)
def test_a_secret_made_after_its_pod_is_read_without_waiting_for_the_full_sync(real_engine: RealEngine) -> None:
    """A pilot's input Secret is made just after its pod: the node reads a Secret its pods name but it
    lacks about every second, not only at the full read of every Secret (here once an hour)."""
    name = "late-%d" % os.getpid()
    spec = NodeSpec(name, taints=(ONLY_HERE,), tick_seconds=0.1, run_seconds=600, sync_seconds=3600)
    with joined_node(real_engine.cluster, spec) as agent:
        body = pod(agent, "true", name="late", nodeName=name,
                   volumes=[{"name": "input", "secret": {"secretName": "late-input"}}])
        body["spec"]["containers"][0]["image"] = "pilot:1"
        del body["spec"]["nodeSelector"]
        create(real_engine, body)

        def waiting_as_the_node_last_heard() -> bool:
            # the API server's answer to the node's status write (ContainerCreating) is back at the node:
            # no later change of the pod makes the node look for the Secret again
            with agent.store.lock:
                seen = [p for p in agent._remote.values() if p["metadata"]["name"] == "late"]
            statuses = (seen[0].get("status") or {}).get("containerStatuses") or [{}] if seen else [{}]
            return ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating"
        wait_until(waiting_as_the_node_last_heard, "the pod waiting for its volume, as the node last heard")
        real_engine.api.call("POST", "/api/v1/namespaces/%s/secrets" % real_engine.namespace, {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late-input"}, "data": {}})
        running = real_engine.wait_for_phase(real_engine.namespace, "late", "Running", "Failed", timeout=30)
        assert running["status"]["phase"] == "Running", running["status"]
