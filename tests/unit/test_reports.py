"""gahp.rules.answers: the answers every backend's status obeys (a row per rule), and its bound."""

from __future__ import annotations

from typing import List, Optional

import pytest

from gahp.core.jobstate import JobState, Phase
from gahp.rules.answers import Reports

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


def test_an_answer_from_the_same_record_is_given_again_until_the_record_changes() -> None:
    reports = Reports()
    record, newer = {"rv": "1"}, {"rv": "1"}  # equal, not the same object
    first = reports.answer("j", JobState(R, batch_id="p"), source=record)
    assert reports.again("j", record) is first
    assert reports.again("j", newer) is None and reports.again("j", None) is None
    # derived again from a changed record: an equal answer is the same object (its status ad built once)
    assert reports.answer("j", JobState(R, batch_id="p"), source=newer) is first
    assert reports.again("j", record) is None and reports.again("j", newer) is first
    changed = reports.answer("j", JobState(R, batch_id="p", worker_node="n"), source=record)
    assert changed is not first and reports.again("j", record) is changed
    # never back holds for answers kept with their record; a final answer is given for any record
    assert reports.answer("j", JobState(I), source=newer).phase is R
    done = reports.answer("j", JobState(C, exit_code=0), source=record)
    assert reports.again("j", record) is done and reports.again("j", None) is done
    reports.forget("j")
    assert reports.again("j", record) is None


def test_a_status_ad_is_built_once_per_answer() -> None:
    state = JobState(R, batch_id="pod-1", worker_node="node")
    assert state.status_ad() is state.status_ad() and 'BatchjobId = "pod-1"' in state.status_ad()
    assert state == JobState(R, batch_id="pod-1", worker_node="node")  # the kept ad is not a field
