"""The state table: every row of ``STATE_TABLE`` reached from a pod shaped as Kubernetes shapes it
(kubernetes-api.md §4), and the JobState it gives."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import List, Optional

import pytest

from gahp.backends.http import JsonObj
from gahp.backends.k8s.view import PodRecord
from gahp.backends.k8s.state import (STATE_TABLE, _provisioned, classify, job_state, parse_time,
                                     quantity)
from gahp.backends.k8s.spec import CONTAINER
from gahp.rules.holds import HOLD_FATAL, HOLD_RETRYABLE
from gahp.rules import holds
from gahp.core.jobstate import Phase

pytestmark = pytest.mark.both_engines

NOW = datetime.datetime(2026, 11, 21, 12, 0, 0, tzinfo=datetime.timezone.utc)


def pod(phase: str, *, waiting: Optional[JsonObj] = None, terminated: Optional[JsonObj] = None,
        reason: str = "", message: str = "", conditions: Optional[List[JsonObj]] = None,
        age_s: int = 10) -> JsonObj:
    created = (NOW - datetime.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status: JsonObj = {"phase": phase, "conditions": conditions or []}
    if reason:
        status.update(reason=reason, message=message)
    state: JsonObj = {}
    if waiting:
        state["waiting"] = waiting
    if terminated:
        state["terminated"] = {"startedAt": "2026-11-21T11:00:00Z", "finishedAt": "2026-11-21T11:30:00Z",
                               **terminated}
    if phase == "Running" and not state:
        state["running"] = {"startedAt": "2026-11-21T11:00:00Z"}
    if state:
        status["containerStatuses"] = [{"name": "pilot", "image": "img:1", "imageID": "", "ready": False,
                                        "restartCount": 0, "state": state}]
    return {"metadata": {"name": "p", "namespace": "ns", "creationTimestamp": created},
            "spec": {"nodeName": "n1", "containers": [{"name": "pilot", "image": "img:1", "resources": {
                "requests": {"cpu": "2", "memory": "2Gi", "ephemeral-storage": "1000Ki"}}}]},
            "status": status}


UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]
DISRUPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
              "message": "default-scheduler: preempting to accommodate a higher priority pod"}]
EVICTED_MSG = "The node was low on resource: memory. "

# (key, pod, disruption action, phase, hold code, subcode, exit code, exit signal, words in the reason)
ROWS = [
    ("Pending", pod("Pending"), "complete", Phase.IDLE, 0, 0, None, None, ""),
    ("Pending/Unschedulable", pod("Pending", conditions=UNSCHEDULABLE), "complete", Phase.IDLE, 0, 0, None,
     None, ""),
    ("Pending/Unschedulable/TimedOut", pod("Pending", conditions=UNSCHEDULABLE, age_s=7200), "complete",
     Phase.HELD, HOLD_RETRYABLE, holds.UNSCHEDULABLE.subcode, None, None, "Insufficient nvidia.com/gpu"),
    ("Pending/ErrImagePull", pod("Pending", waiting={"reason": "ErrImagePull", "message": "not found"}),
     "complete", Phase.HELD, HOLD_FATAL, holds.IMAGE_PULL.subcode, None, None, 'image "img:1"'),
    ("Pending/ImagePullBackOff", pod("Pending", waiting={"reason": "ImagePullBackOff",
                                                         "message": 'Back-off pulling image "img:1"'}),
     "complete", Phase.HELD, HOLD_FATAL, holds.IMAGE_PULL.subcode, None, None, 'image "img:1"'),
    ("Pending/ErrImageNeverPull", pod("Pending", waiting={"reason": "ErrImageNeverPull"}), "complete",
     Phase.HELD, HOLD_FATAL, holds.IMAGE_PULL.subcode, None, None, "img:1"),
    ("Pending/InvalidImageName", pod("Pending", waiting={"reason": "InvalidImageName"}), "complete",
     Phase.HELD, HOLD_FATAL, holds.INVALID_IMAGE.subcode, None, None, "img:1"),
    ("Pending/CreateContainerConfigError", pod("Pending", waiting={
        "reason": "CreateContainerConfigError", "message": 'secret "t" not found'}), "complete", Phase.HELD,
     HOLD_FATAL, holds.CONTAINER_CONFIG.subcode, None, None, 'secret "t" not found'),
    ("Pending/CreateContainerError", pod("Pending", waiting={"reason": "CreateContainerError"}), "complete",
     Phase.HELD, HOLD_FATAL, holds.CONTAINER_CONFIG.subcode, None, None, "CreateContainerError"),
    ("Running", pod("Running"), "complete", Phase.RUNNING, 0, 0, None, None, ""),
    ("Unknown", pod("Unknown"), "complete", Phase.IDLE, 0, 0, None, None, ""),
    ("Succeeded", pod("Succeeded", terminated={"exitCode": 0, "reason": "Completed"}), "complete",
     Phase.COMPLETED, 0, 0, 0, None, ""),
    ("Failed", pod("Failed", terminated={"exitCode": 3, "reason": "Error"}), "complete", Phase.COMPLETED, 0, 0,
     3, None, ""),
    ("Failed/OOMKilled", pod("Failed", terminated={"exitCode": 137, "reason": "OOMKilled"}), "complete",
     Phase.HELD, HOLD_RETRYABLE, holds.OUT_OF_MEMORY.subcode, None, None, "OOMKilled"),
    ("Failed/DeadlineExceeded", pod("Failed", reason="DeadlineExceeded",
                                    message="Pod was active on the node longer than the specified deadline"),
     "complete", Phase.COMPLETED, 0, 0, None, 9, "longer than the specified deadline"),
    ("Failed/Evicted", pod("Failed", reason="Evicted", message=EVICTED_MSG, terminated={
        "exitCode": 137, "reason": "ContainerStatusUnknown"}), "complete", Phase.COMPLETED, 0, 0, 137, None,
     "low on resource: memory"),
    ("Failed/Preempted", pod("Failed", conditions=DISRUPTED, terminated={"exitCode": 137, "reason": "Error"}),
     "complete", Phase.COMPLETED, 0, 0, 137, None, "PreemptionByScheduler"),
    ("Failed/NodeShutdown", pod("Failed", reason="Terminated",
                                message="Pod was terminated in response to imminent node shutdown."),
     "complete", Phase.COMPLETED, 0, 0, None, 9, "node shutdown"),
    ("Failed/Evicted/Hold", pod("Failed", reason="Evicted", message=EVICTED_MSG), "hold", Phase.HELD,
     HOLD_RETRYABLE, holds.EVICTED.subcode, None, None, "low on resource"),
    ("Failed/Preempted/Hold", pod("Failed", conditions=DISRUPTED), "hold", Phase.HELD, HOLD_RETRYABLE,
     holds.PREEMPTED.subcode, None, None, "preempting"),
    ("Failed/NodeShutdown/Hold", pod("Failed", reason="Terminated", message="imminent node shutdown"), "hold",
     Phase.HELD, HOLD_RETRYABLE, holds.NODE_SHUTDOWN.subcode, None, None, "node shutdown"),
    ("Missing", None, "complete", Phase.REMOVED, 0, 0, None, None, ""),
]


def test_every_row_of_the_table_is_tested() -> None:
    assert sorted(row[0] for row in ROWS) == sorted(STATE_TABLE)


@pytest.mark.parametrize("key, raw, action, phase, code, subcode, exit_code, signal, words", ROWS,
                         ids=[row[0] for row in ROWS])
def test_state_table_row(key: str, raw: Optional[JsonObj], action: str, phase: Phase, code: int, subcode: int,
                         exit_code: Optional[int], signal: Optional[int], words: str) -> None:
    if raw is None:
        from gahp.backends.k8s.state import Classified
        state = job_state(None, Classified("Missing"), "k8s/ns/p")
        assert state.phase is Phase.REMOVED and state.blahp_status == 3
        return
    classified = classify(raw, now=NOW, unschedulable_timeout_s=3600, disruption_action=action)
    assert classified.key == key
    state = job_state(raw, classified, "k8s/ns/p")
    assert state.phase is phase
    assert (state.hold_code, state.hold_subcode) == (code, subcode)
    if phase is Phase.COMPLETED:
        assert (state.exit_code, state.exit_signal) == (exit_code, signal)
        assert state.exit_signal is not None or state.exit_code != 0 or key == "Succeeded", "a silent 0"
        if words:
            assert state.exit_reason and words in state.exit_reason
        if state.exit_signal is None:
            assert "ExitBySignal = false" in state.status_ad()
        assert state.wall_clock_s in (1800.0, None)
    if phase is Phase.HELD:
        assert state.hold_reason and words in state.hold_reason and "ns/p" in state.hold_reason
    assert state.cpus_provisioned == 2 and state.memory_provisioned_mb == 2048 and state.disk_provisioned_kb == 1000
    assert state.worker_node == "n1" and state.batch_id == "p"


def test_timeout_zero_waits_for_ever() -> None:
    raw = pod("Pending", conditions=UNSCHEDULABLE, age_s=10 ** 7)
    assert classify(raw, now=NOW, unschedulable_timeout_s=0, disruption_action="complete").key == \
        "Pending/Unschedulable"


def test_pilot_container_ended_while_a_sidecar_runs_is_completed() -> None:
    raw = pod("Running", terminated={"exitCode": 0, "reason": "Completed"})
    assert classify(raw, now=NOW, unschedulable_timeout_s=0, disruption_action="complete").key == "Succeeded"


@pytest.mark.parametrize("text, expected", [
    ("2026-11-21T12:00:00Z", NOW),
    ("2026-11-21T12:00:00.123456Z", NOW),
    ("2026-11-21T12:00:00+00:00", NOW),
    ("garbage", None),
    (None, None),
], ids=["plain", "fraction", "offset", "garbage", "none"])
def test_parse_time(text: Optional[str], expected: Optional[datetime.datetime]) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("100m", Decimal("0.1")), ("1.5Gi", Decimal(3 * 2 ** 29)), ("1e3", Decimal(1000)), ("2P", Decimal(2 * 10 ** 15)),
    (4, Decimal(4)), (None, None), ("bogus", None), ("", None), ("Infinity", None), ("NaN", None),
    ("1e999999999", None), ("9Ei", None),
])
def test_quantity(text: object, expected: Optional[Decimal]) -> None:
    """Quantities are read by the client's parser; a non-finite or absurd one is not a quantity."""
    assert quantity(text) == expected


def test_provisioned_resources_come_from_the_pilot_containers_requests() -> None:
    pod = {"spec": {"containers": [{"name": "sidecar", "resources": {"requests": {"cpu": "7"}}},
                                   {"name": CONTAINER, "resources": {"requests": {
                                       "cpu": "1500m", "memory": "1.5Gi", "ephemeral-storage": "1e308"}}}]}}
    assert _provisioned(PodRecord.of(pod)) == {"cpus": 2, "memory": 1536, "disk": None}
