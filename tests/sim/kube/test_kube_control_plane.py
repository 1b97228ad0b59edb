"""The real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from
Debian's sources) as ``podgahp_sim.kube`` runs it: served on loopback, ready, a cluster for kubectl
and the official client, and gone without a trace after a stop, and after its owner is killed with -9.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from kubernetes import client, config

from engines import control_plane_binaries
from podgahp_sim.kube.client import ApiError
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.controlplane import ControlPlane, clean_dead_instances, processes_of
from polling import wait_until


def listening_ports(pids: List[int]) -> List[str]:
    """The TCP sockets in LISTEN state the processes ``pids`` hold, as ``address:port``."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:
                    address, port = fields[1].split(":")
                    found.append("%s:%d" % (address, int(port, 16)))
    return found


def test_the_control_plane_is_a_cluster_on_loopback_only(real_cluster: KubeCluster, tmp_path: Path) -> None:
    plane = real_cluster.plane
    pids = [p.pid for p in plane.procs.values()]
    ports = listening_ports(pids)
    assert ports and all(p.startswith("0100007F:") for p in ports), ports  # 127.0.0.1, nothing else
    # the unauthenticated ports of 1.20 (8080, 10251, 10252) stay closed
    assert not {p.split(":")[1] for p in ports} & {"8080", "10251", "10252"}
    path = real_cluster.write_kubeconfig(str(tmp_path / "kubeconfig"))
    api = config.new_client_from_config(config_file=path, persist_config=False)
    try:
        version = client.VersionApi(api).get_code()
        assert version.git_version == plane.release.text.split()[-1]
        nodes = client.CoreV1Api(api).list_node().items
        assert sorted(n.metadata.name for n in nodes) == ["sim-node-1", "sim-node-2"]
        ready = [c for n in nodes for c in n.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True", "True"]
    finally:
        api.close()
    out = subprocess.run(["kubectl", "--kubeconfig", path, "get", "--raw", "/readyz?verbose"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "readyz check passed" in out.stdout, out.stderr
    authz = subprocess.run(["kubectl", "--kubeconfig", path, "-n", "kube-system", "get", "secrets",
                            "--as", "system:node:sim-node-1", "--as-group", "system:nodes"],
                           capture_output=True, text=True, timeout=60)
    assert authz.returncode != 0 and "forbidden" in authz.stderr  # Node authorization: a node lists no Secrets


def test_stop_leaves_no_process_port_or_file(tmp_path: Path) -> None:
    plane = ControlPlane(control_plane_binaries(), base=tmp_path / "planes").start()
    pids = [p.pid for p in plane.procs.values()]
    port, directory = plane.port, plane.directory
    assert len(pids) == 4 and processes_of(directory)
    plane.stop()
    assert processes_of(directory) == [] and not directory.exists()
    assert all(not os.path.exists("/proc/%d" % pid) for pid in pids)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


OWNER = """
import json, sys
from pathlib import Path
from podgahp_sim.kube.controlplane import ControlPlane
plane = ControlPlane(Path(sys.argv[1]), base=Path(sys.argv[2])).start()
print(json.dumps({"directory": str(plane.directory), "port": plane.port}), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(400)
def test_what_a_killed_owner_left_is_removed_by_the_next_start(tmp_path: Path) -> None:
    base = tmp_path / "planes"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(control_plane_binaries()), str(base)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        started = json.loads(owner.stdout.readline())
        directory = Path(started["directory"])
        left = processes_of(directory)
        assert len(left) == 4
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        assert processes_of(directory) == left  # its processes outlive it: a new session each
        assert clean_dead_instances(base) == [directory]
        wait_until(lambda: not any(os.path.exists("/proc/%d" % pid) for pid in left), "the processes gone")
        assert not directory.exists() and processes_of(directory) == []
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", started["port"])) != 0
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(30)
        for pipe in (owner.stdin, owner.stdout):
            if pipe is not None:
                pipe.close()
        for pid in processes_of(base):
            os.kill(pid, signal.SIGKILL)


def test_a_custom_resource_is_stored_and_read_back(real_cluster: KubeCluster) -> None:
    """The vendored reflect2 1.0.1 crashed kube-apiserver (SIGSEGV) under Go >= 1.18 on the first
    custom-resource create; the build replaces it with Debian's 1.0.2."""
    api = real_cluster.admin
    api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    try:
        wait_until(lambda: any(c["type"] == "Established" and c["status"] == "True" for c in api.get(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org")["status"].get(
            "conditions") or []), "the CRD established")
        path = "/apis/example.org/v1/namespaces/default/widgets"
        wait_until(lambda: _served(real_cluster, path), "the custom resource served")
        api.call("POST", path, {"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w1"},
                                "spec": {"nested": {"a": "b"}, "list": [1, 2]}})
        assert api.get(path + "/w1")["spec"] == {"nested": {"a": "b"}, "list": [1, 2]}
        assert real_cluster.plane.procs["kube-apiserver"].poll() is None
    finally:
        api.call("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org")


def _served(cluster: KubeCluster, path: str) -> bool:
    try:
        cluster.admin.get(path)
        return True
    except ApiError:
        return False


def test_the_audit_log_is_a_request_log_of_pod_and_secret_writes(real_cluster: KubeCluster) -> None:
    """Pod and Secret creations (a dry run with its query) and deletions, as the simulator's request
    log has them, with the answers' status; reads and the nodes' status writes are not kept."""
    api, base = real_cluster.admin, "/api/v1/namespaces/default"
    since = len(real_cluster.requests())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "audited"},  # on no node: none deletes it
           "spec": {"nodeSelector": {"example.org/none": "x"}, "containers": [{"name": "c", "image": "example.org/a:1"}]}}
    api.call("POST", base + "/pods", pod, query={"dryRun": "All"})
    api.call("POST", base + "/pods", pod)
    api.call("POST", base + "/secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "audited"}})
    api.get(base + "/pods/audited")
    api.call("DELETE", base + "/secrets/audited")
    api.call("DELETE", base + "/pods/audited", {"gracePeriodSeconds": 0})
    with pytest.raises(ApiError):
        api.call("DELETE", base + "/pods/audited")

    def mine() -> List[Tuple[str, str, Dict[str, str], int]]:
        return [(r.method, r.path, dict(r.query), r.status) for r in real_cluster.requests(since=since)
                if r.path.endswith("/audited")
                or (r.path.endswith(("/pods", "/secrets")) and r.path.startswith(base))]
    wait_until(lambda: len(mine()) == 6, "the six requests in the audit log")
    assert mine() == [("POST", base + "/pods", {"dryRun": "All"}, 201), ("POST", base + "/pods", {}, 201),
                      ("POST", base + "/secrets", {}, 201), ("DELETE", base + "/secrets/audited", {}, 200),
                      ("DELETE", base + "/pods/audited", {}, 200), ("DELETE", base + "/pods/audited", {}, 404)]
    assert [r.path for r in real_cluster.requests("DELETE", "/secrets/audited$", since=since)] == [
        base + "/secrets/audited"]
