"""Logging that costs nothing per poll: a state change is one INFO line with the job id, a poll that
changes nothing is no line at all."""

from __future__ import annotations

import logging

import pytest

from gahp.jobstate import JobState, Phase
from gahp.reports import Reports


def test_one_line_per_change_of_state_none_per_poll(caplog: pytest.LogCaptureFixture) -> None:
    reports = Reports()
    with caplog.at_level(logging.INFO, logger="gahp.reports"):
        for state in [JobState(Phase.IDLE)] * 50 + [JobState(Phase.RUNNING, worker_node="n1")] * 50 + \
                [JobState(Phase.COMPLETED, exit_code=0, worker_node="n1")] * 50:
            reports.answer("k8s/pilots/p-1", state)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["[k8s/pilots/p-1] idle", "[k8s/pilots/p-1] idle -> running (node n1)",
                     "[k8s/pilots/p-1] running -> completed (exit code 0, node n1)"]
