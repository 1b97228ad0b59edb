"""Helpers for the ``test_lancium_*`` files: simulator clocks fast enough for tests, knobs for a
backend, a pilot with real files to stage, waiting for a phase. The fixtures are in ``conftest.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

from gahp.agent import Agent
from gahp.core.config import Knobs
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from podgahp_sim.lancium import LanciumSim, LanciumSimSettings
from polling import wait_until


def fast_settings() -> LanciumSimSettings:
    return LanciumSimSettings(tick=0.01, submit_seconds=0.02, queue_seconds=0.05, run_seconds=0.3,
                              delete_seconds=0.2, output_prepare_polls=1)


def knobs_for(sim: LanciumSim, key_file: Path, **extra: str) -> Knobs:
    """Knobs for a backend of ``sim``; its state (job records) next to the key file, the test's own."""
    state = key_file.parent / "state"
    state.mkdir(exist_ok=True)
    values = {
        "PODGAHP_STATE_DIR": str(state),
        "PODGAHP_LANCIUM_BASE_URL": sim.url,
        "PODGAHP_LANCIUM_API_KEY_FILE": str(key_file),
        "PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS": "0",
        "PODGAHP_LANCIUM_BACKOFF_SECONDS": "0.01",
        "PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS": "0.05",
        "PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS": "5",
    }
    values.update(extra)
    return Knobs(values)


BackendFactory = Callable[..., Agent]
"""Builds a Lancium backend from knobs, inside its agent (what the GAHP serves)."""


def make_pilot(tmp_path: Path, sandbox: str = "ce.example.org_ce_1.0_1700000000", *,
               env: Optional[Dict[str, str]] = None, **fields: object) -> PilotJob:
    """A pilot with an executable, a proxy and one input file in ``tmp_path/iwd``."""
    iwd = tmp_path / "iwd"
    iwd.mkdir(parents=True, exist_ok=True)
    exe = iwd / "glidein_startup.sh"
    exe.write_text("#!/bin/sh\necho pilot\n")
    proxy = iwd / "x509up_u1000"
    proxy.write_text("PROXY")
    token = iwd / "pilot.token"
    token.write_text("TOKEN")
    values: Dict[str, object] = dict(
        executable=str(exe), iwd=str(iwd), sandbox_id=sandbox, arguments=("-v", "a b"),
        environment=tuple((env or {}).items()), stdout=str(iwd / "pilot.out"),
        stderr=str(iwd / "pilot.err"), transfer_input=(str(token),), proxy=str(proxy),
        cpus=1, memory_mb=2048, wall_time_s=3600,
    )
    values.update(fields)
    return PilotJob(**values)  # type: ignore[arg-type]


def wait_phase(backend: Agent, job_id: str, phases: Tuple[Phase, ...],
               timeout: float = 10.0) -> JobState:
    return wait_until(lambda: backend.status(job_id), f"{job_id} in {phases}", timeout,
                      done=lambda state: state.phase in phases)


def deleted(sim: LanciumSim, job_id: int) -> bool:
    """The job was deleted: ``delete pending``, or already gone (it stays ``delete pending`` for
    ``delete_seconds`` only, 0.2 s here: a moment on a busy machine)."""
    try:
        return sim.job(job_id)["status"] == "delete pending"
    except KeyError:
        return True
