"""The shape of every backend's state table (gahp.backends.table): a row holds exactly when it has a
hold, and a row's answer is the same for every backend: held with the row's hold and reason, completed
with the exit status, else the row's phase over what the record says of the job."""

from __future__ import annotations

from typing import Optional

import pytest

from gahp.rules import holds
from gahp.backends.table import Classified, Rule, answer
from gahp.core.jobstate import JobState, Phase

TABLE = {
    "waiting": Rule(Phase.IDLE),
    "running": Rule(Phase.RUNNING),
    "done": Rule(Phase.COMPLETED),
    "killed": Rule(Phase.COMPLETED, reason="Killed by the service"),
    "broken": Rule(Phase.HELD, holds.REMOTE_ERROR, "job failed"),
    "gone": Rule(Phase.REMOVED),
}
DETAILS = JobState(Phase.IDLE, batch_id="j1", worker_node="node-1", cpus_provisioned=2, wall_clock_s=5.0)


@pytest.mark.parametrize("phase, hold", [(Phase.HELD, None), (Phase.IDLE, holds.REMOTE_ERROR),
                                         (Phase.COMPLETED, holds.OUTPUT)], ids=["held-no-hold", "idle", "completed"])
def test_a_row_holds_exactly_when_it_has_a_hold(phase: Phase, hold: Optional[holds.Hold]) -> None:
    with pytest.raises(ValueError, match="held exactly when it has a hold"):
        Rule(phase, hold)


@pytest.mark.parametrize("key, expected", [
    (Classified("waiting"), JobState(Phase.IDLE, batch_id="j1", worker_node="node-1", cpus_provisioned=2,
                                     wall_clock_s=5.0)),
    (Classified("running"), JobState(Phase.RUNNING, batch_id="j1", worker_node="node-1", cpus_provisioned=2,
                                     wall_clock_s=5.0)),
    (Classified("done", exit_code=3), JobState(Phase.COMPLETED, exit_code=3, batch_id="j1", worker_node="node-1",
                                               cpus_provisioned=2, wall_clock_s=5.0)),
    (Classified("done"), JobState(Phase.COMPLETED, exit_code=0, batch_id="j1", worker_node="node-1",
                                  cpus_provisioned=2, wall_clock_s=5.0)),
    (Classified("killed", "node lost", exit_signal=9),
     JobState(Phase.COMPLETED, exit_signal=9, exit_reason="Killed by the service: node lost", batch_id="j1",
              worker_node="node-1", cpus_provisioned=2, wall_clock_s=5.0)),
    (Classified("broken", "disk full", exit_code=1),
     JobState(Phase.HELD, hold_code=holds.REMOTE_ERROR.code, hold_subcode=holds.REMOTE_ERROR.subcode,
              hold_reason="job failed: job j1: disk full", batch_id="j1", worker_node="node-1", cpus_provisioned=2,
              wall_clock_s=5.0)),
    (Classified("gone"), JobState(Phase.REMOVED, batch_id="j1", worker_node="node-1", cpus_provisioned=2,
                                  wall_clock_s=5.0)),
], ids=lambda v: v.key if isinstance(v, Classified) else "")
def test_each_row_gives_its_answer(key: Classified, expected: JobState) -> None:
    assert answer(TABLE, key, DETAILS, "job j1") == expected


def test_a_held_row_without_a_message_names_the_job() -> None:
    assert answer(TABLE, Classified("broken"), DETAILS, "job j1").hold_reason == "job failed: job j1"
