"""Events of the simulated scheduler and kubelet, read as kubectl describe reads them: per object
with field selectors, repeats counted, old ones expired."""

from __future__ import annotations

from typing import Callable, List, Tuple

import pytest
from kubernetes import client

from podgahp_sim.k8s import KubeSim, SimNode
from test_k8s_support import NS, api_client_for, core, make_sim_both_passes, pod_body, sim

pytestmark = pytest.mark.both_engines

__all__ = ["api_client_for", "core", "make_sim_both_passes", "sim"]  # fixtures used by name (make_sim in both passes)


def events_of(core: client.CoreV1Api, name: str, namespace: str = NS) -> List[Tuple[str, str, str, str]]:
    """(type, reason, source component, message) of one object's Events, oldest first."""
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    found.sort(key=lambda e: e.metadata.name)
    # the scheduler of a real server writes events.k8s.io Events: core/v1 shows them with reportingComponent
    return [(e.type, e.reason, e.source.component or e.reporting_component, e.message) for e in found]


def reasons(core: client.CoreV1Api, name: str) -> List[str]:
    return [reason for _, reason, _, _ in events_of(core, name)]


def test_a_pilot_that_runs(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body())
    sim.wait_for_phase(NS, "p1", "Succeeded")
    events = events_of(core, "p1")
    assert [r for _, r, _, _ in events] == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    assert events[0][2] == "default-scheduler" and events[0][3].startswith(f"Successfully assigned {NS}/p1 to ")
    assert all(c == "kubelet" for _, _, c, _ in events[1:])
    started = core.list_namespaced_event(NS, field_selector="involvedObject.name=p1,reason=Started").items
    assert len(started) == 1 and started[0].involved_object.field_path == "spec.containers{pilot}"
    assert started[0].involved_object.uid == core.read_namespaced_pod("p1", NS).metadata.uid


@pytest.mark.simulator_only("starts simulators of its own")
def test_unschedulable(make_sim: Callable[..., KubeSim],
                       api_client_for: Callable[..., client.ApiClient]) -> None:
    small = make_sim(nodes=(SimNode("n1", cpu="1"),))
    api = client.CoreV1Api(api_client_for(small))
    api.create_namespaced_pod(NS, pod_body(resources={"requests": {"cpu": "8"}}))
    small.wait_for(lambda: reasons(api, "p1"), what="an event")
    (etype, reason, component, message), = events_of(api, "p1")
    assert (etype, reason, component) == ("Warning", "FailedScheduling", "default-scheduler")
    assert message == "0/1 nodes are available: 1 Insufficient cpu."


def test_image_that_cannot_be_pulled(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(image="registry.example/does-not-exist:1"))
    # a node posts a pass's Events one by one: the Failed of the back-off may follow its BackOff
    sim.wait_for(lambda: "BackOff" in reasons(core, "p1") and ("Warning", "Failed", "Error: ImagePullBackOff") in [
        (t, r, m) for t, r, _, m in events_of(core, "p1")], what="a BackOff event and its Failed")
    events = events_of(core, "p1")
    failed = [m for t, r, _, m in events if (t, r) == ("Warning", "Failed")]
    assert 'Failed to pull image "registry.example/does-not-exist:1"' in failed[0]
    assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed


def test_repeats_are_counted_not_duplicated(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body(restart="Always", env={"PODGAHP_SIM_EXIT_CODE": "1",
                                                                  "PODGAHP_SIM_RUN_SECONDS": "0.05"}))

    def backoff_count() -> int:
        found = core.list_namespaced_event(NS, field_selector="involvedObject.name=p1,reason=BackOff").items
        return int(found[0].count) if found else 0
    sim.wait_for(lambda: backoff_count() >= 2, timeout=10, what="a repeated BackOff")
    assert len(core.list_namespaced_event(NS, field_selector="involvedObject.name=p1,reason=BackOff").items) == 1


@pytest.mark.simulator_only("drives the simulated cluster's hand (evictions, preemption, phases)")
def test_delete_evict_and_oom(sim: KubeSim, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod_body("a", env={"PODGAHP_SIM_RUN_SECONDS": "60"}))
    core.create_namespaced_pod(NS, pod_body("b", env={"PODGAHP_SIM_RUN_SECONDS": "60"}))
    core.create_namespaced_pod(NS, pod_body("c", env={"PODGAHP_SIM_MEMORY_MIB": "512"},
                                            resources={"limits": {"memory": "64Mi"}}))
    sim.wait_for_phase(NS, "a", "Running")
    sim.wait_for_phase(NS, "b", "Running")
    core.delete_namespaced_pod("a", NS)
    sim.wait_for(lambda: "Killing" in reasons(core, "a"), what="a Killing event")
    assert ("Normal", "Killing", "kubelet", "Stopping container pilot") in events_of(core, "a")
    sim.evict(NS, "b")
    assert [e for e in events_of(core, "b") if e[1] == "Evicted"][0][3].startswith(
        "The node was low on resource: memory.")
    sim.wait_for_phase(NS, "c", "Failed")
    node = core.read_namespaced_pod("c", NS).spec.node_name
    oom = core.list_namespaced_event("default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node}")
    assert [e.reason for e in oom.items] == ["SystemOOM"]


@pytest.mark.simulator_only("starts simulators of its own")
@pytest.mark.parametrize("keep", [3])
def test_old_events_expire(make_sim: Callable[..., KubeSim], api_client_for: Callable[..., client.ApiClient],
                           keep: int) -> None:
    small = make_sim(events_max=keep)
    api = client.CoreV1Api(api_client_for(small))
    api.create_namespaced_pod(NS, pod_body())
    small.wait_for_phase(NS, "p1", "Succeeded")
    assert [e.reason for e in sorted(api.list_namespaced_event(NS).items, key=lambda e: e.metadata.name)] == [
        "Pulled", "Created", "Started"]
