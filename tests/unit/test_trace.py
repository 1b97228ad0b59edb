"""``podgahp trace``'s hops from what the schedd and the cluster say: one row per place a pilot can
stop, each naming why."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import pytest

from gahp.backends.base import Census, CeView, RemoteJob
from gahp.backends.k8s.census import KubernetesCeView
from gahp.backends.k8s.podtrace import pod_hops, pod_of
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.core.config import Knobs, user_name
from gahp.rules.hops import DONE, FAILED, WAITING, Hop
from gahp.core.statedir import own_directory
from gahp.ce.trace import (OUTPUT, SCHEDD_HOPS, Ce, Trace, follow, json_text, look, output_hop, schedd_hops,
                        text_lines, verdict)

SOURCE = {"ClusterId": 12, "ProcId": 0, "Owner": "pilot", "JobStatus": 1}
ROUTED = {"ClusterId": 13, "ProcId": 0, "JobStatus": 1, "RouteName": "K8s_Cpu", "GridResource": "batch k8s",
          "BatchQueue": "cpu", "RoutedFromJobId": "12.0"}
GRID_JOB_ID = "batch k8s home_bl_x k8s/pilots/pilot-0123456789abcdef0123-1"


@pytest.mark.parametrize("source, routed, last, state, words, pod_next", [
    (None, None, "submitted", FAILED, "neither in the queue nor in the history", False),
    (SOURCE, None, "routed", WAITING, "condor_ce_job_router_info -match-jobs", False),
    ({**SOURCE, "JobStatus": 5, "HoldReason": "no route"}, None, "routed", FAILED, "held: no route", False),
    ({**SOURCE, "GridResource": "batch k8s"}, None, "routed", FAILED, "is itself a grid job", False),
    (SOURCE, {**ROUTED, "GridResource": "batch slurm"}, "grid job", FAILED, "not \"batch <backend>\" of a podgahp backend", False),
    (SOURCE, ROUTED, "GAHP request", WAITING, "no job id from the GAHP yet", False),
    (SOURCE, {**ROUTED, "GridResourceUnavailableTime": 1}, "GAHP request", WAITING, "BLAH_PING fails", False),
    (SOURCE, {**ROUTED, "JobStatus": 5, "HoldReason": "forbidden", "HoldReasonCode": 0}, "GAHP request", FAILED,
     "held: forbidden", False),
    (SOURCE, {**ROUTED, "GridJobId": "batch k8s home_bl_x"}, "GAHP request", WAITING, "no answer from the GAHP",
     False),
    (SOURCE, {**ROUTED, "GridJobId": GRID_JOB_ID}, "GAHP request", DONE, "pilot-0123456789abcdef0123-1", True),
], ids=["no-job", "not-routed", "source-held", "grid-job-given", "other-batch", "no-gahp-answer", "resource-down",
        "held-by-gahp", "sent-no-answer", "pod-next"])
def test_schedd_hops_stop_where_the_schedd_says(source: Optional[Dict[str, Any]], routed: Optional[Dict[str, Any]],
                                               last: str, state: str, words: str, pod_next: bool) -> None:
    hops, has_pod = schedd_hops(source, routed, "12.0")
    assert (hops[-1].name, hops[-1].state) == (last, state) and words in hops[-1].detail, hops
    assert all(h.state == DONE for h in hops[:-1]) and has_pod is pod_next


def _settings() -> KubernetesSettings:
    return KubernetesSettings.from_knobs(Knobs({"PODGAHP_K8S_QUEUES": "cpu", "PODGAHP_K8S_IMAGE": "x/y:1"}))


def _pod(phase: str, node: str = "", conditions: Optional[List[Dict[str, Any]]] = None,
         container: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": "pilot-0123456789abcdef0123-1", "namespace": "pilots", "creationTimestamp": now},
            "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": conditions or [],
                       "containerStatuses": [{"name": "pilot", "state": container}] if container else []}}


UNSCHEDULABLE = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                  "message": "0/3 nodes are available: 3 Insufficient cpu."}]


@pytest.mark.parametrize("pod, last, state, words", [
    (None, "pod created", WAITING, "no pod pilots/pilot-0123456789abcdef0123-1"),
    (_pod("Pending", conditions=UNSCHEDULABLE), "scheduled", WAITING, "3 Insufficient cpu"),
    (_pod("Pending", "node-a", container={"waiting": {"reason": "ContainerCreating"}}), "running", WAITING,
     "ContainerCreating"),
    (_pod("Pending", "node-a", container={"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}),
     "running", FAILED, "ImagePullBackOff: not found (state table: Pending/ImagePullBackOff"),
    (_pod("Running", "node-a", container={"running": {}}), "completed", WAITING, "still Running"),
    (_pod("Failed", "node-a", container={"terminated": {"exitCode": 3, "reason": "Error"}}), "completed", FAILED,
     "Failed"),
    (_pod("Succeeded", "node-a", container={"terminated": {"exitCode": 0, "reason": "Completed"}}), "completed",
     DONE, "Succeeded"),
], ids=["no-pod", "unschedulable", "creating", "image-pull", "running", "failed", "succeeded"])
def test_pod_hops_name_the_reason_of_a_stall(pod: Optional[Dict[str, Any]], last: str, state: str, words: str) -> None:
    settings = _settings()
    hops = pod_hops(pod, ("pilots", "pilot-0123456789abcdef0123-1"), ["Warning FailedScheduling: x"], settings,
                    settings.queue(None), datetime.datetime.now(datetime.timezone.utc))
    assert (hops[-1].name, hops[-1].state) == (last, state) and words in hops[-1].detail, hops
    assert all(h.state == DONE for h in hops[:-1])
    assert (hops[-1].events != []) is (state != DONE and last != "completed" or state == FAILED)


def test_pod_of_takes_only_podgahps_job_ids() -> None:
    assert pod_of(GRID_JOB_ID) == ("pilots", "pilot-0123456789abcdef0123-1")
    assert pod_of("batch k8s x k8s/pilots/../secrets") is None
    assert pod_of("batch lancium x lancium/1") is None


class FakeCe(Ce):
    """A CE whose schedd answers from a script of looks (the pod part is not reached)."""

    def __init__(self, looks: List[Dict[str, Optional[Dict[str, Any]]]]) -> None:
        super().__init__(Knobs({}), None, None)
        self.looks = looks
        self.index = 0

    def ad(self, constraint: str) -> Optional[Dict[str, Any]]:
        current = self.looks[min(self.index, len(self.looks) - 1)]
        return current["routed"] if constraint.startswith("RoutedFromJobId") else current["source"]


def test_follow_prints_each_change_once_and_stalls_at_the_timeout() -> None:
    ce = FakeCe([{"source": SOURCE, "routed": None}])
    clock = iter(float(t) for t in range(100))
    seen: List[Trace] = []
    last, outcome, elapsed = follow(ce, "12.0", "pilot", 5, 1, lambda t, _: seen.append(t),
                                    clock=lambda: next(clock), sleep=lambda _: None)
    assert outcome == "stalled" and len(seen) == 1 and last.stop is not None and last.stop.name == "routed"
    printed: set = set()
    assert len(text_lines(last, elapsed, printed)) == 2 and text_lines(last, elapsed, printed) == []
    assert 'stalled at "routed"' in verdict(last, outcome, elapsed)
    assert last.as_dict(elapsed, outcome)["stalled_at"] == "routed"


def test_follow_stops_at_once_on_a_failed_hop() -> None:
    ce = FakeCe([{"source": {**SOURCE, "JobStatus": 5, "HoldReason": "x"}, "routed": None}])
    _, outcome, _ = follow(ce, "12.0", "pilot", 100, 1, lambda *_: None, sleep=lambda _: None)
    assert outcome == "failed"


def test_a_trace_is_complete_only_with_every_hop_done() -> None:
    expected = SCHEDD_HOPS + KubernetesCeView.hops + (OUTPUT,)
    short = Trace("12.0", [Hop(name, DONE, "") for name in ("submitted", "routed")], expected=expected)
    assert short.stop is not None and short.stop.name == "grid job"
    almost = Trace("12.0", [Hop(name, DONE, "") for name in expected[:-2]], expected=expected)
    assert almost.stop is not None and almost.stop.name == "completed"
    trace = Trace("12.0", [Hop(name, DONE, "") for name in expected], expected=expected)
    assert trace.stop is None and trace.as_dict(1.0, "completed")["why"] is None


class ToyView(CeView):
    """A backend's view whose remote hops have names of its own (the trace knows no backend's words)."""

    backend = "memory"
    hops = ("job queued", "job ran")
    noun = "toy job"

    def __init__(self, done: int) -> None:
        self.done = done

    def census(self, held: FrozenSet[str]) -> Census:
        raise AssertionError("a trace takes no census")

    def delete(self, job: RemoteJob) -> None:
        raise AssertionError("a trace deletes nothing")

    def trace(self, grid_job_id: str, queue: Optional[str], user: str, ping: bool) -> Tuple[List[Hop], List[str]]:
        return [Hop(name, DONE if n < self.done else WAITING, name) for n, name in enumerate(self.hops)
                if n <= self.done], []


class ToyCe(FakeCe):
    def __init__(self, looks: List[Dict[str, Optional[Dict[str, Any]]]], done: int) -> None:
        super().__init__(looks)
        self.toy = ToyView(done)

    def view(self, backend: str) -> Optional[CeView]:
        return self.toy


TOY_ROUTED = {**ROUTED, "GridResource": "batch memory", "GridJobId": "batch memory home_bl_x memory/x/1.1/0"}


def test_the_remote_hops_are_the_backends_and_the_output_comes_after_the_last() -> None:
    waiting = look(ToyCe([{"source": SOURCE, "routed": TOY_ROUTED}], done=1), "12.0", "pilot")
    assert [h.name for h in waiting.hops] == list(SCHEDD_HOPS) + ["job queued", "job ran"]
    assert waiting.stop is not None and waiting.stop.name == "job ran"
    done = look(ToyCe([{"source": {**SOURCE, "JobStatus": 4}, "routed": {**TOY_ROUTED, "JobStatus": 4}}], done=2),
                "12.0", "pilot")
    assert [h.name for h in done.hops] == list(SCHEDD_HOPS) + ["job queued", "job ran", OUTPUT]
    assert done.stop is None and done.expected == SCHEDD_HOPS + ToyView.hops + (OUTPUT,)


def test_a_remote_job_cleaned_up_after_its_grid_job_completed_is_named_in_the_backends_words() -> None:
    trace = look(ToyCe([{"source": {**SOURCE, "JobStatus": 4}, "routed": {**TOY_ROUTED, "JobStatus": 4}}], done=0),
                 "12.0", "pilot")
    assert [h.name for h in trace.hops][len(SCHEDD_HOPS):] == ["job queued", "job ran", OUTPUT]
    assert all(h.state == DONE for h in trace.hops) and "the toy job is cleaned up" in trace.hops[-2].detail


#: What users and the cluster can write into what a trace prints: an OSC title, a screen clear, a
#: carriage return over the line, a C1 control, a bidirectional override, a line of its own, DEL.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\rok pilot done\x9b31m\u202eevil\nFAKE ok completed\x7f"


@pytest.mark.parametrize("source, routed, events", [
    ({**SOURCE, "Owner": HOSTILE, "JobStatus": 5, "HoldReason": HOSTILE}, None, []),
    (SOURCE, {**ROUTED, "RouteName": HOSTILE, "GridResource": "batch k8s", "BatchQueue": HOSTILE,
              "GridJobId": f"batch k8s {HOSTILE}"}, []),
    ({**SOURCE, "JobStatus": 4, "Iwd": "/home/pilot", "Out": HOSTILE}, "output", []),
    (SOURCE, {**ROUTED, "JobStatus": 5, "HoldReason": HOSTILE, "HoldReasonCode": HOSTILE}, [HOSTILE]),
], ids=["held-source", "route-and-queue", "output-path", "held-with-events"])
def test_nothing_users_or_the_cluster_wrote_reaches_the_terminal_raw(source: Dict[str, Any], routed: Any,
                                                                      events: List[str]) -> None:
    """HoldReason (condor_hold -reason), RouteName, BatchQueue, GridJobId, Owner, Out, a pod's Events
    and the ping's findings are printed escaped: one line each, nothing a terminal acts on."""
    hops = [output_hop(source)] if routed == "output" else schedd_hops(source, routed, "12.0")[0]
    hops[-1] = Hop(hops[-1].name, hops[-1].state, hops[-1].detail, events)
    trace = Trace("12.0", hops, problems=[HOSTILE])
    assert HOSTILE in " ".join(h.detail for h in hops) + " ".join(events)  # the raw text is there to escape
    text = text_lines(trace, 1.0, set()) + verdict(trace, "failed", 1.0).split("\n")
    assert all(line.isprintable() for line in text), [line for line in text if not line.isprintable()]
    assert not [line for line in text if line.startswith("FAKE")]
    document = json_text(trace, "failed", 1.0)
    assert all(" " <= c <= "~" or c == "\n" for c in document), repr(document)
    assert json.loads(document)["why"].count(HOSTILE) >= 1  # escaped, not lost


def test_the_owners_gahp_log_is_named_where_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "user"
    shared.mkdir()
    shared.chmod(0o1777)
    ce = Ce(Knobs({"USER_LOG": str(shared)}), None, None)
    assert ce.gahp_log("k8s", "pilot") == f"PODGAHP_LOG: PodgahpLog.k8s.pilot in Podgahp.pilot.* of {shared}, once " \
                                           "its GAHP has run"
    own = own_directory(str(shared), user_name())
    assert ce.gahp_log("k8s", user_name()) == f"PODGAHP_LOG: {own}/PodgahpLog.k8s.{user_name()}"
    hops, _ = schedd_hops(SOURCE, ROUTED, "12.0", ce.gahp_log("k8s", user_name()))
    assert f"{own}/PodgahpLog.k8s.{user_name()}" in hops[-1].detail
