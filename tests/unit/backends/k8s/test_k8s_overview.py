"""podgahp q's join of routed jobs with pods (pure: ads and pods in, rows out)."""

from __future__ import annotations

import datetime
from typing import Any, Dict

from gahp.backends.k8s.overview import age_text, join, long_form, matches, table
from gahp.backends.k8s.pod import LABEL_QUEUE
from gahp.backends.k8s.settings import KubernetesSettings
from gahp.config import Knobs

def name(n: int) -> str:
    """A pod name of the form podgahp creates."""
    return f"pilot-{n:020x}-1"


NOW = datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.timezone.utc)
SETTINGS = KubernetesSettings.from_knobs(Knobs({"PODGAHP_K8S_IMAGE": "i", "PODGAHP_K8S_QUEUES": "cpu gpu",
                                                "PODGAHP_K8S_CE_NAME": "ce.test"}))


def ad(cluster: int, pod: str = "", status: int = 2, **extra: Any) -> Dict[str, Any]:
    grid = f"batch k8s ce.test_{cluster} k8s/pilots/{pod}" if pod else f"batch k8s ce.test_{cluster}"
    values = {"ClusterId": cluster, "ProcId": 0, "Owner": "alice", "RouteName": "K8s_Cpu", "GridJobId": grid,
              "JobStatus": status, "RoutedFromJobId": f"{cluster - 100}.0", "QDate": int(NOW.timestamp()) - 90}
    values.update(extra)
    return values


def pod(name: str, phase: str, node: str = "", **status: Any) -> Dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "pilots", "labels": {LABEL_QUEUE: "cpu"},
                         "creationTimestamp": "2026-11-25T11:59:00Z"},
            "spec": {"nodeName": node, "containers": [{"name": "pilot", "image": "img:1"}]},
            "status": dict(status, phase=phase)}


PODS = [
    pod(name(101), "Running", "node-1"),
    pod(name(102), "Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/3 nodes are available: 3 Insufficient cpu."}]),
    pod(name(103), "Pending", "node-2", containerStatuses=[
        {"name": "pilot", "image": "img:1", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}}]),
    pod(name(999), "Running", "node-3"),
]


def test_each_job_gets_its_pods_node_phase_and_reason() -> None:
    rows = {r.job: r for r in join([ad(103, name(103)), ad(101, name(101)), ad(102, name(102), status=1), ad(104),
                                    ad(105, name(105)), ad(106, name(101), status=5, HoldReason="Error from x")],
                                   PODS, SETTINGS, NOW)}
    assert (rows["101.0"].node, rows["101.0"].phase, rows["101.0"].reason, rows["101.0"].age_s) == \
        ("node-1", "Running", "", 60)
    assert rows["101.0"].queue == "cpu" and rows["101.0"].source == "1.0" and rows["101.0"].owner == "alice"
    assert rows["102.0"].phase == "Pending" and "Insufficient cpu" in rows["102.0"].reason
    assert rows["102.0"].status == "I"
    assert rows["103.0"].node == "node-2" and "ImagePullBackOff" in rows["103.0"].reason
    assert (rows["104.0"].pod, rows["104.0"].phase, rows["104.0"].reason, rows["104.0"].age_s) == \
        ("", "", "no pod yet", 90)
    assert (rows["105.0"].pod, rows["105.0"].reason) == (name(105), "pod gone")
    assert rows["106.0"].reason == "held: Error from x"
    assert [r.job for r in join([ad(110), ad(99), ad(100)], [], SETTINGS, NOW)] == ["99.0", "100.0", "110.0"]


def test_filters_and_formats() -> None:
    rows = join([ad(101, name(101)), ad(102, name(102))], PODS, SETTINGS, NOW)
    assert [r.job for r in rows if matches(r, None, "node-1", None)] == ["101.0"]
    assert [r.job for r in rows if matches(r, None, None, "pending")] == ["102.0"]
    assert [r.job for r in rows if matches(r, "gpu", None, None)] == []
    text = table(rows)
    assert text.splitlines()[0].split() == ["JOB", "SOURCE", "OWNER", "ROUTE", "QUEUE", "ST", "POD", "NODE",
                                            "PHASE", "AGE", "REASON"]
    assert "101.0" in text and "node-1" in text and "0+00:01:00" in text
    assert text.splitlines()[-1] == "Total for this CE: 2 pilots; pods: 1 pending, 1 running"
    assert "node = 'node-1'" in long_form(rows)
    assert age_text(90061) == "1+01:01:01" and age_text(None) == "?"


def test_user_fields_reach_the_terminal_escaped() -> None:
    """A hold reason (condor_hold -reason), a BatchQueue, a source job id and an owner are user input;
    a pod's phase, node and waiting reason can be written by whoever may patch pods. No ESC, BEL, CR,
    newline or bidirectional override reaches the admin's terminal, in the table or the long form."""
    hostile = "\x1b]0;owned\x07\x1b[2J\rfake 1.0\nTotal for this CE: 0\u202e"
    bad_pod = pod(name(101), "Running\x1b[8m", "node\x07-1", containerStatuses=[
        {"name": "pilot", "image": "img:1", "state": {"waiting": {"reason": "Crash\x1b[31mLoop"}}}])
    rows = join([ad(101, name(101), status=5, HoldReason=hostile, BatchQueue=hostile, RoutedFromJobId=hostile,
                    Owner=hostile, RouteName=hostile), ad(102, BatchQueue=hostile)], [bad_pod], SETTINGS, NOW)
    for text in (table(rows), long_form(rows)):
        assert all(line.isprintable() for line in text.splitlines()), [l for l in text.splitlines() if not l.isprintable()]
        assert "\\x1b]0;owned\\x07" in text
    assert len(table(rows).splitlines()) == 2 + 2 + 1  # header, two pilots, blank line, total: no forged line
