"""Logging that costs nothing per poll: a state change is one INFO line with the job id, a poll that
changes nothing is no line at all; a submit is one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gahp.agent import Agent
from gahp.backends.memory import MemoryBackend
from gahp.program.commands import Commands
from gahp.core.config import Knobs
from gahp.core.jobstate import JobState, Phase
from gahp.rules.answers import Reports


def test_one_line_per_change_of_state_none_per_poll(caplog: pytest.LogCaptureFixture) -> None:
    reports = Reports()
    with caplog.at_level(logging.INFO, logger="gahp.rules.answers"):
        for state in [JobState(Phase.IDLE)] * 50 + [JobState(Phase.RUNNING, worker_node="n1")] * 50 + \
                [JobState(Phase.COMPLETED, exit_code=0, worker_node="n1")] * 50:
            reports.answer("k8s/pilots/p-1", state)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["[k8s/pilots/p-1] idle", "[k8s/pilots/p-1] idle -> running (node n1)",
                     "[k8s/pilots/p-1] running -> completed (exit code 0, node n1)"]


def test_one_info_line_per_submit_naming_what_was_asked_and_what_it_became(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o1777)
    backend = Agent(MemoryBackend.from_knobs(Knobs({"PODGAHP_STATE_DIR": str(state)})))
    commands = Commands(backend)
    ad = (f'[ Cmd = "/bin/sleep"; Iwd = "{tmp_path}"; JobDirectory = "home_bl_ce_7.0"; NodeNumber = 4; '
          'RequestMemory = 2048; gridtype = "k8s" ]')
    try:
        with caplog.at_level(logging.INFO, logger="gahp"):
            reply = commands.submit([ad])
    finally:
        backend.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == [f"sandbox ce_7.0 is {reply[-1]}: /bin/sleep (4 cpus, 2048 MiB, queue default)"]
