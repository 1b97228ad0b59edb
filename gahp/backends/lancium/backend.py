"""The ``batch lancium`` backend: pilots as Lancium Compute jobs (``lancium-api.md``).

Owns the knobs ``PODGAHP_LANCIUM_*``, the job id ``lancium/<numeric id>``, idempotent submit per
sandbox id, the one table from Lancium job states to :class:`~gahp.core.jobstate.Phase`, hold codes,
writing ``stdout.txt`` / ``stderr.txt`` back to ``Out`` / ``Err`` before completion is reported,
cancel, and the clean-up of finished jobs. Which jobs are this GAHP's is
:mod:`gahp.backends.lancium.identity`'s: it acts only on jobs it recorded making for its user on this
CE (:mod:`gahp.rules.records`), and anything else is an error result naming why, with no request sent. The
HTTP client is :mod:`gahp.backends.lancium.api`; what a pilot becomes on Lancium is
:mod:`gahp.backends.lancium.spec`.

Status is served from one ``GET /jobs`` per cycle shared by every job (:class:`JobList`), plus a
``GET /jobs/{id}`` only when a job's Lancium state changed (or when a process meets the job for
the first time). What is needed later (``Out``, ``Err``, ``Iwd``) is in the job's record, never read
from the Lancium job, so a fresh process with only a job id can finish the job's business.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from gahp.backends.base import Backend, Created, Place, Seen
from gahp.backends.lancium.api import JobJSON, LanciumClient
from gahp.backends.lancium.census import QUEUE, LanciumCeView
from gahp.backends.lancium.identity import job_id_of, parse_job_id
from gahp.backends.lancium.output import write_outputs
from gahp.backends.lancium.retention import Retention
from gahp.backends.lancium.cache import JobList, Snapshot
from gahp.backends.lancium.settings import LanciumSettings
from gahp.backends.lancium.state import GONE, classify, job_state
from gahp.backends.lancium.submit import Submitter, delete_quietly
from gahp.backends.table import Classified
from gahp.core.config import Knobs, user_name
from gahp.core.errors import Conflict, GahpError, InvalidJob, Missing, ServiceRefusal, TransientError
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from gahp.rules.records import JobRecord, JobRecords

log = logging.getLogger(__name__)

_SANDBOX_LOCKS = 64


# --------------------------------------------------------------------------------------------
# Per-job memory of this process


@dataclass
class Tracked:
    """What this process knows of one Lancium job."""

    lancium_id: int
    record: JobRecord
    """What this GAHP recorded of the job when it made it."""
    lancium_status: Optional[str] = None
    """Lancium state the last reported state was computed from."""
    reported: Optional[JobState] = None
    submitted_at: float = 0.0
    """``time.time()`` when this process submitted it (0 if it did not)."""
    finished_seen: Optional[float] = None
    """``time.monotonic()`` when the job was first seen finished (outputs awaited since)."""


class LanciumBackend(Backend):
    """Pilots as Lancium Compute jobs; see the module docstring and ``docs/lancium.md``."""

    name = "lancium"
    whole_node = "Lancium runs it alone on a node (node_exclusive), with the cores and memory it asks for"
    noun = "Lancium job"
    service = "Lancium"
    removed = "cancelled"
    after_failed_removal = "the next GAHP of this user takes it up should this one exit first"

    def __init__(self, settings: LanciumSettings, client: Optional[LanciumClient] = None,
                 user: Optional[str] = None) -> None:
        self.settings = settings
        self.user = user or user_name()
        self.place = Place(settings.ce_name, self.user, settings.blackhole, settings.cancel_retry_max_s,
                           settings.client.backoff_s, settings.client.backoff_max_s)
        self.client = client or LanciumClient(settings.client)
        self.jobs = JobList(self.client, settings.list_max_age_s, settings.list_stale_s)
        self._lock = threading.Lock()
        self._tracked: Dict[int, Tracked] = {}
        self._sandbox_locks = [threading.Lock() for _ in range(_SANDBOX_LOCKS)]
        self.retention = Retention(settings.cleanup_after_s, settings.cleanup_per_cycle)
        self._polled = threading.local()
        """The job list the last :meth:`polled` of this thread read (its :meth:`observe` reads it)."""

    def bind(self, records: JobRecords, tidied: Callable[[str], None]) -> None:
        super().bind(records, tidied)
        self.submitter = Submitter(self.client, self.jobs, self.settings, records, self.user)
        """Submits: :mod:`gahp.backends.lancium.submit`."""

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> LanciumBackend:
        return cls(LanciumSettings.from_knobs(knobs))

    @classmethod
    def ce_view(cls, knobs: Knobs) -> Optional[LanciumCeView]:
        """This CE's jobs in the Lancium account (:mod:`.census`), read with the key file of the user
        running the tool (``podgahp reap``: the condor user; ``~`` is its home); None where there is no
        such file (the CE does not use Lancium, or gives that user no key)."""
        settings = LanciumSettings.from_knobs(knobs)
        if not os.path.exists(settings.client.api_key_file):
            return None
        return LanciumCeView(settings)

    def totals(self) -> Tuple[int, int, float]:
        door = self.client.door
        return door.requests, door.errors, door.seconds

    def close(self) -> None:
        self.client.close()

    # -- ping ----------------------------------------------------------------------------------

    def queues(self) -> Tuple[str, ...]:
        return (QUEUE,)

    def ping(self) -> List[str]:
        """A token exchange (proves the key file and the key) and a job list (proves the token)."""
        self.client.check_credentials()
        self.jobs.get(not_before=time.time())
        return []

    # -- submit --------------------------------------------------------------------------------

    def queue_of(self, job: PilotJob) -> str:
        return QUEUE

    def _sandbox_lock(self, sandbox_id: str) -> threading.Lock:
        """Serialises submits of one sandbox in this process (a fixed pool: memory stays bounded)."""
        return self._sandbox_locks[zlib.crc32(sandbox_id.encode()) % _SANDBOX_LOCKS]

    def _own(self, job_id: str) -> Tracked:
        """What this process knows of a job this GAHP made; InvalidJob (nothing sent to Lancium) for
        a job id it has no record of making, for this user, on this CE."""
        lancium_id = parse_job_id(job_id)
        with self._lock:
            tracked = self._tracked.get(lancium_id)
        if tracked is not None:
            return tracked
        record = self.records.get(job_id)
        if record is None:
            raise InvalidJob(f"Lancium job {lancium_id} was not made by this CE ({self.settings.ce_name}) for "
                             f"user {self.user}: podgahp has no record of making it, and acts only on the "
                             f"jobs it made")
        with self._lock:
            return self._tracked.setdefault(lancium_id, Tracked(lancium_id, record))

    def check(self, job_id: str) -> None:
        self._own(job_id)

    def create(self, job: PilotJob) -> Created:
        """Once per sandbox, whatever answers get lost (:mod:`gahp.backends.lancium.submit`); a job
        this process made is tracked from its first answer on."""
        with self._sandbox_lock(job.sandbox_id):
            result = self.submitter.submit(job)
        with self._lock:
            tracked = self._tracked.setdefault(result.lancium_id, Tracked(result.lancium_id, result.record))
        if result.made is not None:
            tracked.lancium_status = "submitted"
            tracked.submitted_at = time.time()
            tracked.reported = job_state(result.lancium_id, Classified("submitted"), result.made)
        return Created(result.job_id, made=result.made is not None)

    # -- status --------------------------------------------------------------------------------

    def polled(self, job_id: str) -> None:
        """A job of this GAHP's is asked about: the shared job list, refreshed at most every
        ``PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS``, and the clean-up over a fresh one."""
        self._own(job_id)
        snapshot, fetched = self.jobs.get()
        self._polled.snapshot = snapshot  # what this thread's observe of the job reads next
        if fetched:
            self._cleanup(snapshot)

    def observe(self, job_id: str) -> Seen:
        """From the shared job list; the job's details only when its Lancium state changed."""
        tracked = self._own(job_id)
        snapshot = getattr(self._polled, "snapshot", None)
        self._polled.snapshot = None
        if snapshot is None:
            snapshot, _ = self.jobs.get()
        summary = snapshot.jobs.get(tracked.lancium_id)
        if summary is None and tracked.submitted_at >= snapshot.fetched_at and tracked.reported:
            return self._seen(tracked, tracked.reported)  # submitted after the list was taken
        listed = summary["status"] if summary is not None else GONE
        if tracked.reported is not None and listed == tracked.lancium_status:
            return self._seen(tracked, tracked.reported)
        return self._refresh(tracked, job_id, listed)

    def _seen(self, tracked: Tracked, state: JobState, status: Optional[str] = None,
              outputs: Optional[Callable[[], bool]] = None) -> Seen:
        """``state`` for the agent; its answer is kept (and ``status``, the Lancium state it came from,
        unless the job finished and its outputs are awaited: then it is read again)."""

        def answered(answer: JobState) -> None:
            tracked.reported = answer
            if status is not None and (status != "finished" or answer.phase is not Phase.RUNNING):
                tracked.lancium_status = status

        return Seen(state, queue=QUEUE, outputs=outputs, answered=answered)

    def _refresh(self, tracked: Tracked, job_id: str, listed: str) -> Seen:
        """Read the job's details (its state changed, or this process has not seen it yet)."""
        detail: Optional[JobJSON] = None
        try:
            detail = self.client.show_job(tracked.lancium_id)
            status = detail.get("status") or listed
        except Missing:
            status = GONE
        except TransientError as e:
            if tracked.reported is None:
                raise
            log.warning("%s: cannot read the job's details now, reporting the last state: %s", job_id, e)
            return self._seen(tracked, tracked.reported)
        classified = classify(status, detail)
        if classified is None:
            log.warning("%s: unknown Lancium state %r, reporting no change", job_id, status)
            return self._seen(tracked, tracked.reported or job_state(tracked.lancium_id, Classified("submitted"),
                                                                       detail))
        state = job_state(tracked.lancium_id, classified, detail)
        if status == "error":
            self._write_outputs(tracked, job_id, best_effort=True)
        return self._seen(tracked, state, status, outputs=lambda: self._outputs_ready(tracked, job_id))

    # -- outputs -------------------------------------------------------------------------------

    def _outputs_ready(self, tracked: Tracked, job_id: str) -> bool:
        """Out/Err of a finished job written (True); False while Lancium still prepares them, for at most
        ``PODGAHP_LANCIUM_OUTPUT_WAIT_SECONDS`` (then completion is reported without them); OSError as
        raised (the agent holds the job)."""
        first = tracked.finished_seen is None
        if tracked.finished_seen is None:
            tracked.finished_seen = time.monotonic()
        ready = self._write_outputs(tracked, job_id, best_effort=False)
        waited = time.monotonic() - tracked.finished_seen
        if not ready and waited < self.settings.output_wait_s:
            if first:
                log.info("%s: finished, waiting for Lancium to prepare its outputs", job_id)
            return False
        if not ready:
            log.warning("%s: outputs still not available after %.0f s, reporting completion without them",
                        job_id, waited)
        return True

    def _write_outputs(self, tracked: Tracked, job_id: str, best_effort: bool) -> bool:
        return write_outputs(self.client, tracked.lancium_id, tracked.record, job_id, best_effort)

    # -- cancel --------------------------------------------------------------------------------

    def remove(self, job_id: str) -> None:
        """Terminate (if queued or running) and delete; already deleted is success."""
        lancium_id = parse_job_id(job_id)
        try:
            self.client.terminate_job(lancium_id)
            log.info("%s: terminated", job_id)
        except (Missing, Conflict) as e:
            log.info("%s: not terminated (%s), deleting", job_id, _status_word(e))
        try:
            self.client.delete_job(lancium_id)
            log.info("%s: deleted", job_id)
        except Missing:
            log.info("%s: already gone", job_id)
        except Conflict as e:
            log.info("%s: delete refused as a conflict, taken as already deleting: %s", job_id, e)

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._tracked.pop(parse_job_id(job_id), None)

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """Accepted without action: Lancium cannot replace a submitted job's input files."""
        self._own(job_id)
        log.info("%s: proxy refresh from %s not propagated (Lancium inputs are fixed at submit)",
                 job_id, proxy_path)

    # -- clean-up ------------------------------------------------------------------------------

    def _cleanup(self, snapshot: Snapshot) -> None:
        """One pass of the GAHP's own clean-up (:mod:`.retention`) over a fresh job list."""

        def reported(lancium_id: int) -> bool:
            with self._lock:
                tracked = self._tracked.get(lancium_id)
            return tracked is None or tracked.reported is None or tracked.reported.phase.final

        for lancium_id in self.retention.due(snapshot, time.monotonic(), reported,
                                             lambda lancium_id: self.records.get(job_id_of(lancium_id)) is not None):
            log.info("%s: cleaning up (%s for more than %.0f s)", job_id_of(lancium_id),
                     snapshot.jobs[lancium_id]["status"], self.retention.after_s)
            if delete_quietly(self.client, lancium_id):
                self.tidied(job_id_of(lancium_id))
            self.retention.done(lancium_id)
            with self._lock:
                self._tracked.pop(lancium_id, None)


def _status_word(error: GahpError) -> str:
    return f"HTTP {error.status}" if isinstance(error, ServiceRefusal) else str(error)
