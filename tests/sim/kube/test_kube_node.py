"""``podgahp sim node`` as a node of the real control plane, its containers run by runc from this
machine's root filesystem: the real scheduler binds to it, ``kubectl logs`` reaches its log endpoint
through the API server, a deletion is graceful (SIGTERM, grace, the final delete), a pod past its
``activeDeadlineSeconds`` leaves no process, a container reads its memory limit from its cgroup, and
a node whose agent stops is marked not ready by the node lifecycle controller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

from engines import RealEngine
from podgahp_sim.k8s.config import Taint
from podgahp_sim.k8s.runc import cgroup_dirs
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
    agent = NodeAgent(read_kubeconfig(str(real_cluster.plane.node_kubeconfig(name))), spec,
                      client_ca_pem=real_cluster.plane.ca_pem).start()
    try:
        yield agent
    finally:
        agent.stop()
        real_cluster.admin.call("DELETE", "/api/v1/nodes/" + name)


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


def log_so_far(engine: RealEngine, name: str = "p1") -> List[str]:
    """What the container printed so far (nothing while it waits to start, nor while the node has not
    yet seen the pod the scheduler bound to it: its log endpoint answers 404, which the API server
    passes on)."""
    try:
        return engine.logs(engine.namespace, name)
    except ApiError as e:
        if (e.status == 400 and "waiting to start" in e.message) or e.status == 404:
            return []
        raise


def terminated(found: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    statuses = ((found or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict((statuses[0].get("state") or {}).get("terminated") or {})


def processes_in(node: NodeAgent, uid: str) -> List[int]:
    """The processes still in the cgroups of a pod's containers on this node."""
    run = node.cluster.runs.get(uid)
    found: List[int] = []
    for c in run.containers if run is not None else []:
        for directory in cgroup_dirs(c.real.cgroup).values() if c.real is not None else []:
            try:
                with open(os.path.join(directory, "cgroup.procs")) as f:
                    found += [int(p) for p in f.read().split()]
            except OSError:
                continue
    return found


@pytest.mark.timeout(120)
def test_the_real_scheduler_binds_to_it_and_kubectl_logs_reads_the_memory_limit_from_the_cgroup(
        real_engine: RealEngine, runc_node: NodeAgent, tmp_path: Path) -> None:
    script = ("m=$(grep ':memory:' /proc/self/cgroup | cut -d: -f3); "
              "if [ -n \"$m\" ]; then cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes; "
              "else cat /sys/fs/cgroup/memory.max; fi")
    limits = {"cpu": "500m", "memory": "96Mi"}
    create(real_engine, pod(runc_node, script, container={"resources": {"limits": limits}}))
    done = real_engine.wait_for_phase(real_engine.namespace, "p1", "Succeeded", "Failed", timeout=60)
    assert done["spec"]["nodeName"] == runc_node.spec.name and done["status"]["phase"] == "Succeeded"
    events = real_engine.api.get("/api/v1/namespaces/%s/events" % real_engine.namespace)["items"]
    # the scheduler writes events.k8s.io Events: in core/v1 they name it as reportingComponent, source is {}
    assert any(e["reason"] == "Scheduled" and e.get("reportingComponent") == "default-scheduler" for e in events)
    assert (terminated(done)["exitCode"], terminated(done)["reason"]) == (0, "Completed")
    assert kubectl(real_engine, tmp_path, "logs", "p1").split() == [str(96 * 2 ** 20)]


@pytest.mark.timeout(120)
def test_a_pod_past_its_deadline_leaves_no_process(real_engine: RealEngine, runc_node: NodeAgent) -> None:
    create(real_engine, pod(runc_node, "trap 'exit 143' TERM; echo started; while true; do sleep 0.05; done",
                            activeDeadlineSeconds=2, terminationGracePeriodSeconds=3))
    running = real_engine.wait_for_phase(real_engine.namespace, "p1", "Running", timeout=60)
    uid = running["metadata"]["uid"]
    wait_until(lambda: processes_in(runc_node, uid), "the container's processes")
    done = real_engine.wait_for_phase(real_engine.namespace, "p1", "Failed", timeout=30)
    assert (done["status"]["reason"], done["status"]["message"]) == (
        "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    wait_until(lambda: terminated(real_engine.pod(real_engine.namespace, "p1")), "the container's end", timeout=15)
    assert terminated(real_engine.pod(real_engine.namespace, "p1"))["exitCode"] == 143
    assert processes_in(runc_node, uid) == []


@pytest.mark.timeout(120)
def test_a_deletion_is_graceful_and_ends_with_the_final_delete(real_engine: RealEngine,
                                                               runc_node: NodeAgent) -> None:
    trap = "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    create(real_engine, pod(runc_node, trap))
    real_engine.wait_for_phase(real_engine.namespace, "p1", "Running", timeout=60)
    wait_until(lambda: log_so_far(real_engine)[:1] == ["ready"], "the trap set")
    started = time.monotonic()
    real_engine.api.call("DELETE", "/api/v1/namespaces/%s/pods/p1" % real_engine.namespace, {"gracePeriodSeconds": 30})
    seen: Dict[str, Any] = {}

    def gone() -> bool:
        found = real_engine.pod(real_engine.namespace, "p1")
        if terminated(found):
            seen.setdefault("terminated", terminated(found))
        return found is None
    wait_until(gone, "the pod deleted", timeout=30)
    assert time.monotonic() - started < 20  # it exited on SIGTERM: the 30 s grace was not waited out
    assert seen["terminated"]["exitCode"] == 0


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


@pytest.mark.timeout(120)
def test_a_secret_update_reaches_the_running_container(real_engine: RealEngine, runc_node: NodeAgent) -> None:
    base = "/api/v1/namespaces/%s/secrets" % real_engine.namespace
    real_engine.api.call("POST", base, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "proxy"},
                                        "stringData": {"proxy": "first"}})
    create(real_engine, pod(runc_node, "while true; do cat /in/proxy; echo; sleep 0.1; done",
                            container={"volumeMounts": [{"name": "in", "mountPath": "/in"}]},
                            volumes=[{"name": "in", "secret": {"secretName": "proxy"}}],
                            terminationGracePeriodSeconds=0))
    wait_until(lambda: "first" in log_so_far(real_engine), "the first content read", timeout=60)
    real_engine.api.call("PUT", base + "/proxy", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "proxy"},
                                                  "stringData": {"proxy": "second"}})
    # the node reads the pods' Secrets again every sync (5 s), as a kubelet every minute or so
    wait_until(lambda: "second" in log_so_far(real_engine), "the new content read", timeout=30)


@pytest.mark.timeout(120)
def test_memory_over_the_limit_is_killed_by_the_kernel(real_engine: RealEngine, runc_node: NodeAgent) -> None:
    hog = "%s -c 'x = bytearray(200 * 2 ** 20)'" % sys.executable
    create(real_engine, pod(runc_node, "echo start; %s; echo survived; sleep 60" % hog,
                            container={"resources": {"limits": {"memory": "64Mi"}}}))
    done = real_engine.wait_for_phase(real_engine.namespace, "p1", "Failed", "Succeeded", timeout=60)
    assert done["status"]["phase"] == "Failed"
    assert (terminated(done)["exitCode"], terminated(done)["reason"]) == (137, "OOMKilled")
    # the kernel killed the hog; the kubelet then the rest of the container (cgroup v2's memory.oom.group)
    lines = real_engine.logs(real_engine.namespace, "p1")
    assert lines[0] == "start" and set(lines[1:]) <= {"Killed", "survived"}
