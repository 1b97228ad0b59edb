"""Fidelity of watches through ``kubernetes.watch.Watch().stream``: initial replay, resume from a
resource version, in-stream 410 Expired, selector transitions, bookmarks, timeouts, dropped streams."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from podgahp_sim.k8s import KubeSim
from test_k8s_support import CLIENT_MAJOR, NS, api_client_for, core, make_sim, pod_body, sim

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.both_engines]
__all__ = ["api_client_for", "core", "make_sim", "sim"]  # fixtures used by name


def events(core: client.CoreV1Api, seconds: int = 1, count: int = 0, **kwargs: Any) -> List[Tuple[str, str, str]]:
    """(type, name, phase) of the events of a watch, stopping after ``count`` events (0: at its timeout)."""
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=seconds if not count else 10, **kwargs):
        pod = event["object"]
        assert isinstance(pod, client.V1Pod)
        seen.append((event["type"], pod.metadata.name, pod.status.phase if pod.status else ""))
        if count and len(seen) >= count:
            w.stop()
    return seen


def raw_events(sim: KubeSim, query: str, count: int) -> List[Dict[str, Any]]:
    """The first ``count`` NDJSON events of a watch request sent without the typed client."""
    http = urllib3.PoolManager(ssl_context=sim.client_context())
    response = http.request("GET", sim.url + "/api/v1/namespaces/default/pods?" + query,
                            headers={"Authorization": "Bearer " + str(sim.token)}, preload_content=False)
    assert response.headers.get("Transfer-Encoding") == "chunked"
    lines: List[Dict[str, Any]] = []
    buffer = b""
    for chunk in response.stream(1024):
        buffer += chunk
        while b"\n" in buffer and len(lines) < count:
            line, buffer = buffer.split(b"\n", 1)
            lines.append(json.loads(line))
        if len(lines) >= count:
            break
    response.release_conn()
    response.close()
    return lines


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_initial_replay_without_resource_version(sim: KubeSim, core: client.CoreV1Api) -> None:
    for name in ("a", "b"):
        core.create_namespaced_pod(NS, pod_body(name, schedulerName="manual"))
    sim.clear_requests()
    started = time.monotonic()
    assert events(core) == [("ADDED", "a", "Pending"), ("ADDED", "b", "Pending")]
    assert 0.9 < time.monotonic() - started < 3
    query = sim.requests("GET")[0].query
    assert query["watch"] == ("true" if CLIENT_MAJOR >= 37 else "True")
    assert query["timeoutSeconds"] == "1"


def test_resume_from_resource_version(sim: KubeSim, core: client.CoreV1Api) -> None:
    first = core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    core.create_namespaced_pod(NS, pod_body("b", schedulerName="manual"))
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("b", NS)
    seen = events(core, count=4, resource_version=first.metadata.resource_version)
    # a pod deleted at once (unscheduled: no grace) is first stored with its deletionTimestamp
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]


def test_live_events_of_a_pod_lifecycle(sim: KubeSim, core: client.CoreV1Api) -> None:
    listed = core.list_namespaced_pod(NS)
    core.create_namespaced_pod(NS, pod_body("a"))
    seen: List[Tuple[str, str, str]] = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=5,
                          resource_version=listed.metadata.resource_version):
        seen.append((event["type"], event["object"].metadata.name, event["object"].status.phase))
        if seen[-1][2] == "Succeeded":
            w.stop()
    phases = [p for _, _, p in seen]
    assert seen[0][0] == "ADDED" and all(t == "MODIFIED" for t, _, _ in seen[1:])
    assert phases[0] == "Pending" and phases[-1] == "Succeeded" and "Running" in phases


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_too_old_resource_version_is_an_in_stream_410(sim: KubeSim, core: client.CoreV1Api) -> None:
    first = core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    core.create_namespaced_pod(NS, pod_body("b", schedulerName="manual"))
    sim.compact()
    with pytest.raises(ApiException) as info:
        events(core, count=1, resource_version=first.metadata.resource_version)
    assert info.value.status == 410
    assert "Expired: too old resource version: %s" % first.metadata.resource_version in str(info.value.reason)
    line = raw_events(sim, "watch=1&resourceVersion=1", 1)[0]
    assert line["type"] == "ERROR"
    assert {k: line["object"][k] for k in ("kind", "status", "reason", "code")} == {
        "kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    # a watch from the current version still works after compaction
    start = sim.resource_version
    core.create_namespaced_pod(NS, pod_body("c", schedulerName="manual"))
    assert events(core, count=1, resource_version=start) == [("ADDED", "c", "Pending")]


@pytest.mark.simulator_only("edits the simulator's state directly")
def test_a_bulk_load_is_listed_and_watches_from_before_it_expire(sim: KubeSim, core: client.CoreV1Api) -> None:
    """Store.load: many objects without an event each; a watch cannot resume across it (410), a LIST
    sees every object with its own resource version, and later changes are watched as usual."""
    before = core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual")).metadata.resource_version
    template = sim.store.get("pods", NS, "a")
    assert template is not None
    copies = [dict(template, metadata=dict(template["metadata"], name=f"bulk-{i}", uid=f"uid-{i}"))
              for i in range(50)]
    assert sim.store.load("pods", copies) == 50
    listed = core.list_namespaced_pod(NS)
    versions = {p.metadata.name: int(p.metadata.resource_version) for p in listed.items}
    assert len(versions) == 51 and len(set(versions.values())) == 51
    assert max(versions.values()) == int(listed.metadata.resource_version)
    with pytest.raises(ApiException) as info:
        events(core, count=1, resource_version=before)
    assert info.value.status == 410
    start = sim.resource_version
    core.delete_namespaced_pod("bulk-7", NS, grace_period_seconds=0)
    assert events(core, count=1, resource_version=start)[0][:2] in (("MODIFIED", "bulk-7"), ("DELETED", "bulk-7"))


@pytest.mark.simulator_only("starts simulators of its own")
def test_bounded_event_log_expires_old_versions(make_sim: Callable[..., KubeSim],
                                                api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(event_log_size=3)
    core = client.CoreV1Api(api_client_for(sim))
    first = core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    for i in range(4):
        core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"n": str(i)}}})
    with pytest.raises(ApiException) as info:
        events(core, count=1, resource_version=first.metadata.resource_version)
    assert info.value.status == 410


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_watch_retries_once_after_410_without_timeout(sim: KubeSim, core: client.CoreV1Api) -> None:
    """Without timeout_seconds the client re-watches from its last version after an in-stream 410."""
    first = core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    core.create_namespaced_pod(NS, pod_body("b", schedulerName="manual"))
    sim.compact()
    sim.clear_requests()
    w = watch.Watch()
    with pytest.raises(ApiException) as info:
        for _ in w.stream(core.list_namespaced_pod, NS, resource_version=first.metadata.resource_version):
            pass
    assert info.value.status == 410
    assert len(sim.requests("GET")) == 2


@pytest.mark.parametrize("flag", ["true", "True", "1"], ids=["lower", "v36-style", "one"])
def test_watch_flag_spellings(sim: KubeSim, core: client.CoreV1Api, flag: str) -> None:
    core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    lines = raw_events(sim, "watch=%s" % flag, 1)
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "Pod", "a")]


@pytest.mark.parametrize("selector,change,expected", [
    ("app=pilot", {"metadata": {"labels": {"app": "done"}}}, ["ADDED", "DELETED"]),
    ("app=done", {"metadata": {"labels": {"app": "done"}}}, ["ADDED"]),
    ("app", {"metadata": {"labels": {"extra": "1"}}}, ["ADDED", "MODIFIED"]),
], ids=["stops-matching", "starts-matching", "keeps-matching"])
def test_selector_transitions(sim: KubeSim, core: client.CoreV1Api, selector: str, change: Dict[str, Any],
                              expected: List[str]) -> None:
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("a", labels={"app": "pilot"}, schedulerName="manual"))
    core.patch_namespaced_pod("a", NS, change)
    seen = events(core, count=len(expected), label_selector=selector, resource_version=start)
    assert [t for t, _, _ in seen] == expected


def test_field_selector_on_phase(sim: KubeSim, core: client.CoreV1Api) -> None:
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod_body("a"))
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_pod, NS, timeout_seconds=5, field_selector="status.phase=Running",
                          resource_version=start):
        seen.append((event["type"], event["object"].status.phase))
        if event["type"] == "DELETED":
            w.stop()
    # the pod that stops matching goes as it last matched (the watch cache sends the previous object)
    assert seen[0] == ("ADDED", "Running") and seen[-1] == ("DELETED", "Running")


@pytest.mark.simulator_only("starts simulators of its own")
def test_all_namespaces_watch(make_sim: Callable[..., KubeSim],
                              api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim(namespaces=("default", "pilots"))
    core = client.CoreV1Api(api_client_for(sim))
    core.create_namespaced_pod("pilots", pod_body("a", schedulerName="manual"))
    w = watch.Watch()
    for event in w.stream(core.list_pod_for_all_namespaces, timeout_seconds=5):
        assert (event["type"], event["object"].metadata.namespace) == ("ADDED", "pilots")
        w.stop()


@pytest.mark.simulator_only("the simulator's bookmark period (0.3 s here; a real server's is about a minute)")
def test_bookmarks(sim: KubeSim) -> None:
    lines = raw_events(sim, "watch=true&allowWatchBookmarks=true", 2)
    assert [e["type"] for e in lines] == ["BOOKMARK", "BOOKMARK"]
    assert lines[0]["object"] == {"kind": "Pod", "apiVersion": "v1",
                                  "metadata": {"resourceVersion": sim.resource_version}}


@pytest.mark.simulator_only("the simulator's bookmark period (0.3 s here; a real server's is about a minute)")
def test_bookmarks_through_the_client(sim: KubeSim, core: client.CoreV1Api) -> None:
    w = watch.Watch()
    seen = [e["type"] for e in w.stream(core.list_namespaced_pod, NS, timeout_seconds=1, allow_watch_bookmarks=True)]
    assert seen and set(seen) == {"BOOKMARK"}
    # 37.x resumes from bookmark versions; 30.x ignores them (watch.py: "treated the same as ERROR")
    assert w.resource_version == (sim.resource_version if CLIENT_MAJOR >= 37 else None)


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_drop_watches_ends_streams(sim: KubeSim, core: client.CoreV1Api) -> None:
    result: List[str] = []

    def consume() -> None:
        for event in watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=30):
            result.append(event["type"])

    core.create_namespaced_pod(NS, pod_body("a", schedulerName="manual"))
    thread = threading.Thread(target=consume)
    thread.start()
    sim.wait_for(lambda: result, 5, "first event")
    started = time.monotonic()
    sim.drop_watches()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2
    assert result == ["ADDED"]


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_stop_ends_open_watch(make_sim: Callable[..., KubeSim],
                              api_client_for: Callable[..., client.ApiClient]) -> None:
    sim = make_sim()
    core = client.CoreV1Api(api_client_for(sim))
    done = threading.Event()

    def consume() -> None:
        try:
            for _ in watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=30):
                pass
        except Exception:  # the connection may be cut either way; the point is that it ends
            pass
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    sim.wait_for(lambda: any(str(r.query.get("watch", "")).lower() in ("true", "1")  # the oldest client sends "True"
                             for r in sim.requests("GET", "/pods$")),
                 what="the watch is open")
    sim.stop()
    assert done.wait(5)
    thread.join(1)
