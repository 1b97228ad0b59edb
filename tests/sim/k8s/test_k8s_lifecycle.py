"""Fidelity of the simulated scheduler and kubelet as seen through the official client: phases,
container statuses of every failure shape, scheduling constraints, graceful deletion, pod logs."""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Dict, List, Optional

import pytest
from kubernetes import client, watch

from podgahp_sim.k8s import KubeSim, SimNode, Taint
from polling import wait_until
from test_k8s_support import NS, api_client_for, core, expect_error, make_sim_both_passes, phase, pod_body, sim, status_of

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.both_engines]
__all__ = ["api_client_for", "core", "make_sim_both_passes", "sim"]  # fixtures used by name (make_sim in both passes)


def wait_phase(sim: KubeSim, core: client.CoreV1Api, name: str, *phases: str, timeout: float = 30) -> client.V1Pod:
    sim.wait_for_phase(NS, name, *phases, timeout=timeout)
    return core.read_namespaced_pod(name, NS)


def wait_waiting(sim: KubeSim, core: client.CoreV1Api, name: str, reason: str, timeout: float = 30) -> client.V1Pod:
    def check(pod: Optional[Dict[str, Any]]) -> bool:
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return any(((s.get("state") or {}).get("waiting") or {}).get("reason") == reason for s in statuses)
    sim.wait_for_pod(NS, name, check, timeout)
    return core.read_namespaced_pod(name, NS)


def condition(pod: client.V1Pod, ctype: str) -> client.V1PodCondition:
    return next(c for c in pod.status.conditions if c.type == ctype)


# ------------------------------------------------------------------ normal runs

@pytest.mark.parametrize("exit_code,final,reason", [(0, "Succeeded", "Completed"), (3, "Failed", "Error")],
                         ids=["success", "non-zero"])
def test_run_to_completion(sim: KubeSim, core: client.CoreV1Api, exit_code: int, final: str, reason: str) -> None:
    # The container runs until the test has looked at it running (a run of the default 2 s could end
    # between the wait and the read on a busy machine), then exits with the code.
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "3600"}))
    running = wait_phase(sim, core, "p1", "Running")
    assert running.spec.node_name in ("sim-node-1", "sim-node-2")
    assert condition(running, "PodScheduled").status == "True"
    assert condition(running, "Ready").status == "True"
    status = running.status.container_statuses[0]
    assert status.ready and status.started and status.state.running.started_at is not None
    assert running.status.pod_ip and running.status.host_ip and running.status.start_time
    sim.exit_pod(NS, "p1", exit_code)
    done = wait_phase(sim, core, "p1", final)
    status = done.status.container_statuses[0]
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason) == (exit_code, reason)
    assert terminated.started_at and terminated.finished_at and terminated.container_id.startswith("containerd://")
    assert (status.name, status.image, status.ready, status.restart_count) == (
        "pilot", "docker.io/htcondor/execute:lts", False, 0)
    assert status.image_id.startswith("docker.io/htcondor/execute@sha256:")
    assert condition(done, "Ready").reason == ("PodCompleted" if final == "Succeeded" else "PodFailed")


def test_restart_always_crash_loops(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(restart="Always", env={"PODGAHP_SIM_EXIT_CODE": "1"}))
    pod = wait_waiting(sim, core, "p1", "CrashLoopBackOff")
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running" and status.restart_count >= 1
    assert status.last_state.terminated.exit_code == 1 and status.last_state.terminated.reason == "Error"
    assert status.state.waiting.message.startswith("back-off ")
    assert condition(pod, "Ready").status == "False"


# ------------------------------------------------------------------ scheduling

@pytest.mark.simulator_only("starts simulators of its own")
def test_unschedulable_then_scheduled_when_capacity_frees(make_sim: Callable[..., KubeSim],
                                                         api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(nodes=(SimNode("n1", cpu="1"), SimNode("n2", cpu="1")))
    core = client.CoreV1Api(api_client_for(sim))
    cpu = {"requests": {"cpu": "1"}}
    core.create_namespaced_pod(NS, pod_body("a", resources=cpu))
    core.create_namespaced_pod(NS, pod_body("b", resources=cpu))
    core.create_namespaced_pod(NS, pod_body("c", resources=cpu))
    pending = sim.wait_for_pod(NS, "c", lambda p: any(c.get("reason") == "Unschedulable" for c in
                                                       (p or {}).get("status", {}).get("conditions") or []))
    pod = core.read_namespaced_pod("c", NS)
    scheduled = condition(pod, "PodScheduled")
    assert (pod.status.phase, scheduled.status, scheduled.reason) == ("Pending", "False", "Unschedulable")
    assert scheduled.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert pending is not None and not pod.spec.node_name
    wait_phase(sim, core, "c", "Running", "Succeeded")


@pytest.mark.simulator_only("starts simulators of its own")
def test_capacity_freed_while_no_pod_waits_is_seen_by_the_next_pod(
        make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    """A node filled, then freed while no pod was waiting for it, takes the next pod (the scheduler's
    count of what each node holds follows every pod write, not only those while pods wait)."""
    sim = make_sim(nodes=(SimNode("n1", cpu="1"),))
    core = client.CoreV1Api(api_client_for(sim))
    cpu = {"requests": {"cpu": "1"}}
    core.create_namespaced_pod(NS, pod_body("first", resources=cpu))
    wait_phase(sim, core, "first", "Succeeded")
    sim.tick()  # a pass with no pod waiting, after the node was freed
    core.create_namespaced_pod(NS, pod_body("second", resources=cpu))
    wait_phase(sim, core, "second", "Running", "Succeeded")
    assert core.read_namespaced_pod("second", NS).spec.node_name == "n1"


@pytest.mark.parametrize("spec,node,message", [
    ({"nodeSelector": {"zone": "z2"}, "tolerations": [{"key": "nvidia.com/gpu", "value": "true"}]}, "n2", None),
    ({"nodeSelector": {"zone": "z9"}, "tolerations": [{"operator": "Exists"}]}, None,
     "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}}, "n1", None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1"]}]}]}}},
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, "n2", None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
      "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}, "n2", None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}]}}}}, "n1", None),
    ({"nodeSelector": {"gpu": "yes"}}, None,
     "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated "
     "taint {nvidia.com/gpu: true}."),
], ids=["selector", "selector-none", "in", "notin", "exists-tolerated", "does-not-exist", "untolerated-taint"])
@pytest.mark.simulator_only("starts simulators of its own")
def test_node_constraints(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient],
                          spec: Dict[str, Any], node: Optional[str], message: Optional[str]) -> None:
    sim = make_sim(nodes=(SimNode("n1", labels={"zone": "z1"}),
                          SimNode("n2", labels={"zone": "z2", "gpu": "yes"}, gpus=1,
                                  taints=(Taint("nvidia.com/gpu", "true"),))))
    core = client.CoreV1Api(api_client_for(sim))
    core.create_namespaced_pod(NS, pod_body(**spec))
    if node is not None:
        pod = sim.wait_for_pod(NS, "p1", lambda p: bool(((p or {}).get("spec") or {}).get("nodeName")))
        assert pod is not None and pod["spec"]["nodeName"] == node
        return
    sim.wait_for_pod(NS, "p1", lambda p: bool(((p or {}).get("status") or {}).get("conditions")))
    assert condition(core.read_namespaced_pod("p1", NS), "PodScheduled").message == message


@pytest.mark.simulator_only("starts simulators of its own")
def test_gpu_capacity(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(nodes=(SimNode("n1"), SimNode("n2"), SimNode("n3", gpus=1)))
    core = client.CoreV1Api(api_client_for(sim))
    core.create_namespaced_pod(NS, pod_body(resources={"limits": {"nvidia.com/gpu": "2"}}))
    sim.wait_for_pod(NS, "p1", lambda p: bool(((p or {}).get("status") or {}).get("conditions")))
    assert condition(core.read_namespaced_pod("p1", NS), "PodScheduled").message == \
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


# ------------------------------------------------------------------ container failures

def test_image_pull_failure(sim: KubeSim, core: client.CoreV1Api) -> None:
    image = "example.org/pilot-does-not-exist:1"
    core.create_namespaced_pod(NS, pod_body(image=image))
    pod = wait_waiting(sim, core, "p1", "ErrImagePull")
    waiting = pod.status.container_statuses[0].state.waiting
    assert "not found" in waiting.message and pod.status.phase == "Pending"
    assert condition(pod, "PodScheduled").status == "True"
    pod = wait_waiting(sim, core, "p1", "ImagePullBackOff")
    assert pod.status.container_statuses[0].state.waiting.message == 'Back-off pulling image "%s"' % image
    assert pod.status.container_statuses[0].image_id == ""


def test_invalid_image_name(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(image="HTCondor/Execute:lts"))
    waiting = wait_waiting(sim, core, "p1", "InvalidImageName").status.container_statuses[0].state.waiting
    assert waiting.message == ('Failed to apply default image tag "HTCondor/Execute:lts": couldn\'t parse image '
                               'reference "HTCondor/Execute:lts": invalid reference format')


@pytest.mark.simulator_only("starts simulators of its own")
def test_known_image_set(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(pullable_images=("htcondor/execute:lts",))
    core = client.CoreV1Api(api_client_for(sim))
    core.create_namespaced_pod(NS, pod_body("ok"))
    core.create_namespaced_pod(NS, pod_body("other", image="htcondor/execute:23"))
    wait_phase(sim, core, "ok", "Running", "Succeeded")
    wait_waiting(sim, core, "other", "ErrImagePull")


def test_missing_secret_for_env(sim: KubeSim, core: client.CoreV1Api) -> None:
    body = pod_body()
    body["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "pilot-token", "key": "token"}}}]
    core.create_namespaced_pod(NS, body)
    pod = wait_waiting(sim, core, "p1", "CreateContainerConfigError")
    assert pod.status.container_statuses[0].state.waiting.message == 'secret "pilot-token" not found'
    core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="pilot-token"),
                                                      string_data={"token": "x"}))
    wait_phase(sim, core, "p1", "Running", "Succeeded")


def test_oom_killed(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_MEMORY_MIB": "3000", "PODGAHP_SIM_RUN_SECONDS": "5"},
                                            resources={"limits": {"memory": "2Gi"}}))
    pod = wait_phase(sim, core, "p1", "Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


def test_active_deadline_exceeded(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}, activeDeadlineSeconds=1))
    pod = wait_phase(sim, core, "p1", "Failed")
    assert (pod.status.reason, pod.status.message) == (
        "DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_eviction(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    sim.evict(NS, "p1")
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.status.phase == "Failed" and pod.status.reason == "Evicted"
    assert pod.status.message.startswith("The node was low on resource: memory. ")
    disruption = condition(pod, "DisruptionTarget")
    assert (disruption.status, disruption.reason) == ("True", "TerminationByKubelet")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "ContainerStatusUnknown")
    sim.tick()  # a clock tick later the pod is still Failed: eviction is final
    assert core.read_namespaced_pod("p1", NS).status.phase == "Failed"


@pytest.mark.parametrize(
    "limit, disk_mib, message",
    [
        ("4Ki", None, 'Container pilot exceeded its local ephemeral storage limit "4Ki". '),
        ("50Mi", "100", 'Container pilot exceeded its local ephemeral storage limit "50Mi". '),
    ],
    ids=["few-KiB-limit", "writes-past-50Mi"],
)
def test_ephemeral_storage_over_the_limit_is_evicted(sim: KubeSim, core: client.CoreV1Api, limit: str,
                                                     disk_mib: Optional[str], message: str) -> None:
    """As a kubelet does: a container writing past its ephemeral-storage limit gets its pod evicted
    (every container writes something: with a few KiB of limit, at once)."""
    env = {"PODGAHP_SIM_RUN_SECONDS": "30"}
    if disk_mib:
        env["PODGAHP_SIM_DISK_MIB"] = disk_mib
    core.create_namespaced_pod(NS, pod_body(env=env, resources={"limits": {"ephemeral-storage": limit}}))
    pod = wait_phase(sim, core, "p1", "Failed")
    assert (pod.status.reason, pod.status.message) == ("Evicted", message)
    assert condition(pod, "DisruptionTarget").reason == "TerminationByKubelet"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137
    # The node agent records the Event after the status it reports (on the real engine, a write of its own).
    evicted = wait_until(lambda: [(e.type, e.message) for e in core.list_namespaced_event(
        NS, field_selector="involvedObject.name=p1").items if e.reason == "Evicted"], "the Evicted Event", timeout=30)
    assert evicted == [("Warning", message)]


@pytest.mark.parametrize("resources", [{"limits": {"ephemeral-storage": "10Gi"}}, None],
                         ids=["10Gi-limit", "no-limit"])
def test_storage_within_the_limit_runs_to_completion(sim: KubeSim, core: client.CoreV1Api,
                                                     resources: Optional[Dict[str, Any]]) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "1", "PODGAHP_SIM_DISK_MIB": "5000"},
                                            resources=resources))
    pod = wait_phase(sim, core, "p1", "Succeeded")
    assert pod.status.reason is None


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_preemption(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    pod = client.CoreV1Api.read_namespaced_pod(core, "p1", NS)
    sim.preempt(NS, "p1")
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.metadata.deletion_timestamp is not None
    assert condition(pod, "DisruptionTarget").reason == "PreemptionByScheduler"
    final = sim.wait_for_pod(NS, "p1", lambda p: phase(p) == "Failed" or p is None)
    if final is not None:
        assert final["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    sim.wait_for_pod(NS, "p1", lambda p: p is None)


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_node_lost(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "1"}))
    wait_phase(sim, core, "p1", "Running")
    sim.node_lost(NS, "p1")
    time.sleep(1.3)  # an observation window past the pod's run time: a lost node's pod does not finish
    pod = core.read_namespaced_pod("p1", NS)
    assert (pod.status.phase, pod.status.reason) == ("Running", "NodeLost")
    assert pod.status.message == "Node %s which was running pod p1 is unresponsive" % pod.spec.node_name
    assert condition(pod, "Ready").status == "False"


@pytest.mark.parametrize("target,reason", [("Succeeded", ""), ("Failed", "Custom"), ("Unknown", "")],
                         ids=["succeeded", "failed", "unknown"])
@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_set_pod_phase(sim: KubeSim, core: client.CoreV1Api, target: str, reason: str) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    sim.set_pod_phase(NS, "p1", target, reason=reason, message="set by test" if reason else "")
    pod = core.read_namespaced_pod("p1", NS)
    assert pod.status.phase == target and (pod.status.reason or "") == reason


# ------------------------------------------------------------------ graceful deletion

def test_delete_unscheduled_is_immediate(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(schedulerName="manual"))
    deleted = core.delete_namespaced_pod("p1", NS, grace_period_seconds=30)
    assert deleted.metadata.name == "p1" and sim.pod(NS, "p1") is None


def test_delete_terminal_is_immediate(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body())
    wait_phase(sim, core, "p1", "Succeeded")
    core.delete_namespaced_pod("p1", NS)
    assert sim.pod(NS, "p1") is None


@pytest.mark.parametrize("how", ["query", "body", "default"])
def test_delete_running_is_graceful(sim: KubeSim, core: client.CoreV1Api, how: str) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    if how == "query":
        pod = core.delete_namespaced_pod("p1", NS, grace_period_seconds=20)
    elif how == "body":
        pod = core.delete_namespaced_pod("p1", NS, body=client.V1DeleteOptions(grace_period_seconds=20))
    else:
        pod = core.delete_namespaced_pod("p1", NS)
    assert pod.metadata.deletion_timestamp is not None
    assert pod.metadata.deletion_grace_period_seconds == (20 if how != "default" else 30)
    last = sim.wait_for_pod(NS, "p1", lambda p: p is None or phase(p) in ("Succeeded", "Failed"))
    if last is not None:
        terminated = last["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")
    sim.wait_for_pod(NS, "p1", lambda p: p is None, timeout=2)


def test_grace_period_zero_is_immediate(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    core.delete_namespaced_pod("p1", NS, body=client.V1DeleteOptions(grace_period_seconds=0))
    assert sim.pod(NS, "p1") is None


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_sigkill_after_grace_period(make_sim: Callable[..., KubeSim],
                                   api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(sigterm_exit_seconds=60)
    core = client.CoreV1Api(api_client_for(sim))
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    running = wait_phase(sim, core, "p1", "Running")
    sim.clear_requests()
    core.delete_namespaced_pod("p1", NS, grace_period_seconds=1)
    # Every write of the pod from the delete on, in order, from a watch resumed where the Running pod
    # was read: a terminal status that lasts only an instant before the removal is seen all the same.
    writes = []
    stream = watch.Watch()
    for event in stream.stream(core.list_namespaced_pod, NS, resource_version=running.metadata.resource_version,
                               field_selector="metadata.name=p1", timeout_seconds=10):
        writes.append((event["type"], event["object"]))
        if event["type"] == "DELETED":
            stream.stop()
    assert writes and writes[-1][0] == "DELETED", [(t, o.status.phase) for t, o in writes]
    failed = [o for t, o in writes[:-1] if o.status.phase == "Failed"]
    assert failed, "the terminal status is written before the pod is removed"
    terminated = failed[0].status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "Error")
    sim.wait_for_pod(NS, "p1", lambda p: p is None, timeout=2)


def test_delete_collection(sim: KubeSim, core: client.CoreV1Api) -> None:
    for name in ("a", "b", "c"):
        core.create_namespaced_pod(NS, pod_body(name, labels={"app": "pilot" if name != "c" else "x"},
                                                schedulerName="manual"))
    result = core.delete_collection_namespaced_pod(NS, label_selector="app=pilot")
    assert result is not None
    assert [p["metadata"]["name"] for p in sim.pods()] == ["c"]


# ------------------------------------------------------------------ logs

def test_pod_log(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_LOG": "hello from the pilot\nsecond line"}))
    pod = wait_phase(sim, core, "p1", "Succeeded")
    text = core.read_namespaced_pod_log("p1", NS)
    lines = text.splitlines()
    assert lines[0] == ('podgahp-sim: pod default/p1 container pilot on node %s: command=["/usr/sbin/condor_master"] '
                        'args=["-f"]' % pod.spec.node_name)
    assert lines[1:3] == ["hello from the pilot", "second line"]
    assert lines[-1] == "podgahp-sim: container pilot exited with code 0 (Completed)"
    assert core.read_namespaced_pod_log("p1", NS, container="pilot", tail_lines=1) == lines[-1] + "\n"
    assert core.read_namespaced_pod_log("p1", NS, limit_bytes=5) == "podga"


def test_pod_log_errors(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(schedulerName="manual"))
    # no node to ask yet: the API server answers no content (204), once the container name is valid
    assert not core.read_namespaced_pod_log("p1", NS)
    assert core.read_namespaced_pod_log("p1", NS, _preload_content=False).status == 204
    error = expect_error(core.read_namespaced_pod_log, "p1", NS, container="other")
    assert (error.status, status_of(error)["message"]) == (400, "container other is not valid for pod p1")
    core.create_namespaced_pod(NS, pod_body("pulling", image="registry.example/does-not-exist:1"))
    wait_waiting(sim, core, "pulling", "ImagePullBackOff")
    error = expect_error(core.read_namespaced_pod_log, "pulling", NS)
    assert error.status == 400 and re.fullmatch(  # the kubelet's answer, passed on by the API server
        r'container "pilot" in pod "pulling" is waiting to start: (ErrImagePull|ImagePullBackOff)',
        status_of(error)["message"]), status_of(error)
    body = pod_body("two")
    body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    core.create_namespaced_pod(NS, body)
    error = expect_error(core.read_namespaced_pod_log, "two", NS)
    assert status_of(error)["message"] == "a container name must be specified for pod two, choose one of: [pilot side]"
    assert expect_error(core.read_namespaced_pod_log, "nope", NS).status == 404


def test_logs_follow(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "0.5"}))
    wait_phase(sim, core, "p1", "Running")
    response = core.read_namespaced_pod_log("p1", NS, follow=True, _preload_content=False)
    data = response.data.decode()
    assert data.splitlines()[-1] == "podgahp-sim: container pilot exited with code 0 (Completed)"


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_exit_pod_driver(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(env={"PODGAHP_SIM_RUN_SECONDS": "30"}))
    wait_phase(sim, core, "p1", "Running")
    sim.exit_pod(NS, "p1", 7)
    pod = wait_phase(sim, core, "p1", "Failed")
    assert pod.status.container_statuses[0].state.terminated.exit_code == 7
    assert sim.logs(NS, "p1")[-1] == "podgahp-sim: container pilot exited with code 7 (Error)"


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_requests_by_kubelet_do_not_appear_in_the_request_log(sim: KubeSim, core: client.CoreV1Api) -> None:
    sim.clear_requests()
    core.create_namespaced_pod(NS, pod_body())
    wait_phase(sim, core, "p1", "Succeeded")
    methods: List[str] = [r.method for r in sim.requests()]
    assert methods.count("POST") == 1


@pytest.mark.simulator_only("edits the simulator's state directly")
def test_a_tick_of_a_large_cluster_visits_only_what_changed_or_is_due(
        make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient]) -> None:
    """With pods visited by change (as from ``full_sync_below_pods`` on), a tick in which nothing
    changed and nothing is due runs the kubelet for no pod; a pod that changes is visited."""
    sim = make_sim(full_sync_below_pods=0, tick_seconds=3600)  # ticks driven by hand below
    api = client.CoreV1Api(api_client_for(sim))
    for i in range(30):
        api.create_namespaced_pod(NS, pod_body(f"quiet-{i}", env={"PODGAHP_SIM_RUN_SECONDS": "3600"}))
    visited: List[str] = []
    kubelet = sim.cluster._kubelet
    sim.cluster._kubelet = lambda pod, now: (visited.append(pod["metadata"]["name"]), kubelet(pod, now))[1]
    wait_until(lambda: sim.tick() or all(phase(sim.pod(NS, f"quiet-{i}")) == "Running" for i in range(30)),
               "every pod running", timeout=30, interval=0.06)
    sim.tick()  # looks once more at the pods the last tick wrote
    visited.clear()
    sim.tick()
    assert visited == []
    sim.exit_pod(NS, "quiet-7")
    sim.tick()
    assert visited == ["quiet-7"]
    wait_until(lambda: sim.tick() or phase(sim.pod(NS, "quiet-7")) == "Succeeded", "quiet-7 done", timeout=10,
               interval=0.05)
