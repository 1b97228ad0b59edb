"""The record of a pod: documented fields read with their types, odd shapes read as absent; what the
watch copy keeps of a pod, and how it parses the API's JSON."""

from __future__ import annotations

import datetime
import json
from typing import Any, Dict

import pytest

from gahp.backends.k8s.identity import refusal
from gahp.backends.k8s.state import classify
from gahp.backends.k8s.view import PodRecord, container_state, decode_event, decode_pod

pytestmark = pytest.mark.both_engines

POD: Dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "1"}, "annotations": {"b": "2"},
                 "deletionTimestamp": "2026-11-25T00:00:00Z", "creationTimestamp": "2026-11-24T00:00:00Z"},
    "spec": {"nodeName": "n1", "containers": [{"name": "side"}, {"name": "pilot", "image": "i"}]},
    "status": {"phase": "Failed", "reason": "Evicted", "message": "m", "startTime": "t",
               "conditions": [{"type": "DisruptionTarget", "status": "True"}],
               "containerStatuses": [{"name": "side"}, {"name": "pilot", "state": {"terminated": {"exitCode": 3}}}]},
}


def test_reads_the_documented_fields() -> None:
    view = PodRecord.of(POD)
    assert (view.name, view.namespace, view.node, view.phase, view.reason, view.message) == \
        ("p", "ns", "n1", "Failed", "Evicted", "m")
    assert view.label("a") == "1" and view.annotation("b") == "2" and view.label("x", "d") == "d"
    assert view.deleting and view.finished and view.condition_true("DisruptionTarget")
    assert container_state(view.container_status("pilot"), "terminated") == {"exitCode": 3}
    assert view.container_status("absent")["name"] == "side"  # the first container of the spec


@pytest.mark.parametrize("odd", [
    {"metadata": "x", "spec": [], "status": 7},
    {"metadata": {"labels": ["a"], "annotations": "b", "name": 5}, "status": {"phase": 3, "conditions": "c",
                                                                             "containerStatuses": [1, None]}},
    {},
])
def test_odd_shapes_read_as_absent(odd: Dict[str, Any]) -> None:
    """A pod another client or a webhook mangled is read as a pod without those fields, never a traceback."""
    view = PodRecord.of(odd)
    assert (view.name, view.phase, view.labels, view.conditions, view.container_status("pilot")) == \
        ("", "Pending", {}, [], {})
    assert refusal(odd, "ce", "user") is not None  # not ours, whatever else it is
    assert classify(odd, now=datetime.datetime.now(datetime.timezone.utc), unschedulable_timeout_s=0,
                    disruption_action="requeue").key == "Pending"


def test_the_watch_copy_keeps_what_podgahp_reads_and_nothing_else() -> None:
    """A pod's record answers every question podgahp asks the same way as the full pod, in one object
    with a slot per field (no dict of its own)."""
    full = dict(POD, metadata=dict(POD["metadata"], managedFields=[{"manager": "kubelet", "fieldsV1": {"x": 1}}],
                                   labels={"a": "1", "b": "2", "n": 3}, annotations={"b": "2", "c": "3"}),
                spec=dict(POD["spec"], tolerations=[{"key": "k"}], volumes=[
                    {"name": "inputs", "secret": {"secretName": "p", "items": [{"key": "proxy", "path": "x"}]}},
                    {"name": "work", "emptyDir": {}}]))
    small = PodRecord.of(full, labels={"a"}, annotations={"c"})
    assert not hasattr(small, "__dict__")
    assert small.volumes == [{"name": "inputs", "secret": {"items": [{"key": "proxy", "path": "x"}]}}]
    assert (small.labels, small.annotations) == ({"a": "1"}, {"c": "3"})
    assert PodRecord.of(full).labels == {"a": "1", "b": "2"}  # a label that is not a string reads as absent
    assert (small.name, small.node, small.phase, small.deleting, small.label("a")) == ("p", "n1", "Failed", True, "1")
    now = datetime.datetime.now(datetime.timezone.utc)
    assert classify(full, now=now, unschedulable_timeout_s=0, disruption_action="hold") == \
        classify(small, now=now, unschedulable_timeout_s=0, disruption_action="hold")
    assert small.with_phase("Running").phase == "Running" and small.phase == "Failed"


def test_pods_recorded_with_one_canon_share_what_is_equal() -> None:
    """Label pairs, the containers, conditions and container states equal across pods are one object,
    not one per pod; what differs stays each pod's own."""
    from gahp.backends.k8s.sharing import Canon

    canon = Canon()
    first = PodRecord.of(dict(POD, metadata=dict(POD["metadata"], name="p1", labels={"queue": "default", "job": "1"},
                                                 annotations={"user": "u"})), canon)
    second = PodRecord.of(dict(POD, metadata=dict(POD["metadata"], name="p2", labels={"queue": "default", "job": "2"},
                                                  annotations={"user": "u"})), canon)
    assert first.containers is second.containers and first.container_statuses is second.container_statuses
    assert first.conditions is second.conditions
    assert first._labels[0] is second._labels[0] and first._labels is not second._labels
    assert first._annotations is second._annotations
    assert (first.name, second.name) == ("p1", "p2")
    assert (first.label("job"), second.label("job")) == ("1", "2")
    assert PodRecord.of(POD, canon) == PodRecord.of(POD)


@pytest.mark.parametrize("a, b", [(1, True), (1, 1.0), (1, "1"), ({"x": 1, "y": 2}, {"y": 2, "x": 1}),
                                  ([1], (1,)), (None, "null")])
def test_values_of_different_types_or_orders_are_never_shared(a: Any, b: Any) -> None:
    from gahp.backends.k8s.sharing import Canon

    canon = Canon()
    assert canon.share(a) is a
    shared = canon.share(b)
    assert shared is b and type(shared) is type(b)


def test_the_table_stays_within_its_limit() -> None:
    from gahp.backends.k8s.sharing import Canon

    canon = Canon(limit=100)
    for i in range(1000):
        canon.share(f"unique-{i}")
        assert len(canon) <= 100
    kept = canon.share("x" * 3)
    assert canon.share("xxx") is kept


def test_a_running_pod_keeps_only_what_its_state_needs_and_a_finished_one_keeps_its_times() -> None:
    """A running pod's copy drops the conditions podgahp does not read and the times it does not need
    (so that part is the same for every running pilot); a finished pod keeps every condition time
    (the clean-up reads them to know when it ended)."""
    conditions = [{"type": t, "status": "True", "lastTransitionTime": "2026-11-24T00:00:0%dZ" % i}
                  for i, t in enumerate(("PodScheduled", "Initialized", "Ready"))]
    running = {"metadata": {"name": "r"}, "spec": {"containers": [{"name": "pilot"}]},
               "status": {"phase": "Running", "conditions": conditions, "containerStatuses": [
                   {"name": "pilot", "state": {"running": {"startedAt": "2026-11-24T00:00:01Z"}}}]}}
    small = PodRecord.of(running)
    assert small.conditions == [{"type": "PodScheduled", "status": "True"}]
    assert small.container_statuses == [{"name": "pilot", "state": {"running": {}}}]
    now = datetime.datetime.now(datetime.timezone.utc)
    assert classify(small, now=now, unschedulable_timeout_s=0, disruption_action="hold") == \
        classify(running, now=now, unschedulable_timeout_s=0, disruption_action="hold")
    finished = dict(running, status=dict(running["status"], phase="Succeeded"))
    assert PodRecord.of(finished).conditions == conditions


def test_a_pod_is_parsed_into_what_the_watch_copy_keeps() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p", "uid": "u", "labels": {"a": "b"}, "managedFields": [{"x": 1}]},
           "spec": {"nodeName": "n", "containers": [{"name": "pilot", "image": "i", "env": [{"name": "X"}],
                                                     "resources": {"requests": {"cpu": "1"}}}],
                    "tolerations": [{"key": "k"}]},
           "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}}
    parsed = decode_pod(json.dumps(pod).encode())
    assert parsed == {"metadata": {"name": "p", "uid": "u", "labels": {"a": "b"}},
                      "spec": {"nodeName": "n", "containers": [{"name": "pilot", "image": "i",
                                                               "resources": {"requests": {"cpu": "1"}}}]},
                      "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert PodRecord.of(parsed) == PodRecord.of(pod)
    # a shape the schema refuses is parsed whole and read the usual way (a wrong field reads as absent)
    odd = dict(pod, spec={"containers": "none", "nodeName": "n"})
    assert PodRecord.of(decode_pod(json.dumps(odd).encode())).containers == [] and PodRecord.of(decode_pod(
        json.dumps(odd).encode())) == PodRecord.of(odd)
    with pytest.raises(ValueError):
        decode_pod(b"{not json")


@pytest.mark.parametrize("line, kind, obj", [
    (b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"x","managedFields":[]}}}', "ADDED",
     {"metadata": {"name": "x"}}),
    (b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}', "ERROR",
     {"kind": "Status", "code": 410, "reason": "Expired"}),
    (b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}', "BOOKMARK",
     {"kind": "Pod", "metadata": {"resourceVersion": "12"}}),
], ids=["pod", "error-status", "bookmark"])
def test_watch_events_are_parsed_by_their_kind(line: bytes, kind: str, obj: dict) -> None:
    assert decode_event(line) == {"type": kind, "object": obj}


def test_without_msgspec_the_json_module_parses_whole_to_the_same_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    from gahp.backends.k8s import view

    pod = {"metadata": {"name": "p", "managedFields": [{}]}, "spec": {"containers": [{"name": "c", "env": []}]}}
    monkeypatch.setattr(view, "msgspec", None)
    whole = view._parser(view._Pod)(json.dumps(pod).encode())
    assert whole == pod and PodRecord.of(whole) == PodRecord.of(decode_pod(json.dumps(pod).encode()))
