"""gahp.reports: the answers every backend's status obeys (a row per rule), and its bound."""

from __future__ import annotations

from typing import List, Optional

import pytest

from gahp.jobstate import JobState, Phase
from gahp.reports import Reports

I, R, C, H, X = Phase.IDLE, Phase.RUNNING, Phase.COMPLETED, Phase.HELD, Phase.REMOVED


@pytest.mark.parametrize(
    "seen, reported",
    [
        ([I, R, I], [I, R, R]),  # never idle after running
        ([I, R, C, R], [I, R, C, C]),  # completed is final
        ([I, H, R], [I, H, H]),  # held is final
        ([R, X, I], [R, X, X]),  # removed is final
        ([C, H], [C, C]),  # a final answer does not change to another final one
        ([I, I, R, R], [I, I, R, R]),
    ],
    ids=["no-idle-after-running", "completed-final", "held-final", "removed-final", "final-stays",
         "forward"],
)
def test_answers(seen: List[Phase], reported: List[Phase]) -> None:
    reports = Reports()
    assert [reports.answer("j", JobState(p)).phase for p in seen] == reported


def test_started_is_past_idle_and_forget_starts_over() -> None:
    reports = Reports()
    assert reports.answer("j", JobState(I), started=True).phase is R
    reports.answer("j", JobState(C, exit_code=3))
    final: Optional[JobState] = reports.final("j")
    assert final is not None and final.exit_code == 3
    reports.forget("j")
    assert reports.final("j") is None and reports.answer("j", JobState(I)).phase is I


def test_memory_is_bounded_and_locks_are_shared() -> None:
    reports = Reports(max_jobs=100)
    for i in range(1000):
        reports.answer(f"job{i}", JobState(C))
    assert len(reports) == 100 and reports.final("job999") is not None and reports.final("job0") is None
    assert reports.lock("job1") is reports.lock("job1")
    assert len({id(reports.lock(f"job{i}")) for i in range(10000)}) <= 256
