"""podgahp q's join of routed jobs with every backend's remote jobs (pure: ads and a census in, rows out)."""

from __future__ import annotations

import datetime
from typing import Any, Dict

from gahp.backends.base import RemoteJob
from gahp.ce.q import age_text, join, long_form, matches, table


def name(n: int) -> str:
    """A pod name of the form podgahp creates."""
    return f"pilot-{n:020x}-1"


NOW = datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.timezone.utc)


def ad(cluster: int, remote: str = "", status: int = 2, backend: str = "k8s", **extra: Any) -> Dict[str, Any]:
    grid = f"batch {backend} ce.test_{cluster}" + (f" {remote}" if remote else "")
    values = {"ClusterId": cluster, "ProcId": 0, "Owner": "alice", "RouteName": "K8s_Cpu", "GridJobId": grid,
              "GridResource": f"batch {backend}", "JobStatus": status, "RoutedFromJobId": f"{cluster - 100}.0",
              "QDate": int(NOW.timestamp()) - 90}
    values.update(extra)
    return values


def pod(n: int, state: str, node: str = "", reason: str = "") -> RemoteJob:
    return RemoteJob(job_id=f"k8s/pilots/{name(n)}", name=name(n), queue="cpu", state=state, health=state,
                     alive=True, sandbox="", created=NOW - datetime.timedelta(seconds=60), listed_at=NOW,
                     where="pilots", node=node, reason=reason)


REMOTE = [
    pod(101, "Running", "node-1"),
    pod(102, "Pending", reason="0/3 nodes are available: 3 Insufficient cpu."),
    pod(103, "Pending", "node-2", 'image "img:1": ImagePullBackOff: nope'),
    pod(999, "Running", "node-3"),
    RemoteJob(job_id="lancium/77", name="77", queue="lancium", state="queued", health="Pending", alive=True,
              sandbox="", created=None, listed_at=NOW),
]


def test_each_job_gets_its_remote_jobs_node_state_and_reason() -> None:
    rows = {r.job: r for r in join([ad(103, f"k8s/pilots/{name(103)}"), ad(101, f"k8s/pilots/{name(101)}"),
                                    ad(102, f"k8s/pilots/{name(102)}", status=1), ad(104),
                                    ad(105, f"k8s/pilots/{name(105)}"),
                                    ad(106, f"k8s/pilots/{name(101)}", status=5, HoldReason="Error from x"),
                                    ad(107, "lancium/77", status=1, backend="lancium", BatchQueue="lancium")],
                                   REMOTE, NOW)}
    assert (rows["101.0"].node, rows["101.0"].phase, rows["101.0"].reason, rows["101.0"].age_s) == \
        ("node-1", "Running", "", 60)
    assert rows["101.0"].queue == "cpu" and rows["101.0"].source == "1.0" and rows["101.0"].owner == "alice"
    assert (rows["101.0"].backend, rows["101.0"].where, rows["101.0"].remote) == ("k8s", "pilots", name(101))
    assert rows["102.0"].phase == "Pending" and "Insufficient cpu" in rows["102.0"].reason
    assert rows["102.0"].status == "I"
    assert rows["103.0"].node == "node-2" and "ImagePullBackOff" in rows["103.0"].reason
    assert (rows["104.0"].remote, rows["104.0"].phase, rows["104.0"].reason, rows["104.0"].age_s) == \
        ("", "", "no remote job yet", 90)
    assert (rows["105.0"].remote, rows["105.0"].reason) == (name(105), "remote job gone")
    assert rows["106.0"].reason == "held: Error from x"
    assert (rows["107.0"].backend, rows["107.0"].remote, rows["107.0"].phase, rows["107.0"].age_s) == \
        ("lancium", "77", "queued", 90)
    assert [r.job for r in join([ad(110), ad(99), ad(100)], [], NOW)] == ["99.0", "100.0", "110.0"]


def test_filters_and_formats() -> None:
    rows = join([ad(101, f"k8s/pilots/{name(101)}"), ad(102, f"k8s/pilots/{name(102)}"),
                 ad(107, "lancium/77", backend="lancium")], REMOTE, NOW)
    assert [r.job for r in rows if matches(r, None, "node-1", None)] == ["101.0"]
    assert [r.job for r in rows if matches(r, None, None, "pending")] == ["102.0"]
    assert [r.job for r in rows if matches(r, "gpu", None, None)] == []
    assert [r.job for r in rows if matches(r, None, None, None, "lancium")] == ["107.0"]
    text = table(rows)
    assert text.splitlines()[0].split() == ["JOB", "SOURCE", "OWNER", "ROUTE", "QUEUE", "ST", "REMOTE", "NODE",
                                            "PHASE", "AGE", "REASON"]
    assert "101.0" in text and "node-1" in text and "0+00:01:00" in text
    assert text.splitlines()[-1] == "Total for this CE: 3 pilots; remote jobs: 1 pending, 1 running, 1 queued"
    assert "node = 'node-1'" in long_form(rows)
    assert age_text(90061) == "1+01:01:01" and age_text(None) == "?"


def test_user_fields_reach_the_terminal_escaped() -> None:
    """A hold reason (condor_hold -reason), a BatchQueue, a source job id and an owner are user input;
    a remote job's state, node and reason can be written by whoever may change it (patch pods). No ESC,
    BEL, CR, newline or bidirectional override reaches the admin's terminal, in the table or long form."""
    hostile = "\x1b]0;owned\x07\x1b[2J\rfake 1.0\nTotal for this CE: 0\u202e"
    bad = RemoteJob(job_id=f"k8s/pilots/{name(101)}", name=name(101), queue="cpu", state="Running\x1b[8m",
                    health="Running", alive=True, sandbox="", created=NOW, listed_at=NOW, node="node\x07-1",
                    reason="Crash\x1b[31mLoop")
    rows = join([ad(101, f"k8s/pilots/{name(101)}", status=5, HoldReason=hostile, BatchQueue=hostile,
                    RoutedFromJobId=hostile, Owner=hostile, RouteName=hostile), ad(102, BatchQueue=hostile)],
                [bad], NOW)
    for text in (table(rows), long_form(rows)):
        assert all(line.isprintable() for line in text.splitlines()), [l for l in text.splitlines() if not l.isprintable()]
        assert "\\x1b]0;owned\\x07" in text
    assert len(table(rows).splitlines()) == 2 + 2 + 1  # header, two pilots, blank line, total: no forged line
