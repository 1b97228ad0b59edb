"""Orphans: which remote jobs ``podgahp reap`` deletes, whatever the backend (its job is gone, past the
grace period on the service's clock, made through this CE's schedd, not already deleting), and when a
pass deletes nothing at all (an empty queue while pilots run, jobs of another CE using the same name,
no service clock)."""

from __future__ import annotations

import datetime
from typing import List, Optional

import pytest

from gahp.backends.base import RemoteJob
from gahp.ce.orphans import made_by, plan
from gahp.core.schedd import GridJobs

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0, tzinfo=datetime.timezone.utc)
SCHEDD = "ce.example.org"
#: A sandbox id as the gridmanager of schedd SCHEDD makes it: <collector>_<GlobalJobId, @ # as _>.
OURS = f"ce.example.org_9619_{SCHEDD}_7.0_1795297304"
THEIRS = "ce2.example.org_9619_ce2.example.org_7.0_1795297304"


def job(name: str, age_s: Optional[float], deleting: bool = False, state: str = "Succeeded",
        sandbox: str = OURS, listed_at: Optional[datetime.datetime] = NOW, backend: str = "k8s") -> RemoteJob:
    alive = state in ("Pending", "Running", "queued", "running")
    return RemoteJob(job_id=f"{backend}/ns/{name}" if backend == "k8s" else f"lancium/{name}", name=name,
                     queue="cpu", state=state, health=state, alive=alive, sandbox=sandbox,
                     created=None if age_s is None else NOW - datetime.timedelta(seconds=age_s),
                     listed_at=listed_at, deleting=deleting)


def jobs(*ids: str, count: Optional[int] = None) -> GridJobs:
    return GridJobs(job_ids=frozenset(ids), jobs=len(ids) if count is None else count, schedd_name=SCHEDD)


LIVE = "k8s/ns/pilot-b-1"


@pytest.mark.parametrize("remote, answer, deleted, refused", [
    ([job("pilot-a-1", 3600)], jobs(LIVE), ["pilot-a-1"], None),
    ([job("pilot-b-1", 3600)], jobs(LIVE), [], None),
    ([job("pilot-a-1", 30)], jobs(LIVE), [], None),
    ([job("pilot-a-1", 3600, deleting=True)], jobs(LIVE), [], None),
    ([job("pilot-a-1", None)], jobs(LIVE), [], None),
    ([job("pilot-a-1", 3600, listed_at=None)], jobs(LIVE), [], "without the service's time"),
    ([job("pilot-b-1", 3600, listed_at=None)], jobs(LIVE), [], None),
    # The schedd answers, successfully, with no grid job while pilots run: nothing is deleted.
    ([job("pilot-a-1", 3600, state="Running"), job("pilot-c-1", 3600)], jobs(), [], "answers with no grid job"),
    # An empty queue with only finished jobs is believed.
    ([job("pilot-a-1", 3600), job("pilot-c-1", 3600, state="Failed")], jobs(), ["pilot-a-1", "pilot-c-1"], None),
    # A job of this CE's name made through another schedd: another CE uses the name; the pass is refused.
    ([job("pilot-a-1", 3600), job("pilot-c-1", 3600, sandbox=THEIRS)], jobs(LIVE), [], "another CE uses the same"),
    # No sandbox id to tell whose job it was: kept (an error line), the rest goes on.
    ([job("pilot-a-1", 3600), job("pilot-c-1", 3600, sandbox="")], jobs(LIVE), ["pilot-a-1"], None),
    # Every backend's jobs are judged together: a Lancium job running keeps the pass from trusting an
    # empty answer for the pods too.
    ([job("pilot-a-1", 3600), job("17", 3600, state="running", backend="lancium")], jobs(), [],
     "answers with no grid job"),
    ([job("pilot-a-1", 3600), job("17", 3600, state="finished", backend="lancium")], jobs(LIVE), ["pilot-a-1", "17"],
     None),
], ids=["orphan", "job-exists", "young", "deleting", "no-time", "no-service-clock", "no-clock-but-held",
        "empty-answer-while-pilots-run", "empty-answer-only-finished", "another-ce-same-name", "no-sandbox",
        "lancium-alive-counts", "lancium-orphan"])
def test_orphan_rules(remote: List[RemoteJob], answer: GridJobs, deleted: List[str], refused: Optional[str]) -> None:
    decided = plan(remote, answer, grace_s=600, ce_name="ce.test")
    if refused is None:
        assert decided.refused is None
        assert [j.name for j in decided.orphans] == deleted
    else:
        assert decided.refused is not None and refused in decided.refused


def test_a_job_without_sandbox_is_reported() -> None:
    decided = plan([job("pilot-c-1", 3600, sandbox="")], jobs(LIVE), grace_s=600)
    assert decided.orphans == [] and "names no sandbox" in decided.skipped[0]


@pytest.mark.parametrize("sandbox, schedd, expected", [
    (OURS, SCHEDD, True),
    (THEIRS, SCHEDD, False),
    ("127.0.0.1_40001_schedd_pool.example.org_12.3_1795297304", "schedd@pool.example.org", True),
    (f"x.example.org_9619_other-{SCHEDD}_7.0_1", SCHEDD, False),   # a longer name ending like ours
    (f"{SCHEDD}_7.0_1795297304", SCHEDD, False),                    # no collector part
    ("ce.example.org_9619_ce.example.org_7.0", SCHEDD, False),      # no QDate
    (OURS, "", False),
], ids=["ours", "other-schedd", "at-in-name", "suffix-only", "no-pool", "no-qdate", "unknown-schedd"])
def test_sandbox_ids_name_their_schedd(sandbox: str, schedd: str, expected: bool) -> None:
    assert made_by(sandbox, schedd) is expected
