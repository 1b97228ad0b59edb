"""The simulated cluster with real containers (``runtime="runc"``), through the official client:
processes run from the pod spec, with its environment, user, volumes and limits; the kernel's OOM
kill, signals on deletion, deadlines, storage eviction and Secret updates show as on a real node; and
nothing is left on the machine afterwards, even when the simulator was killed.

The tests of a pod run on both engines: on the simulator with runc nodes, and on the real control
plane, whose node for them is the simulator's kubelet with the runc runtime (``podgahp sim node``),
labelled and tainted as the simulator's nodes are here so that the same pods go to it alone. Those
of the simulator's own start and stop run on the simulator alone.

The image is this machine's own root filesystem (any directory tree can be an image), so the tests
need no image build; they need root and runc (``make system-deps``).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from engines import joined_node
from factories import made_then_ended
from leftovers import cgroups_of, instance_of, machine_leftovers, processes_in, start_runc_sim, stop_sim
from podgahp_sim.k8s import KubeSim, SimNode
from podgahp_sim.k8s.cluster import Cluster
from podgahp_sim.k8s.config import Taint
from podgahp_sim.kube.cluster import KubeCluster
from podgahp_sim.kube.node import NodeAgent, NodeSpec
from polling import wait_until
from test_k8s_support import NS, api_client_for, fast

pytestmark = pytest.mark.both_engines
__all__ = ["api_client_for"]

IMAGE = "registry.example.org/host:1"
RUNC = {"podgahp.test/runtime": "runc"}
"""The label of the nodes this module's pods go to (with a toleration of :data:`RUNC_ONLY`)."""
RUNC_ONLY = Taint("podgahp.test/runtime", "runc", "NoSchedule")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def make_runc_sim(tmp_path: Path) -> Iterator[Callable[..., KubeSim]]:
    def make(**changes: Any) -> KubeSim:
        nodes = tuple(SimNode("sim-node-%d" % i, labels=RUNC, taints=(RUNC_ONLY,)) for i in (1, 2))
        config = fast(runtime="runc", images={IMAGE: "/"}, runtime_dir=str(tmp_path / "runtime"),
                      kubelet_sync_seconds=0.2, nodes=nodes, **changes)
        return KubeSim(config).start()
    yield from made_then_ended(make, KubeSim.stop)


@pytest.fixture(scope="module")
def real_runc_node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeAgent]:
    """The real control plane's node for this module's pods: the simulator's kubelet with the runc
    runtime, labelled and tainted as the simulator's nodes here (removed with the module's end)."""
    cluster: KubeCluster = request.getfixturevalue("real_cluster")
    name = "runc-%d" % os.getpid()
    spec = NodeSpec(name, runtime="runc", images={IMAGE: "/"}, runtime_dir=str(tmp_path_factory.mktemp("runtime")),
                    labels=RUNC, taints=(RUNC_ONLY,), tick_seconds=0.05, sync_seconds=0.2)
    with joined_node(cluster, spec) as agent:
        yield agent


@pytest.fixture
def runc_sim(engine: str, request: pytest.FixtureRequest, make_runc_sim: Callable[..., KubeSim]) -> KubeSim:
    """A simulator with runc nodes, or on the real engine the real control plane's ``default``
    namespace (emptied for the test) with its runc node, whose reads are KubeSim's (tests/engines.py)."""
    if engine == "real":
        request.getfixturevalue("real_runc_node")
        real: KubeSim = request.getfixturevalue("real_default_engine")
        return real
    return make_runc_sim()


@pytest.fixture
def kubelet(engine: str, request: pytest.FixtureRequest, runc_sim: KubeSim) -> Cluster:
    """The kubelet that runs the test's pods (its runs hold the containers' cgroups)."""
    if engine == "real":
        node: NodeAgent = request.getfixturevalue("real_runc_node")
        return node.cluster
    return runc_sim.cluster


@pytest.fixture
def core(runc_sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> client.CoreV1Api:
    return client.CoreV1Api(api_client_for(runc_sim))


def pod(script: str, name: str = "p1", *, container: Optional[Dict[str, Any]] = None, placed: bool = True,
        **spec: Any) -> Dict[str, Any]:
    """A pod of one container running ``script``; ``placed``: for the nodes labelled :data:`RUNC` alone."""
    body: Dict[str, Any] = {"name": "main", "image": IMAGE, "command": ["/bin/sh", "-c", script]}
    body.update(container or {})
    placement = {"nodeSelector": dict(RUNC), "tolerations": [{"key": RUNC_ONLY.key, "operator": "Exists"}]}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                                                 "containers": [body], **(placement if placed else {}), **spec}}


def run_to_end(sim: KubeSim, core: client.CoreV1Api, body: Dict[str, Any], timeout: float = 30) -> client.V1Pod:
    core.create_namespaced_pod(NS, body)
    name = body["metadata"]["name"]
    sim.wait_for_phase(NS, name, "Succeeded", "Failed", timeout=timeout)
    return core.read_namespaced_pod(name, NS)


def terminated(p: client.V1Pod) -> client.V1ContainerStateTerminated:
    return p.status.container_statuses[0].state.terminated


def log_of(core: client.CoreV1Api, name: str = "p1") -> str:
    return str(core.read_namespaced_pod_log(name, NS))


def log_so_far(core: client.CoreV1Api, name: str = "p1") -> str:
    """The log, or '' while the container has not started (the API server answers 400 then), or
    while a real cluster's node has not yet seen the pod bound to it (its log endpoint answers 404)."""
    try:
        return log_of(core, name)
    except ApiException as e:
        if e.status in (400, 404):
            return ""
        raise


# ------------------------------------------------------------------ processes, environment, user


def test_the_container_runs_its_command_with_its_environment_and_user(runc_sim: KubeSim,
                                                                       core: client.CoreV1Api) -> None:
    core.create_namespaced_secret(NS, {"metadata": {"name": "creds"}, "data": {"token": _b64("s3cret")}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "settings"}, "data": {"MODE": "fast", "1bad": "x"}})
    body = pod('echo "argv=$0 $1 $2"; echo "user=$(id -u):$(id -g):$(id -G)"; echo "cwd=$PWD"; '
               'echo "env=$GREETING|$TOKEN|$POD|$NODE|$MEM|$CPU|$MODE|$HOSTNAME"; '
               'echo "kube=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
               'echo "not a variable name: $(env | grep -c ^1bad=)"; exit 3', container={
                   "args": ["$(GREETING)", "$$(GREETING)", "$(UNDEFINED)"],
                   "workingDir": "/tmp",
                   "env": [{"name": "WHO", "value": "pilot"}, {"name": "GREETING", "value": "hi-$(WHO)"},
                           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                           {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                              "divisor": "1Mi"}}},
                           {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}],
                   "envFrom": [{"configMapRef": {"name": "settings"}}],
                   "resources": {"limits": {"memory": "256Mi", "cpu": "1500m"}},
                   "securityContext": {"runAsUser": 1234, "runAsGroup": 2345}},
               securityContext={"supplementalGroups": [3456]})
    done = run_to_end(runc_sim, core, body)
    assert done.status.phase == "Failed"
    state = terminated(done)
    assert (state.exit_code, state.reason) == (3, "Error")
    lines = log_of(core).splitlines()
    assert lines[0] == "argv=hi-pilot $(GREETING) $(UNDEFINED)"
    assert lines[1] == "user=1234:2345:2345 3456"
    assert lines[2] == "cwd=/tmp"
    assert lines[3] == "env=hi-pilot|s3cret|p1|%s|256|2|fast|p1" % done.spec.node_name
    assert lines[4] == "kube=127.0.0.1:%d" % urllib.parse.urlsplit(runc_sim.url).port
    assert lines[5] == "not a variable name: 0"  # a ConfigMap key envFrom cannot make a variable of is left out


def test_a_container_that_exits_zero_completes(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    done = run_to_end(runc_sim, core, pod("echo out; echo err >&2"))
    assert done.status.phase == "Succeeded"
    assert (terminated(done).exit_code, terminated(done).reason) == (0, "Completed")
    assert sorted(log_of(core).splitlines()) == ["err", "out"]


def test_a_command_that_cannot_start_is_a_start_error(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    done = run_to_end(runc_sim, core, pod("", container={"command": ["/no/such/program"]}))
    state = terminated(done)
    assert done.status.phase == "Failed"
    assert (state.exit_code, state.reason) == (128, "StartError")
    assert "/no/such/program" in state.message and "no such file or directory" in state.message
    assert log_of(core) == ""


def test_run_as_non_root_refuses_a_root_image(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("true", securityContext={"runAsNonRoot": True}))

    def waiting() -> Optional[client.V1ContainerStateWaiting]:
        statuses = core.read_namespaced_pod("p1", NS).status.container_statuses or []
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting and \
            statuses[0].state.waiting.reason == "CreateContainerConfigError" else None
    state = wait_until(waiting, "CreateContainerConfigError")
    assert state.message.startswith("container has runAsNonRoot and image will run as root (pod: \"p1_default(")


def test_termination_message_and_capabilities(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    script = ("grep CapEff /proc/self/status; cat /proc/self/status | grep NoNewPrivs; "
              "echo 'the reason' > /dev/termination-log; touch /readonly 2>/dev/null || echo read-only root")
    done = run_to_end(runc_sim, core, pod(script, container={"securityContext": {
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True}}))
    assert terminated(done).message == "the reason\n"
    lines = log_of(core).splitlines()
    assert lines[0].split() == ["CapEff:", "%016x" % (1 << 10)]  # CAP_NET_BIND_SERVICE is bit 10
    assert lines[1].split() == ["NoNewPrivs:", "1"]
    assert lines[2] == "read-only root"


# ------------------------------------------------------------------ volumes


def test_volumes_have_the_kubelets_modes_and_ownership(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_secret(NS, {"metadata": {"name": "inputs"},
                                       "data": {"exe": _b64("#!/bin/sh\n"), "proxy": _b64("PROXY"), "x": _b64("X")}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "conf"}, "data": {"a.conf": "A=1"}})
    script = ("cd /in && stat -L -c '%n %a %g' exe proxy; cat proxy; echo; ls /in | tr '\\n' ' '; echo; "
              "stat -L -c '%n %a %g' /conf/a.conf /scratch /mem; cat /conf/a.conf; echo; "
              "grep ' /mem ' /proc/mounts | cut -d' ' -f3,4; touch /in/new 2>/dev/null || echo in read-only; "
              "touch /scratch/f && stat -c '%u' /scratch/f; cat /pilot/exe | head -1; "
              "ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1 | head -1")
    body = pod(script, container={"securityContext": {"runAsUser": 1000}, "volumeMounts": [
        {"name": "in", "mountPath": "/in", "readOnly": True}, {"name": "conf", "mountPath": "/conf"},
        {"name": "scratch", "mountPath": "/scratch"}, {"name": "mem", "mountPath": "/mem"},
        {"name": "in", "mountPath": "/pilot/exe", "subPath": "exe", "readOnly": True}]},
        securityContext={"fsGroup": 4000},
        volumes=[{"name": "in", "secret": {"secretName": "inputs", "defaultMode": 0o400, "items": [
                      {"key": "exe", "path": "exe", "mode": 0o555}, {"key": "proxy", "path": "proxy"}]}},
                 {"name": "conf", "configMap": {"name": "conf"}},
                 {"name": "scratch", "emptyDir": {}},
                 {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "32Mi"}}])
    done = run_to_end(runc_sim, core, body)
    assert done.status.phase == "Succeeded", log_of(core)
    lines = log_of(core).splitlines()
    assert lines[:2] == ["exe 555 4000", "proxy 440 4000"]  # fsGroup: group readable, the group's
    assert lines[2] == "PROXY"
    assert lines[3].split() == ["exe", "proxy"]  # items: only the keys named
    assert lines[4:7] == ["/conf/a.conf 644 4000", "/scratch 2777 4000", "/mem 2777 4000"]
    assert lines[7] == "A=1"
    assert lines[8].split(" ")[0] == "tmpfs" and "size=32768k" in lines[8]
    assert lines[9:] == ["in read-only", "1000", "#!/bin/sh",
                         "ls: cannot access '/var/run/secrets/kubernetes.io/serviceaccount': No such file or directory"]


def test_the_service_account_token_is_there_only_when_automounted(
        runc_sim: KubeSim, core: client.CoreV1Api, engine: str) -> None:
    body = pod("cd /var/run/secrets/kubernetes.io/serviceaccount && cat namespace && echo && "
               "head -1 ca.crt && cat token", automountServiceAccountToken=True)
    done = run_to_end(runc_sim, core, body)
    assert done.status.phase == "Succeeded", log_of(core)
    namespace, ca, token = log_of(core).splitlines()
    assert (namespace, ca) == (NS, "-----BEGIN CERTIFICATE-----")
    # the token is the pod's service account's, and the API server knows it
    if engine == "real":
        review = client.AuthenticationV1Api(core.api_client).create_token_review({"spec": {"token": token}})
        assert review.status.authenticated and review.status.user.username == "system:serviceaccount:%s:default" % NS
    else:
        assert runc_sim.api.sa_tokens[token] == "system:serviceaccount:%s:default" % NS


def test_a_secret_update_reaches_the_running_container(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_secret(NS, {"metadata": {"name": "proxy"}, "data": {"proxy": _b64("first")}})
    body = pod("while true; do cat /in/proxy; echo; sleep 0.1; done", container={
        "volumeMounts": [{"name": "in", "mountPath": "/in"}]},
        volumes=[{"name": "in", "secret": {"secretName": "proxy"}}], terminationGracePeriodSeconds=0)
    core.create_namespaced_pod(NS, body)
    wait_until(lambda: "first" in log_so_far(core).splitlines(), "the first content read", timeout=20)
    core.replace_namespaced_secret("proxy", NS, {"metadata": {"name": "proxy"}, "data": {"proxy": _b64("second")}})
    wait_until(lambda: "second" in log_of(core).splitlines(), "the new content read", timeout=20)


# ------------------------------------------------------------------ limits


def test_memory_over_the_limit_is_killed_by_the_kernel(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    """The kernel kills the process over the limit; the kubelet then kills the rest of the container,
    as with cgroup v2's ``memory.oom.group`` (a pilot whose payload is killed ends with it)."""
    hog = "%s -c 'x = bytearray(200 * 2 ** 20)'" % sys.executable
    started = time.monotonic()
    done = run_to_end(runc_sim, core, pod("echo start; %s; echo hog=$?; sleep 60" % hog, container={
        "resources": {"limits": {"memory": "64Mi"}}}))
    state = terminated(done)
    assert (done.status.phase, state.exit_code, state.reason) == ("Failed", 137, "OOMKilled")
    assert time.monotonic() - started < 30
    assert log_of(core).splitlines()[0] == "start"
    assert set(log_of(core).splitlines()[1:]) <= {"Killed", "hog=137"}  # SIGKILL from the kernel


def test_a_container_reads_its_memory_limit_from_its_cgroup(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    """What a pilot's startd reads to size its slot: the limit, not "unlimited" (``max``, or a page
    count near 2**63), in cgroup v2's ``memory.max`` or v1's ``memory.limit_in_bytes``."""
    script = ("m=$(grep ':memory:' /proc/self/cgroup | cut -d: -f3); "
              "if [ -n \"$m\" ]; then cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes; "
              "else cat /sys/fs/cgroup/memory.max; fi")
    done = run_to_end(runc_sim, core, pod(script, container={"resources": {"limits": {"memory": "96Mi"}}}))
    assert done.status.phase == "Succeeded", log_of(core)
    assert log_of(core).split() == [str(96 * 2 ** 20)]


def test_limits_reach_the_container_cgroup(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    script = ("c=$(grep -E ':(cpu|cpu,cpuacct):' /proc/self/cgroup | cut -d: -f3); "
              "m=$(grep ':memory:' /proc/self/cgroup | cut -d: -f3); "
              "cat /sys/fs/cgroup/cpu$c/cpu.cfs_quota_us /sys/fs/cgroup/cpu$c/cpu.cfs_period_us "
              "/sys/fs/cgroup/cpu$c/cpu.shares /sys/fs/cgroup/memory$m/memory.limit_in_bytes")
    done = run_to_end(runc_sim, core, pod(script, container={"resources": {
        "limits": {"cpu": "500m", "memory": "96Mi"}, "requests": {"cpu": "250m", "memory": "96Mi"}}}))
    assert done.status.phase == "Succeeded", log_of(core)
    assert log_of(core).split() == ["50000", "100000", "256", str(96 * 2 ** 20)]


def test_local_storage_over_the_limit_evicts_the_pod(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    body = pod("head -c 20000000 /dev/zero > /big; sleep 60", container={"resources": {
        "limits": {"ephemeral-storage": "10Mi"}}}, terminationGracePeriodSeconds=0)
    done = run_to_end(runc_sim, core, body)
    assert (done.status.phase, done.status.reason) == ("Failed", "Evicted")
    assert done.status.message == 'Container main exceeded its local ephemeral storage limit "10Mi". '
    assert (terminated(done).exit_code, terminated(done).reason) == (137, "Error")


# ------------------------------------------------------------------ signals and deadlines


def test_deletion_sends_sigterm_and_the_grace_period(runc_sim: KubeSim, core: client.CoreV1Api) -> None:
    trap = "trap 'echo got TERM; exit 0' TERM; echo ready; while true; do sleep 0.05; done"
    core.create_namespaced_pod(NS, pod(trap, "graceful"))
    core.create_namespaced_pod(NS, pod("trap '' TERM; echo ready; while true; do sleep 0.05; done", "stubborn"))
    for name in ("graceful", "stubborn"):
        wait_until(lambda: log_so_far(core, name).startswith("ready"), "%s started" % name, timeout=20)
    since = core.list_namespaced_pod(NS).metadata.resource_version
    started = time.monotonic()
    core.delete_namespaced_pod("graceful", NS, grace_period_seconds=20)
    core.delete_namespaced_pod("stubborn", NS, grace_period_seconds=2)
    # a watch sees each container's end, however soon the pod is gone after it (a poll may miss it)
    records: Dict[str, Any] = {}
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, NS, resource_version=since, timeout_seconds=30):
        found = event["object"]
        statuses = found.status.container_statuses or []
        if statuses and statuses[0].state.terminated:
            records.setdefault(found.metadata.name, (statuses[0].state.terminated, time.monotonic() - started))
        if set(records) == {"graceful", "stubborn"}:
            stream.stop()
    graceful, after = records["graceful"]
    assert (graceful.exit_code, after < 10) == (0, True)
    stubborn, after = records["stubborn"]
    assert (stubborn.exit_code, stubborn.reason, after >= 2) == (137, "Error", True)
    wait_until(lambda: not runc_sim.pods(NS), "both pods removed")


def test_a_pod_past_its_deadline_leaves_no_process(runc_sim: KubeSim, core: client.CoreV1Api,
                                                   kubelet: Cluster) -> None:
    """Past ``activeDeadlineSeconds`` the pod is Failed (DeadlineExceeded, the kubelet's message), its
    container gets SIGTERM and its grace period, and none of its processes is left in its cgroups."""
    core.create_namespaced_pod(NS, pod("trap 'exit 143' TERM; while true; do sleep 0.05; done",
                                       activeDeadlineSeconds=2, terminationGracePeriodSeconds=5))
    uid = runc_sim.wait_for_phase(NS, "p1", "Running", timeout=30)["metadata"]["uid"]
    cgroups = wait_until(lambda: [d for d in cgroups_of(kubelet, uid) if processes_in([d])],
                         "the container's processes in its cgroups", timeout=20)
    runc_sim.wait_for_phase(NS, "p1", "Failed", timeout=30)
    done = core.read_namespaced_pod("p1", NS)
    assert (done.status.phase, done.status.reason, done.status.message) == (
        "Failed", "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    wait_until(lambda: terminated(core.read_namespaced_pod("p1", NS)), "the container stopped", timeout=20)
    assert terminated(core.read_namespaced_pod("p1", NS)).exit_code == 143
    assert processes_in(cgroups) == []


# ------------------------------------------------------------------ nothing left behind


def test_nothing_is_left_after_the_simulator_stops(make_runc_sim: Callable[..., KubeSim],
                                                   api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_runc_sim()
    core = client.CoreV1Api(api_client_for(sim))
    body = pod("sleep 600", container={"volumeMounts": [{"name": "m", "mountPath": "/m"}]},
               volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])
    core.create_namespaced_pod(NS, body)
    sim.wait_for_phase(NS, "p1", "Running", timeout=20)
    assert sim.runtime is not None
    base, instance = os.path.split(sim.runtime.directory)
    assert machine_leftovers(base, instance)  # the container is there while it runs
    sim.stop()
    assert machine_leftovers(base, instance) == []


def test_a_killed_simulator_leaves_nothing_after_the_next_start(tmp_path: Path) -> None:
    runtime_dir = tmp_path / "runtime"
    first = start_runc_sim(tmp_path, runtime_dir, "1", {IMAGE: "/"})
    second: Optional["subprocess.Popen[str]"] = None
    try:
        from kubernetes import config
        api = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig-1"), persist_config=False)
        core = client.CoreV1Api(api)
        for n in range(2):
            core.create_namespaced_pod(NS, pod("sleep 600", "p%d" % n, placed=False, container={
                "volumeMounts": [{"name": "s", "mountPath": "/s"}]}, volumes=[{"name": "s", "emptyDir": {}}]))
        wait_until(lambda: all(core.read_namespaced_pod("p%d" % n, NS).status.phase == "Running" for n in range(2)),
                   "the pods running", timeout=30)
        api.close()
        instance = instance_of(runtime_dir, first)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        left = machine_leftovers(str(runtime_dir), instance)
        assert any(item.startswith("process") for item in left) and any(item.startswith("mount") for item in left)
        assert any(item.startswith("cgroup") for item in left), left
        second = start_runc_sim(tmp_path, runtime_dir, "2", {IMAGE: "/"})
        # (a killed process's entry stays until its parent, here the machine's init, reaps it)
        wait_until(lambda: machine_leftovers(str(runtime_dir), instance), "nothing left", timeout=10,
                   done=lambda left: left == [])
    finally:
        for proc in (first, second):
            if proc is not None:
                stop_sim(proc)
    assert os.listdir(runtime_dir) == []


def test_the_cli_refuses_an_image_without_the_runc_runtime(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", "from gahp.cli import main; main()", "sim", "k8s", "--kubeconfig",
                           str(tmp_path / "k"), "--image", "x=/"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--image needs --runtime runc" in done.stderr
