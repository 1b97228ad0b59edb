"""The ``batch lancium`` backend: pilots as Lancium Compute jobs (``lancium-api.md``).

Owns the knobs ``PODGAHP_LANCIUM_*``, the job id ``lancium/<numeric id>``, idempotent submit per
sandbox id (jobs are named ``podgahp:<sandbox id>``), the one table from Lancium job states to
:class:`~gahp.job.Phase`, hold codes, writing ``stdout.txt`` / ``stderr.txt`` back to ``Out`` /
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
import re
import threading
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from gahp.backends.base import Backend
from gahp.backends.lancium.client import (
    JobJSON,
    LanciumClient,
    LanciumConflict,
    LanciumHTTPError,
    LanciumNotFound,
    InputFileJSON,
    ServiceUnavailable,
    inputs_by_name,
    truncate,
)
from gahp.backends.lancium.spec import (
    InputFile,
    Notes,
    input_files,
    job_fields,
    job_name,
    sandbox_of,
)
from gahp.backends.lancium.jobs import JobList, Snapshot
from gahp.backends.lancium.settings import LanciumSettings, settings_from_knobs
from gahp.config import Knobs
from gahp.errors import BackendError, GahpError, InvalidJob, TransientError
from gahp.job import HOLD_FATAL, HOLD_RETRYABLE, SUB_OUTPUT, JobState, Phase, PilotJob
from gahp.outputs import write_atomic
from gahp.reports import RANK, Reports

log = logging.getLogger(__name__)

JOB_ID_PREFIX = "lancium/"
_JOB_ID = re.compile(r"^lancium/([0-9]{1,18})$")

#: Pseudo-state of a job that is absent from ``GET /jobs`` and answers 404.
GONE = "gone"

#: Every Lancium job state (``job_fields.status``) and the phase podgahp reports for it.
STATE_TABLE: Mapping[str, Phase] = {
    "created": Phase.IDLE,  # created, not yet submitted (inputs still uploading)
    "submitted": Phase.IDLE,
    "queued": Phase.IDLE,
    "ready": Phase.IDLE,  # resources reserved, container not started yet
    "running": Phase.RUNNING,
    "finished": Phase.COMPLETED,  # with exit_code; reported once Out/Err are written
    "error": Phase.HELD,  # with error_string
    "delete pending": Phase.REMOVED,
    GONE: Phase.REMOVED,
}

#: States in which the job still holds (or waits for) resources: submit reuses such a job.
LIVE_STATES = frozenset({"submitted", "queued", "ready", "running"})
#: States the clean-up may delete after ``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS``.
CLEANUP_STATES = frozenset({"created", "finished", "error"})


# Hold codes: gahp.job's HOLD_RETRYABLE / HOLD_FATAL, shared with every backend; subcodes say why.


@dataclass(frozen=True)
class HoldCode:
    """HoldReasonCode / HoldReasonSubCode of one kind of Lancium hold."""

    code: int
    subcode: int

    @property
    def retryable(self) -> bool:
        return self.code == HOLD_RETRYABLE


#: ``Out`` or ``Err`` could not be written (the errno is in the reason). Same subcode as Kubernetes.
HOLD_OUTPUT = HoldCode(HOLD_RETRYABLE, SUB_OUTPUT)
#: Lancium reported ``error`` with its ``error_string``: the job failed on Lancium's side.
HOLD_REMOTE_ERROR = HoldCode(HOLD_RETRYABLE, 20)
#: Lancium reported ``error`` after the job used up its ``max_run_time`` (from BatchRuntime).
HOLD_RUN_TIME = HoldCode(HOLD_FATAL, 21)

_SANDBOX_LOCKS = 64


# --------------------------------------------------------------------------------------------
# Job ids


def job_id_of(lancium_id: int) -> str:
    return f"{JOB_ID_PREFIX}{lancium_id}"


def lancium_id_of(job_id: str) -> int:
    """The numeric Lancium id in ``lancium/<id>``; InvalidJob for anything else."""
    match = _JOB_ID.match(job_id)
    if not match:
        raise InvalidJob(f"{job_id!r} is not a Lancium job id (expected lancium/<number>)")
    return int(match.group(1))


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
        """Create, upload, submit — once per sandbox, whatever answers get lost.

        Each attempt starts from a fresh job list. A live job with the sandbox's name is the pilot
        (an earlier attempt, or an earlier GAHP, got further than its answer said) and is returned;
        a ``created`` one was left half-made and is completed (its fields set again, its missing
        inputs added) rather than made anew. A transient failure anywhere starts another attempt
        (``PODGAHP_LANCIUM_RETRIES`` more, with back-off); any other failure deletes the job and
        fails the submit.
        """
        fields = job_fields(job, self.settings.spec)
        inputs = input_files(job, self.settings.max_input_bytes)
        name = job_name(job.sandbox_id)
        client = self.settings.client
        attempts = client.retries + 1
        with self._sandbox_lock(job.sandbox_id):
            for attempt in range(1, attempts + 1):
                try:
                    live, half_made = self._existing(name, time.time())
                    if live is not None:
                        log.info("%s: sandbox %s already has live Lancium job %s, not submitting again",
                                 job_id_of(live), job.sandbox_id, live)
                        return job_id_of(live)
                    return self._make(job, fields, inputs, half_made)
                except TransientError as e:
                    if attempt == attempts:
                        live = self._give_up(name)
                        if live is None:
                            raise
                        return job_id_of(live)
                    delay = client.delay(attempt)
                    log.info("submit of sandbox %s failed, attempt #%d/%d, retrying in %.1f s: %s",
                             job.sandbox_id, attempt, attempts, delay, e)
                    time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns or raises

    def _make(self, job: PilotJob, fields: Dict[str, Any], inputs: List[InputFile],
              half_made: Optional[int]) -> str:
        """One attempt: create the job (or complete a half-made one), add its inputs, submit it."""
        if half_made is None:
            made = self.client.create_job(fields)
            lancium_id = made["id"]
            present: Dict[str, InputFileJSON] = {}
            how = "created"
        else:
            lancium_id = half_made
            made = self.client.update_job(lancium_id, fields)
            present = inputs_by_name(made)
            how = f"resumed ({len(present)} inputs already there)"
        job_id = job_id_of(lancium_id)
        log.info("%s: %s for sandbox %s (%s cores, %s GB, qos %s, image %s)", job_id, how,
                 job.sandbox_id, fields["resources"]["core_count"], fields["resources"]["memory"],
                 fields["qos"], fields["image"])
        try:
            for item in inputs:
                self._stage(lancium_id, item, present.get(item.name))
            self._submit_created(lancium_id, job_id)
        except TransientError as e:
            # Left for the next attempt, which resumes it (or finds it submitted after all).
            log.info("%s: submit interrupted: %s", job_id, e)
            raise
        except BaseException as e:
            self._discard_created(lancium_id, job_id, e)
            raise
        tracked = self._track(lancium_id)
        tracked.lancium_status = "submitted"
        tracked.submitted_at = time.time()
        tracked.notes = Notes.decode(fields["notes"])
        tracked.reported = self.reports.answer(job_id, self._state(lancium_id, "submitted", made))
        log.info("%s: submitted (%d input files)", job_id, len(inputs))
        return job_id

    def _stage(self, lancium_id: int, item: InputFile, record: Optional[InputFileJSON]) -> None:
        """Make one input complete on the job; ``record`` is what the job already has of that name."""
        if record is not None and (item.content is None or record.get("upload_complete") is True):
            return
        if record is not None:
            # Cut short by an earlier attempt; its declared size is not shown, so start it again.
            self.client.delete_input(lancium_id, record["id"])
        try:
            data_id = self.client.create_input(
                lancium_id, item.name, size=len(item.content) if item.content is not None else None,
                url=item.url)
        except TransientError:
            # The input may have been added before the answer was lost: adding it again would
            # give the job two inputs of one name.
            found = inputs_by_name(self.client.show_job(lancium_id)).get(item.name)
            if found is None:
                raise
            log.info("%s: input %s was added before its answer was lost", job_id_of(lancium_id), item.name)
            data_id = found["id"]
        if item.content is not None:
            self.client.upload(lancium_id, data_id, item.name, item.content, self.settings.upload_chunk_bytes)

    def _give_up(self, name: str) -> Optional[int]:
        """After the last attempt: a live job of this name if one exists; else delete half-made ones.

        Best effort: when even this fails, a half-made job stays until the sandbox is submitted
        again or the clean-up (``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS``) deletes it.
        """
        try:
            live, half_made = self._existing(name, time.time())
            if live is None and half_made is not None:
                log.info("%s: deleting the unsubmitted job of a failed submit", job_id_of(half_made))
                self._delete_half_made(half_made)
        except GahpError as e:
            log.warning("cannot clean up after the failed submit of %s: %s", name, e)
            return None
        return live

    def _existing(self, name: str, not_before: float) -> Tuple[Optional[int], Optional[int]]:
        """The newest live job with this name, and the newest half-made (``created``) one.

        Older half-made ones are deleted. Needs a job list taken after ``not_before``
        (concurrent submits share one).
        """
        snapshot, _ = self.jobs.get(not_before=not_before)
        live: List[int] = []
        half_made: List[int] = []
        for lancium_id, summary in sorted(snapshot.jobs.items()):
            if summary["name"] == name and summary["status"] in LIVE_STATES:
                live.append(lancium_id)
            elif summary["name"] == name and summary["status"] == "created":
                half_made.append(lancium_id)
        if live:
            half_made, keep = half_made, None
        else:
            half_made, keep = half_made[:-1], (half_made[-1] if half_made else None)
        for lancium_id in half_made:
            log.info("%s: deleting an unsubmitted job with the same name", job_id_of(lancium_id))
            self._delete_half_made(lancium_id)
        return (live[-1] if live else None), keep

    def _submit_created(self, lancium_id: int, job_id: str) -> None:
        try:
            self.client.submit_job(lancium_id)
        except ServiceUnavailable as e:
            if "qos" not in e.body.lower():
                raise  # a 503 from the service or a proxy in front of it: another attempt may pass
            raise BackendError(
                f"Lancium cannot run the job at the requested QOS right now (HTTP 503 \"QOS not "
                f"achievable\" after {self.settings.client.retries + 1} attempts): retry later "
                f"(condor_release), or lower the QOS (PODGAHP_LANCIUM_QOS or the route's lancium_qos) "
                f"or the pilot's cores/memory; {e.body}") from e
        except (TransientError, LanciumConflict):
            # The submit may have been accepted before its answer was lost (a retry then gets
            # 409 "already submitted").
            status = self.client.show_job(lancium_id).get("status")
            if status != "created":
                log.info("%s: submit answer lost, but the job is %s", job_id, status)
                return
            raise

    def _discard_created(self, lancium_id: int, job_id: str, error: BaseException) -> None:
        log.warning("%s: submit failed, deleting the unsubmitted job: %s", job_id, error)
        self._delete_quietly(lancium_id)

    def _delete_half_made(self, lancium_id: int) -> None:
        """Delete a job that was never submitted; a failure is transient (the submit must not go on)."""
        try:
            self.client.delete_job(lancium_id)
        except LanciumNotFound:
            pass

    def _delete_quietly(self, lancium_id: int) -> None:
        try:
            self.client.delete_job(lancium_id)
        except LanciumNotFound:
            pass
        except GahpError as e:
            log.warning("%s: delete failed: %s", job_id_of(lancium_id), e)

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
        new = self._monotonic(tracked, job_id, state)
        if status != "finished" or new.phase is Phase.COMPLETED:
            tracked.lancium_status = status
        return new

    def _monotonic(self, tracked: Tracked, job_id: str, state: JobState) -> JobState:
        """The answer by the GAHP's rules (:mod:`gahp.reports`): never back, terminal is final."""
        old = tracked.reported
        new = self.reports.answer(job_id, state)
        if new.phase is not state.phase:
            log.info("%s: Lancium state went back to %s, still reporting %s", job_id, state.phase.value,
                     new.phase.value)
        elif old is None or old.phase is not new.phase:
            log.info("%s: %s%s", job_id, new.phase.value, f" ({new.hold_reason})" if new.hold_reason else "")
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
            self._delete_quietly(lancium_id)
            with self._lock:
                self._terminal_seen.pop(lancium_id, None)
                self._tracked.pop(lancium_id, None)
            self.reports.forget(job_id_of(lancium_id))


def _status_word(error: GahpError) -> str:
    return f"HTTP {error.status}" if isinstance(error, LanciumHTTPError) else str(error)
