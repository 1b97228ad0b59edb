"""The ``batch lancium`` backend: pilots as Lancium Compute jobs (``lancium-api.md``).

Owns the knobs ``PODGAHP_LANCIUM_*``, the job id ``lancium/<numeric id>``, idempotent submit per
sandbox id (jobs are named ``podgahp:<sandbox id>``), the one table from Lancium job states to
:class:`~gahp.jobstate.Phase`, hold codes, writing ``stdout.txt`` / ``stderr.txt`` back to ``Out`` /
``Err`` before completion is reported, cancel, and the clean-up of finished jobs. The HTTP client
is :mod:`gahp.backends.lancium.client`; what a pilot becomes on Lancium is
:mod:`gahp.backends.lancium.spec`.

Status is served from one ``GET /jobs`` per cycle shared by every job (:class:`JobList`), plus a
``GET /jobs/{id}`` only when a job's Lancium state changed (or when a process meets the job for
the first time). Everything needed later (``Out``, ``Err``, ``Iwd``) is in the Lancium job's
``notes``, so a fresh process with only a job id can finish the job's business.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from urllib.parse import urlsplit
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

from gahp.backends.base import Backend
from gahp.backends.lancium.client import JobJSON, LanciumClient
from gahp.backends.lancium.refusals import LanciumConflict, LanciumHTTPError, LanciumNotFound, truncate
from gahp.backends.lancium.identity import job_id_of, lancium_id_of
from gahp.backends.lancium.jobs import JobList, Snapshot
from gahp.backends.lancium.settings import LanciumSettings, settings_from_knobs
from gahp.backends.lancium.spec import Notes, sandbox_of
from gahp.backends.lancium.state import (CLEANUP_STATES, GONE, HOLD_OUTPUT, HOLD_REMOTE_ERROR, HOLD_RUN_TIME,
                                         STATE_TABLE)
from gahp.backends.lancium.submit import Submitter, delete_quietly
from gahp.blackhole import Guard, verdict
from gahp.config import Knobs, user_name
from gahp.health import scope_of
from gahp.errors import GahpError, TransientError
from gahp.job import PilotJob
from gahp.jobstate import JobState, Phase
from gahp.outputs import write_atomic
from gahp.reports import RANK, Reports

log = logging.getLogger(__name__)

_SANDBOX_LOCKS = 64
#: The black-hole guard's one queue for Lancium.
QUEUE = "lancium"


# --------------------------------------------------------------------------------------------
# Per-job memory of this process


@dataclass
class Tracked:
    """What this process knows of one Lancium job."""

    lancium_id: int
    lancium_status: Optional[str] = None
    """Lancium state the last reported state was computed from."""
    reported: Optional[JobState] = None
    notes: Optional[Notes] = None
    submitted_at: float = 0.0
    """``time.time()`` when this process submitted it (0 if it did not)."""
    finished_seen: Optional[float] = None
    """``time.monotonic()`` when the job was first seen finished (outputs awaited since)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class LanciumBackend(Backend):
    """Pilots as Lancium Compute jobs; see the module docstring and ``docs/lancium.md``."""

    name = "lancium"

    def __init__(self, settings: LanciumSettings, client: Optional[LanciumClient] = None) -> None:
        self.settings = settings
        self.client = client or LanciumClient(settings.client)
        self.jobs = JobList(self.client, settings.list_max_age_s, settings.list_stale_s)
        self.submitter = Submitter(self.client, self.jobs, settings)
        service = urlsplit(settings.client.base_url).hostname or "lancium"
        self.guard = Guard(settings.blackhole, scope_of(service, user_name(), "lancium"))
        self._lock = threading.Lock()
        self._tracked: Dict[int, Tracked] = {}
        self._sandbox_locks = [threading.Lock() for _ in range(_SANDBOX_LOCKS)]
        self._terminal_seen: Dict[int, float] = {}
        self.reports = Reports()

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> LanciumBackend:
        return cls(settings_from_knobs(knobs))

    def close(self) -> None:
        self.client.close()

    # -- ping ----------------------------------------------------------------------------------

    def ping(self) -> None:
        """A token exchange (proves the key file and the key) and a job list (proves the token)."""
        self.client.check_credentials()
        self.jobs.get(not_before=time.time())

    # -- submit --------------------------------------------------------------------------------

    def _sandbox_lock(self, sandbox_id: str) -> threading.Lock:
        """Serialises submits of one sandbox in this process (a fixed pool: memory stays bounded)."""
        return self._sandbox_locks[zlib.crc32(sandbox_id.encode()) % _SANDBOX_LOCKS]

    def _track(self, lancium_id: int) -> Tracked:
        with self._lock:
            tracked = self._tracked.get(lancium_id)
            if tracked is None:
                tracked = self._tracked[lancium_id] = Tracked(lancium_id)
            return tracked

    def submit(self, job: PilotJob) -> str:
        """Once per sandbox, whatever answers get lost (:mod:`gahp.backends.lancium.submit`); a job
        this process made is tracked from its first answer on."""
        self.guard.check(QUEUE)
        with self._sandbox_lock(job.sandbox_id):
            result = self.submitter.submit(job)
        job_id = job_id_of(result.lancium_id)
        if result.made is not None:
            tracked = self._track(result.lancium_id)
            tracked.lancium_status = "submitted"
            tracked.submitted_at = time.time()
            tracked.notes = Notes.decode(result.notes)
            tracked.reported = self.reports.answer(job_id, self._state(result.lancium_id, "submitted", result.made))
        return job_id

    # -- status --------------------------------------------------------------------------------

    def status(self, job_id: str) -> JobState:
        lancium_id = lancium_id_of(job_id)
        snapshot, fetched = self.jobs.get()
        if fetched:
            self._cleanup(snapshot)
        tracked = self._track(lancium_id)
        with tracked.lock:
            summary = snapshot.jobs.get(lancium_id)
            if summary is None and tracked.submitted_at >= snapshot.fetched_at and tracked.reported:
                return tracked.reported  # submitted after the list was taken
            listed = summary["status"] if summary is not None else GONE
            if tracked.reported is not None and listed == tracked.lancium_status:
                return tracked.reported
            return self._refresh(tracked, job_id, listed)

    def _refresh(self, tracked: Tracked, job_id: str, listed: str) -> JobState:
        """Read the job's details (its state changed, or this process has not seen it yet)."""
        detail: Optional[JobJSON] = None
        try:
            detail = self.client.show_job(tracked.lancium_id)
            status = detail.get("status") or listed
        except LanciumNotFound:
            status = GONE
        except TransientError as e:
            if tracked.reported is None:
                raise
            log.warning("%s: cannot read the job's details now, reporting the last state: %s", job_id, e)
            return tracked.reported
        if detail is not None and tracked.notes is None:
            tracked.notes = Notes.decode(detail.get("notes"))
        if status not in STATE_TABLE:
            log.warning("%s: unknown Lancium state %r, reporting no change", job_id, status)
            return tracked.reported or self._state(tracked.lancium_id, "submitted", detail)
        state = self._state(tracked.lancium_id, status, detail)
        if status == "finished":
            state = self._finish(tracked, job_id, state)
        elif status == "error":
            self._write_outputs(tracked, job_id, best_effort=True)
        before = tracked.reported
        new = self._monotonic(tracked, job_id, state)
        if before is None or RANK[before.phase] < 2:  # the first final answer: count the outcome once
            judged = verdict(new, self.settings.blackhole.fast_s)
            if judged is not None:
                self.guard.outcome(QUEUE, *judged)
        if status != "finished" or new.phase is Phase.COMPLETED:
            tracked.lancium_status = status
        return new

    def _monotonic(self, tracked: Tracked, job_id: str, state: JobState) -> JobState:
        """The answer by the GAHP's rules (:mod:`gahp.reports`): never back, terminal is final."""
        new = self.reports.answer(job_id, state)
        if new.phase is not state.phase:
            log.info("%s: Lancium state went back to %s, still reporting %s", job_id, state.phase.value,
                     new.phase.value)
        tracked.reported = new
        return new

    def _state(self, lancium_id: int, status: str, detail: Optional[JobJSON]) -> JobState:
        """The neutral state for a Lancium state and (if read) the job's details."""
        phase = STATE_TABLE[status]
        cpus: Optional[int] = None
        memory_mb: Optional[int] = None
        disk_kb: Optional[int] = None
        wall_clock: Optional[float] = None
        if detail is not None:
            resources = detail.get("resources") or {}
            cores, memory, scratch = (resources.get(k) for k in ("core_count", "memory", "scratch"))
            cpus = cores if isinstance(cores, int) else None
            memory_mb = memory * 1024 if isinstance(memory, int) else None
            disk_kb = scratch * 1024 * 1024 if isinstance(scratch, int) else None
            run = detail.get("execution_time")
            if isinstance(run, (int, float)) and status in ("finished", "error"):
                wall_clock = float(run)
        state = JobState(phase=phase, batch_id=str(lancium_id), cpus_provisioned=cpus,
                         memory_provisioned_mb=memory_mb, disk_provisioned_kb=disk_kb,
                         wall_clock_s=wall_clock)
        if phase is Phase.COMPLETED:
            exit_code = detail.get("exit_code") if detail is not None else None
            return replace(state, exit_code=exit_code if isinstance(exit_code, int) else 0)
        if phase is Phase.HELD:
            return self._held(lancium_id, state, detail)
        return state

    def _held(self, lancium_id: int, state: JobState, detail: Optional[JobJSON]) -> JobState:
        error = (detail or {}).get("error_string") or "no error_string given"
        exit_code = (detail or {}).get("exit_code")
        run = (detail or {}).get("execution_time")
        limit = (detail or {}).get("max_run_time")
        code = HOLD_REMOTE_ERROR
        reason = f"Lancium job {lancium_id} failed: {truncate(str(error))}"
        if isinstance(exit_code, int):
            reason += f" (exit code {exit_code})"
        if isinstance(run, (int, float)) and isinstance(limit, int) and run >= limit:
            code = HOLD_RUN_TIME
            reason += f"; it ran {run} s, its max_run_time (BatchRuntime) of {limit} s"
        return replace(state, hold_reason=reason, hold_code=code.code, hold_subcode=code.subcode)

    # -- outputs -------------------------------------------------------------------------------

    def _finish(self, tracked: Tracked, job_id: str, state: JobState) -> JobState:
        """COMPLETED once Out/Err are written; RUNNING while Lancium still prepares them."""
        first = tracked.finished_seen is None
        if tracked.finished_seen is None:
            tracked.finished_seen = time.monotonic()
        try:
            ready = self._write_outputs(tracked, job_id, best_effort=False)
        except OSError as e:
            return replace(state, phase=Phase.HELD, exit_code=None,
                           hold_reason=f"cannot write the output of Lancium job {tracked.lancium_id}: "
                                       f"{e.strerror or e} (errno {e.errno}, {e.filename})",
                           hold_code=HOLD_OUTPUT.code, hold_subcode=HOLD_OUTPUT.subcode)
        waited = time.monotonic() - tracked.finished_seen
        if not ready and waited < self.settings.output_wait_s:
            if first:
                log.info("%s: finished, waiting for Lancium to prepare its outputs", job_id)
            return replace(state, phase=Phase.RUNNING, exit_code=None)
        if not ready:
            log.warning("%s: outputs still not available after %.0f s, reporting completion without them",
                        job_id, waited)
        return state

    def _write_outputs(self, tracked: Tracked, job_id: str, best_effort: bool) -> bool:
        """Fetch stdout/stderr into Out/Err; False if one is still being prepared (202).

        A missing output (404) is written as an empty file, so the CE finds every file it expects.
        With ``best_effort`` (jobs in ``error``) nothing is awaited and failures are only logged.
        """
        notes = tracked.notes
        if notes is None:
            log.warning("%s: the Lancium job has no podgahp notes, its outputs are not written back", job_id)
            return True
        targets = [(p, n) for p, n in ((notes.stdout, "stdout.txt"), (notes.stderr, "stderr.txt")) if p]
        contents: Dict[str, bytes] = {}
        for path, remote in targets:
            try:
                data = self.client.output(tracked.lancium_id, remote)
            except LanciumNotFound:
                if best_effort:
                    continue
                data = b""
            except GahpError as e:
                if best_effort:
                    log.info("%s: %s not fetched: %s", job_id, remote, e)
                    return False
                raise
            if data is None:  # 202: still being prepared
                return False
            contents[path] = contents.get(path, b"") + data  # Out == Err: both, in order
        for path, data in contents.items():
            try:
                write_atomic(path, [data])
            except OSError as e:
                if best_effort:
                    log.info("%s: cannot write %s: %s", job_id, path, e)
                    return False
                raise
            log.info("%s: wrote %d bytes to %s", job_id, len(data), path)
        return True

    # -- cancel --------------------------------------------------------------------------------

    def cancel(self, job_id: str) -> None:
        """Terminate (if queued or running) and delete; unknown or already deleted is success."""
        lancium_id = lancium_id_of(job_id)
        try:
            self.client.terminate_job(lancium_id)
            log.info("%s: terminated", job_id)
        except (LanciumNotFound, LanciumConflict) as e:
            log.info("%s: not terminated (%s), deleting", job_id, _status_word(e))
        try:
            self.client.delete_job(lancium_id)
            log.info("%s: deleted", job_id)
        except LanciumNotFound:
            log.info("%s: already gone", job_id)
        except LanciumConflict as e:
            log.info("%s: delete refused as a conflict, taken as already deleting: %s", job_id, e)
        with self._lock:
            self._tracked.pop(lancium_id, None)
        self.reports.forget(job_id)

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """Accepted without action: Lancium cannot replace a submitted job's input files."""
        lancium_id_of(job_id)
        log.info("%s: proxy refresh from %s not propagated (Lancium inputs are fixed at submit)",
                 job_id, proxy_path)

    # -- clean-up ------------------------------------------------------------------------------

    def _cleanup(self, snapshot: Snapshot) -> None:
        """Delete our jobs that stayed finished/error/created for ``cleanup_after_s`` (bounded)."""
        s = self.settings
        if s.cleanup_after_s <= 0 or s.cleanup_per_cycle <= 0:
            return
        now = time.monotonic()
        due: List[int] = []
        with self._lock:
            for lancium_id in list(self._terminal_seen):
                summary = snapshot.jobs.get(lancium_id)
                if summary is None or summary["status"] not in CLEANUP_STATES:
                    del self._terminal_seen[lancium_id]
            for lancium_id, summary in snapshot.jobs.items():
                if summary["status"] not in CLEANUP_STATES or sandbox_of(summary["name"]) is None:
                    continue
                first = self._terminal_seen.setdefault(lancium_id, now)
                tracked = self._tracked.get(lancium_id)
                if tracked is not None and tracked.reported is not None and RANK[tracked.reported.phase] < 2:
                    continue  # this process has not reported the outcome yet
                if now - first >= s.cleanup_after_s and len(due) < s.cleanup_per_cycle:
                    due.append(lancium_id)
        for lancium_id in due:
            log.info("%s: cleaning up (%s for more than %.0f s)", job_id_of(lancium_id),
                     snapshot.jobs[lancium_id]["status"], s.cleanup_after_s)
            delete_quietly(self.client, lancium_id)
            with self._lock:
                self._terminal_seen.pop(lancium_id, None)
                self._tracked.pop(lancium_id, None)
            self.reports.forget(job_id_of(lancium_id))


def _status_word(error: GahpError) -> str:
    return f"HTTP {error.status}" if isinstance(error, LanciumHTTPError) else str(error)
