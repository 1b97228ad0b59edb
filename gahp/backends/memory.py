"""An in-memory backend for tests and for trying the protocol without any remote service.

A pilot is idle for ``PODGAHP_MEMORY_IDLE_SECONDS``, runs for ``PODGAHP_MEMORY_RUN_SECONDS``, then
completes with the exit code of its ``PODGAHP_SIM_EXIT_CODE`` environment variable (default 0) and
a one-line ``Out`` naming the command. The state is computed from the job id (which records the
submit time and exit code), so a fresh process reports the same states; outputs are written only by
the process that accepted the submit. Knobs ``PODGAHP_MEMORY_DELAY_SECONDS`` (every call sleeps
that long first) and the job environment variables ``PODGAHP_SIM_SUBMIT_ERROR`` (submit is refused
with that text) and ``PODGAHP_SIM_CRASH`` (submit raises an unexpected exception) exist for tests.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Dict, Optional, Set

from gahp.backends.base import Backend
from gahp.config import Knobs
from gahp.errors import BackendError, InvalidJob
from gahp.job import PilotJob
from gahp.jobstate import JobState, Phase


@dataclass(frozen=True)
class MemorySettings:
    idle_s: float
    """``PODGAHP_MEMORY_IDLE_SECONDS``: seconds a pilot stays idle; default 1."""
    run_s: float
    """``PODGAHP_MEMORY_RUN_SECONDS``: seconds a pilot runs; default 2."""
    delay_s: float
    """``PODGAHP_MEMORY_DELAY_SECONDS``: extra latency of every call; default 0."""


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self, settings: MemorySettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._live: Dict[str, str] = {}  # sandbox id → job id
        self._jobs: Dict[str, PilotJob] = {}
        self._cancelled: Set[str] = set()
        self._written: Set[str] = set()
        self._serial = 0

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> MemoryBackend:
        return cls(MemorySettings(
            idle_s=knobs.number("PODGAHP_MEMORY_IDLE_SECONDS", 1.0, minimum=0),
            run_s=knobs.number("PODGAHP_MEMORY_RUN_SECONDS", 2.0, minimum=0),
            delay_s=knobs.number("PODGAHP_MEMORY_DELAY_SECONDS", 0.0, minimum=0),
        ))

    def _delay(self) -> None:
        if self.settings.delay_s:
            time.sleep(self.settings.delay_s)

    def ping(self) -> None:
        self._delay()

    def submit(self, job: PilotJob) -> str:
        self._delay()
        env = dict(job.environment)
        if "PODGAHP_SIM_CRASH" in env:
            raise RuntimeError("simulated crash")
        if "PODGAHP_SIM_SUBMIT_ERROR" in env:
            raise BackendError(env["PODGAHP_SIM_SUBMIT_ERROR"])
        try:
            exit_code = int(env.get("PODGAHP_SIM_EXIT_CODE", "0"))
        except ValueError:
            raise InvalidJob("PODGAHP_SIM_EXIT_CODE is not an integer") from None
        with self._lock:
            existing = self._live.get(job.sandbox_id)
            if existing is not None and self._phase(existing) not in (Phase.COMPLETED, Phase.REMOVED):
                return existing
            self._serial += 1
            job_id = f"memory/{job.sandbox_id}/{int(time.time() * 1000)}.{self._serial}/{exit_code}"
            self._live[job.sandbox_id] = job_id
            self._jobs[job_id] = job
        return job_id

    def _parse(self, job_id: str) -> Optional[tuple]:  # type: ignore[type-arg]
        parts = job_id.split("/")
        if len(parts) != 4 or parts[0] != "memory":
            return None
        try:
            return float(parts[2].split(".")[0]) / 1000, int(parts[3])
        except ValueError:
            return None

    def _phase(self, job_id: str) -> Phase:
        return self.status(job_id, delay=False).phase

    def status_now(self, job_id: str) -> Optional[JobState]:
        """Idle and running answers at once, as the Kubernetes backend gives them from its watch copy
        (so the two compare on the same path); the end (outputs to write) and a configured delay go
        to a worker."""
        parsed = self._parse(job_id)
        if self.settings.delay_s or parsed is None or job_id in self._cancelled:
            return None
        return self._before_end(job_id, parsed[0])

    def _before_end(self, job_id: str, submitted: float) -> Optional[JobState]:
        """Idle or running by the job's age; None once it has ended."""
        age = time.time() - submitted
        if age < self.settings.idle_s:
            return JobState(Phase.IDLE, batch_id=job_id)
        if age < self.settings.idle_s + self.settings.run_s:
            return JobState(Phase.RUNNING, batch_id=job_id, worker_node="memory")
        return None

    def status(self, job_id: str, delay: bool = True) -> JobState:
        if delay:
            self._delay()
        parsed = self._parse(job_id)
        if parsed is None:
            raise InvalidJob(f"{job_id!r} is not a memory backend job id")
        submitted, exit_code = parsed
        if job_id in self._cancelled:
            return JobState(Phase.REMOVED, batch_id=job_id)
        live = self._before_end(job_id, submitted)
        if live is not None:
            return live
        self._write_outputs(job_id)
        return JobState(Phase.COMPLETED, exit_code=exit_code, batch_id=job_id, worker_node="memory",
                        wall_clock_s=self.settings.run_s)

    def _write_outputs(self, job_id: str) -> None:
        job = self._jobs.get(job_id)
        if job is None or job_id in self._written:
            return
        if job.stdout:
            with open(job.stdout, "w") as f:
                f.write(f"memory backend ran: {' '.join((job.executable, *job.arguments))}\n")
        if job.stderr and job.stderr != job.stdout:
            open(job.stderr, "w").close()
        self._written.add(job_id)

    def cancel(self, job_id: str) -> None:
        self._delay()
        if self._parse(job_id) is None:
            raise InvalidJob(f"{job_id!r} is not a memory backend job id")
        self._cancelled.add(job_id)

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        self._delay()
        if not os.path.exists(proxy_path):
            raise InvalidJob(f"proxy file {proxy_path} does not exist")
