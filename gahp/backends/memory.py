"""An in-memory backend for tests and for trying the protocol without any remote service, and the
smallest correct backend: the template a new one starts from (``docs/new-backend.md``).

It is an adapter as every backend is (:class:`gahp.backends.base.Backend`): its *create* records the
job (:mod:`gahp.rules.records`: what the gridmanager sent, the proof that this GAHP made the job) before
it exists, its *observe* is its own state table applied to its "remote record", and the agent
(:class:`gahp.agent.Agent`) does the rest (admission, outputs written back inside the job's
directory, never back, final answers, the black-hole verdict, the figures, cancels kept in the
record); its errors are the tree's. Having no service, it needs no HTTP door
(:mod:`gahp.backends.http`) and declares no CE-wide view.

Its "remote record" is the job id itself, ``memory/<sandbox>/<submit ms>.<serial>/<exit code>``, so a
fresh process reports the same states: a pilot is idle for ``PODGAHP_MEMORY_IDLE_SECONDS``, runs for
``PODGAHP_MEMORY_RUN_SECONDS``, then completes with the exit code of its ``PODGAHP_SIM_EXIT_CODE``
environment variable (default 0) and a one-line ``Out`` naming the command; a job whose record says
it was cancelled is removed. Knobs for tests only, in no shipped configuration file: ``PODGAHP_MEMORY_IDLE_SECONDS``
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
from typing import List, Mapping, Optional, Tuple

from gahp.backends.base import Backend, Created, Place, Seen
from gahp.rules.blackhole import GuardSettings
from gahp.core.config import Knobs, user_name
from gahp.core.errors import BackendError, InvalidJob
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from gahp.core.outputs import write_output
from gahp.rules.records import JobRecord

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
    noun = "memory job"

    def __init__(self, settings: MemorySettings, user: Optional[str] = None) -> None:
        self.settings = settings
        self.place = Place(settings.ce_name, user or user_name(), settings.blackhole)
        self._lock = threading.Lock()
        self._live: "OrderedDict[str, str]" = OrderedDict()
        """Sandbox id -> the job id of its last submit in this process (a repeated submit reuses it)."""
        self._commands: "OrderedDict[str, str]" = OrderedDict()
        """Job id -> the command it ran, for its ``Out``."""
        self._serial = 0

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> MemoryBackend:
        return cls(MemorySettings.from_knobs(knobs))

    def _delay(self) -> None:
        if self.settings.delay_s:
            time.sleep(self.settings.delay_s)

    def queue_of(self, job: PilotJob) -> str:
        return job.queue or QUEUE

    def ping(self) -> List[str]:
        self._delay()
        return []

    def create(self, job: PilotJob) -> Created:
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
        with self._lock:
            existing = self._live.get(job.sandbox_id)
            if existing is not None and self._phase(existing) not in (Phase.COMPLETED, Phase.REMOVED):
                return Created(existing, made=False)
            self._serial += 1
            job_id = job_id_of(job.sandbox_id, int(time.time() * 1000), self._serial, exit_code)
            self.records.note(JobRecord(key=job_id, sandbox_id=job.sandbox_id, iwd=job.iwd, stdout=job.stdout,
                                        stderr=job.stderr, made_at=time.time()), "the memory job")
            _remember(self._live, job.sandbox_id, job_id)
            _remember(self._commands, job_id, " ".join((job.executable, *job.arguments)))
        return Created(job_id, made=True)

    def _phase(self, job_id: str) -> Phase:
        submitted, exit_code = parse_job_id(job_id)
        return job_state(job_id, submitted, exit_code, self.settings, time.time()).phase

    def observe(self, job_id: str) -> Seen:
        self._delay()
        submitted, exit_code = parse_job_id(job_id)
        record = self.records.get(job_id)
        if record is not None and record.cancel:
            return Seen(JobState(Phase.REMOVED, batch_id=job_id), queue=QUEUE)
        return Seen(job_state(job_id, submitted, exit_code, self.settings, time.time()), queue=QUEUE,
                    outputs=lambda: self._write_outputs(job_id))

    def observe_cached(self, job_id: str, source: Optional[object]) -> Optional[Seen]:
        """Idle and running answers at once, as the Kubernetes backend gives them from its watch copy
        (so the two compare on the same path); the end (outputs to write), a job whose record may say
        it was cancelled and a configured delay go to a worker."""
        if self.settings.delay_s:
            return None
        try:
            submitted, exit_code = parse_job_id(job_id)
        except InvalidJob:
            return None
        state = job_state(job_id, submitted, exit_code, self.settings, time.time())
        return None if state.phase is Phase.COMPLETED else Seen(state, queue=QUEUE)

    def _write_outputs(self, job_id: str) -> bool:
        """``Out`` names the command (when this process ran it), ``Err`` is empty; where the record says."""
        record = self.records.get(job_id)
        if record is None:
            return True  # nothing recorded: nowhere to write
        command = self._commands.get(job_id) or f"sandbox {record.sandbox_id}"
        if record.stdout:
            write_output(record.iwd, record.stdout, [f"memory backend ran: {command}\n".encode()])
        if record.stderr and record.stderr != record.stdout:
            write_output(record.iwd, record.stderr, [])
        return True

    def check(self, job_id: str) -> None:
        parse_job_id(job_id)

    def remove(self, job_id: str) -> None:
        """Nothing remote to remove: the record the agent marks says the job was cancelled."""
        self._delay()

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        self._delay()
        if not os.path.exists(proxy_path):
            raise InvalidJob(f"proxy file {proxy_path} does not exist")


def _remember(table: "OrderedDict[str, str]", key: str, value: str) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > MAX_COMMANDS:
        table.popitem(last=False)
