"""An in-memory backend for tests and for trying the protocol without any remote service, and the
smallest correct backend: the template a new one starts from (``docs/new-backend.md``).

It goes through the kit as every backend does: its submit is admitted by the black-hole guard and
recorded (:mod:`gahp.records`: what the gridmanager sent, the proof that this GAHP made the job), its
status is its own state table applied to its "remote record" and then the GAHP-wide rules
(:class:`gahp.backends.pipeline.Pipeline`: outputs written back inside the job's directory, never
back, final answers, the black-hole verdict, the figures), and its errors are the tree's. Having no
service, it needs no HTTP door (:mod:`gahp.backends.http`) and declares no CE-wide view.

Its "remote record" is the job id itself, ``memory/<sandbox>/<submit ms>.<serial>/<exit code>``, so a
fresh process reports the same states: a pilot is idle for ``PODGAHP_MEMORY_IDLE_SECONDS``, runs for
``PODGAHP_MEMORY_RUN_SECONDS``, then completes with the exit code of its ``PODGAHP_SIM_EXIT_CODE``
environment variable (default 0) and a one-line ``Out`` naming the command. A cancel is kept in the
job's record. Knobs for tests only, in no shipped configuration file: ``PODGAHP_MEMORY_IDLE_SECONDS``
(default 1), ``PODGAHP_MEMORY_RUN_SECONDS`` (default 2), ``PODGAHP_MEMORY_DELAY_SECONDS`` (every call
sleeps that long first; default 0); and the job environment variables ``PODGAHP_SIM_SUBMIT_ERROR``
(submit is refused with that text) and ``PODGAHP_SIM_CRASH`` (submit raises an unexpected exception).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from gahp.backends.base import Backend
from gahp.backends.pipeline import Pipeline
from gahp.blackhole import GuardSettings
from gahp.config import Knobs, user_name
from gahp.errors import BackendError, InvalidJob
from gahp.job import PilotJob
from gahp.jobstate import JobState, Phase
from gahp.outputs import write_output
from gahp.records import JobRecord

#: The black-hole guard's queue of pilots that name none.
QUEUE = "memory"
#: Commands remembered for the ``Out`` this process writes (the oldest go first).
MAX_COMMANDS = 100_000


@dataclass(frozen=True)
class MemorySettings:
    idle_s: float
    """``PODGAHP_MEMORY_IDLE_SECONDS``: seconds a pilot stays idle; default 1."""
    run_s: float
    """``PODGAHP_MEMORY_RUN_SECONDS``: seconds a pilot runs; default 2."""
    delay_s: float
    """``PODGAHP_MEMORY_DELAY_SECONDS``: extra latency of every call; default 0."""
    ce_name: str = "memory"
    """This CE in the names of the GAHP's state files (``$(FULL_HOSTNAME)``)."""
    blackhole: GuardSettings = dataclasses.field(default_factory=lambda: GuardSettings.from_knobs(Knobs({})))
    """``PODGAHP_BLACKHOLE_*`` and ``PODGAHP_STATE_DIR``, as every backend reads them."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> MemorySettings:
        return cls(idle_s=knobs.number("PODGAHP_MEMORY_IDLE_SECONDS", 1.0, minimum=0),
                   run_s=knobs.number("PODGAHP_MEMORY_RUN_SECONDS", 2.0, minimum=0),
                   delay_s=knobs.number("PODGAHP_MEMORY_DELAY_SECONDS", 0.0, minimum=0),
                   ce_name=knobs.raw("FULL_HOSTNAME") or socket.getfqdn(),
                   blackhole=GuardSettings.from_knobs(knobs))


# --------------------------------------------------------------------------------------------
# Identity: the job id, and what it says.


def job_id_of(sandbox_id: str, submitted_ms: int, serial: int, exit_code: int) -> str:
    return f"memory/{sandbox_id}/{submitted_ms}.{serial}/{exit_code}"


def parse_job_id(job_id: str) -> Tuple[float, int]:
    """(submit time, exit code) of a job id this backend hands out; InvalidJob for anything else."""
    parts = job_id.split("/")
    if len(parts) == 4 and parts[0] == "memory":
        try:
            return float(parts[2].split(".")[0]) / 1000, int(parts[3])
        except ValueError:
            pass
    raise InvalidJob(f"{job_id[:200]!r} is not a memory backend job id")


# --------------------------------------------------------------------------------------------
# The state table: the job's age (its "remote record") -> its state.


def job_state(job_id: str, submitted: float, exit_code: int, settings: MemorySettings, now: float) -> JobState:
    age = now - submitted
    if age < settings.idle_s:
        return JobState(Phase.IDLE, batch_id=job_id)
    if age < settings.idle_s + settings.run_s:
        return JobState(Phase.RUNNING, batch_id=job_id, worker_node="memory")
    return JobState(Phase.COMPLETED, exit_code=exit_code, batch_id=job_id, worker_node="memory",
                    wall_clock_s=settings.run_s)


class MemoryBackend(Backend):
    name = "memory"

    def __init__(self, settings: MemorySettings, user: Optional[str] = None) -> None:
        self.settings = settings
        self.pipeline = Pipeline("memory", settings.ce_name, user or user_name(), settings.blackhole,
                                 lambda: (0, 0, 0.0))
        """The GAHP-wide rules every answer goes through (:mod:`gahp.backends.pipeline`)."""
        self._lock = threading.Lock()
        self._live: "OrderedDict[str, str]" = OrderedDict()
        """Sandbox id -> the job id of its last submit in this process (a repeated submit reuses it)."""
        self._commands: "OrderedDict[str, str]" = OrderedDict()
        """Job id -> the command it ran, for its ``Out``."""
        self._serial = 0
        self.pipeline.start()

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> MemoryBackend:
        return cls(MemorySettings.from_knobs(knobs))

    def close(self) -> None:
        self.pipeline.close()

    def _delay(self) -> None:
        if self.settings.delay_s:
            time.sleep(self.settings.delay_s)

    def ping(self) -> None:
        self._delay()

    def submit(self, job: PilotJob) -> str:
        self._delay()
        env: Mapping[str, str] = dict(job.environment)
        if "PODGAHP_SIM_CRASH" in env:
            raise RuntimeError("simulated crash")
        if "PODGAHP_SIM_SUBMIT_ERROR" in env:
            raise BackendError(env["PODGAHP_SIM_SUBMIT_ERROR"])
        try:
            exit_code = int(env.get("PODGAHP_SIM_EXIT_CODE", "0"))
        except ValueError:
            raise InvalidJob("PODGAHP_SIM_EXIT_CODE is not an integer") from None
        self.pipeline.admit(job.queue or QUEUE)
        with self._lock:
            existing = self._live.get(job.sandbox_id)
            if existing is not None and self._phase(existing) not in (Phase.COMPLETED, Phase.REMOVED):
                return existing
            self._serial += 1
            job_id = job_id_of(job.sandbox_id, int(time.time() * 1000), self._serial, exit_code)
            self.pipeline.record(JobRecord(key=job_id, sandbox_id=job.sandbox_id, iwd=job.iwd, stdout=job.stdout,
                                           stderr=job.stderr, made_at=time.time()))
            _remember(self._live, job.sandbox_id, job_id)
            _remember(self._commands, job_id, " ".join((job.executable, *job.arguments)))
        self.pipeline.forget(job_id)
        return job_id

    def _phase(self, job_id: str) -> Phase:
        submitted, exit_code = parse_job_id(job_id)
        return job_state(job_id, submitted, exit_code, self.settings, time.time()).phase

    def _state(self, job_id: str) -> JobState:
        submitted, exit_code = parse_job_id(job_id)
        record = self.pipeline.records.get(job_id)
        if record is not None and record.cancel:
            return JobState(Phase.REMOVED, batch_id=job_id)
        return job_state(job_id, submitted, exit_code, self.settings, time.time())

    def status(self, job_id: str) -> JobState:
        self._delay()
        with self.pipeline.lock(job_id):
            return self.pipeline.report(job_id, self._state(job_id), queue=QUEUE,
                                        outputs=lambda: self._write_outputs(job_id), outputs_of="memory job")

    def status_now(self, job_id: str) -> Optional[JobState]:
        """Idle and running answers at once, as the Kubernetes backend gives them from its watch copy
        (so the two compare on the same path); the end (outputs to write) and a configured delay go
        to a worker."""
        final = self.pipeline.reports.final(job_id)
        if final is not None or self.settings.delay_s:
            return final
        try:
            submitted, exit_code = parse_job_id(job_id)
        except InvalidJob:
            return None
        state = job_state(job_id, submitted, exit_code, self.settings, time.time())
        if state.phase is Phase.COMPLETED:
            return None
        lock = self.pipeline.lock(job_id)
        if not lock.acquire(blocking=False):  # a worker is busy with this job: never wait here
            return None
        try:
            return self.pipeline.report(job_id, state, queue=QUEUE)
        finally:
            lock.release()

    def _write_outputs(self, job_id: str) -> bool:
        """``Out`` names the command (when this process ran it), ``Err`` is empty; where the record says."""
        record = self.pipeline.records.get(job_id)
        if record is None:
            return True  # nothing recorded: nowhere to write
        command = self._commands.get(job_id) or f"sandbox {record.sandbox_id}"
        if record.stdout:
            write_output(record.iwd, record.stdout, [f"memory backend ran: {command}\n".encode()])
        if record.stderr and record.stderr != record.stdout:
            write_output(record.iwd, record.stderr, [])
        return True

    def cancel(self, job_id: str) -> None:
        self._delay()
        parse_job_id(job_id)
        record = self.pipeline.records.get(job_id)
        if record is not None and record.cancel != "done":
            try:
                self.pipeline.records.put(dataclasses.replace(record, cancel="done"))
            except OSError as e:
                raise BackendError(f"the cancel cannot be recorded: {e}") from e
        self.pipeline.forget(job_id)

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        self._delay()
        if not os.path.exists(proxy_path):
            raise InvalidJob(f"proxy file {proxy_path} does not exist")


def _remember(table: "OrderedDict[str, str]", key: str, value: str) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > MAX_COMMANDS:
        table.popitem(last=False)
