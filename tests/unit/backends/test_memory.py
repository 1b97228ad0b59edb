"""The in-memory backend, the template of a backend, inside its agent as every backend is: its
submits are recorded and admitted by the black-hole guard, its answers follow the GAHP-wide rules
(outputs written inside the job's directory or a hold, never back, final answers, the verdict), and a
fresh process finishes a job's business from its job id and record alone."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List

import pytest

from gahp.rules import holds
from gahp.agent import Agent
from gahp.backends.memory import MemoryBackend
from gahp.core.config import Knobs
from gahp.core.errors import BackendError, InvalidJob
from gahp.core.job import PilotJob
from gahp.core.jobstate import Phase
from polling import wait_until


@pytest.fixture
def made(tmp_path: Path) -> Iterator[List[Agent]]:
    backends: List[Agent] = []
    yield backends
    for backend in backends:
        backend.close()


def _backend(made: List[Agent], tmp_path: Path, **knobs: str) -> Agent:
    state = tmp_path / "state"
    state.mkdir(mode=0o1777, exist_ok=True)
    backend = Agent(MemoryBackend.from_knobs(Knobs({"PODGAHP_STATE_DIR": str(state),
                                                    "PODGAHP_MEMORY_IDLE_SECONDS": "0.1",
                                                    "PODGAHP_MEMORY_RUN_SECONDS": "0.1", **knobs})))
    made.append(backend)
    return backend


def _pilot(tmp_path: Path, sandbox: str = "ce_1.0", stdout: str = "p.out", **env: str) -> PilotJob:
    return PilotJob(executable="/bin/pilot", iwd=str(tmp_path), sandbox_id=sandbox, arguments=("-v",),
                    environment=tuple(env.items()), stdout=str(tmp_path / stdout), stderr=str(tmp_path / "p.err"))


def test_a_fresh_process_finishes_a_job_from_its_id_and_record(made: List[Agent], tmp_path: Path) -> None:
    first = _backend(made, tmp_path)
    job_id = first.submit(_pilot(tmp_path, PODGAHP_SIM_EXIT_CODE="3"))
    assert first.submit(_pilot(tmp_path)) == job_id  # the sandbox has a live job: reused
    assert first.records.get(job_id) is not None
    fresh = _backend(made, tmp_path)
    state = wait_until(lambda: fresh.status(job_id), "completed", 10, 0.05, done=lambda s: s.phase is Phase.COMPLETED)
    assert state.exit_code == 3 and (tmp_path / "p.out").read_text() == "memory backend ran: sandbox ce_1.0\n"
    assert (tmp_path / "p.err").read_text() == ""
    assert fresh.status(job_id) is state  # the final answer, again
    with pytest.raises(InvalidJob):
        fresh.status("memory/x")


def test_an_output_that_cannot_be_written_holds_the_job(made: List[Agent], tmp_path: Path) -> None:
    backend = _backend(made, tmp_path)
    os.symlink("/etc", tmp_path / "link")
    job_id = backend.submit(_pilot(tmp_path, stdout="link/p.out"))
    state = wait_until(lambda: backend.status(job_id), "final", 10, 0.05, done=lambda s: s.phase is not Phase.IDLE
                       and s.phase is not Phase.RUNNING)
    assert (state.phase, state.hold_code, state.hold_subcode) == (Phase.HELD, holds.HOLD_RETRYABLE, holds.OUTPUT.subcode)
    assert "symbolic link" in (state.hold_reason or "") and not os.path.exists("/etc/p.out")


def test_a_cancel_is_kept_in_the_record(made: List[Agent], tmp_path: Path) -> None:
    backend = _backend(made, tmp_path, PODGAHP_MEMORY_IDLE_SECONDS="60")
    job_id = backend.submit(_pilot(tmp_path))
    assert backend.status(job_id).phase is Phase.IDLE
    backend.cancel(job_id)
    assert _backend(made, tmp_path).status(job_id).phase is Phase.REMOVED


def test_pilots_failing_fast_close_the_queue(made: List[Agent], tmp_path: Path) -> None:
    backend = _backend(made, tmp_path, PODGAHP_BLACKHOLE_FAILURES="3", PODGAHP_MEMORY_IDLE_SECONDS="0",
                       PODGAHP_MEMORY_RUN_SECONDS="0")
    for n in range(3):
        job_id = backend.submit(_pilot(tmp_path, sandbox=f"ce_{n}.0", PODGAHP_SIM_EXIT_CODE="1"))
        assert backend.status(job_id).exit_code == 1
    with pytest.raises(BackendError, match="closed as a black hole"):
        backend.submit(_pilot(tmp_path, sandbox="ce_9.0"))
    backend.stats.flush()
    assert "submits_refused_blackhole" in Path(backend.stats.path).read_text()


def test_a_job_that_cannot_be_recorded_is_not_made(made: List[Agent], tmp_path: Path) -> None:
    backend = _backend(made, tmp_path)
    backend.records.directories = []  # no state directory can be used
    with pytest.raises(BackendError, match="cannot be recorded, so it is not made.*PODGAHP_STATE_DIR"):
        backend.submit(_pilot(tmp_path))
    backend.records.directories = _backend(made, tmp_path).records.directories
    job_id = backend.submit(_pilot(tmp_path))  # the sandbox has no job: a new one is made, and recorded
    assert backend.records.get(job_id) is not None
