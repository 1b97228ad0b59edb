"""A Lancium submit as a convergence, not a sequence: create, add inputs, submit — once per sandbox,
whatever answers get lost.

Each attempt starts from a fresh job list. A live job of the sandbox that this GAHP recorded making
(:mod:`gahp.backends.lancium.identity`) is the pilot (an earlier attempt, or an earlier GAHP, got further
than its answer said) and is returned, and so is an ended one (finished, error) of the name this submit
creates under: its submit went through, and it ran, before the attempt that sent it learned so; a ``created`` one was left half-made and is completed (its fields
set again, its missing inputs added) rather than made anew. Jobs that merely carry the sandbox's name
are left alone. A transient failure anywhere starts another attempt (``PODGAHP_LANCIUM_RETRIES`` more,
with back-off); any other failure deletes the job and fails the submit. The backend serialises submits
of one sandbox around :meth:`Submitter.submit`, after admitting it (a queue closed as a black hole
refuses at once). The job is recorded (:meth:`gahp.rules.records.JobRecords.note`) before anything
makes it runnable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gahp.backends.lancium.api import InputFileJSON, JobJSON, LanciumClient, inputs_by_name
from gahp.backends.lancium.identity import job_id_of, sandbox_key, key_of_name, new_name, pending_key
from gahp.backends.lancium.cache import JobList
from gahp.backends.lancium.settings import LanciumSettings
from gahp.backends.lancium.spec import InputFile, input_files, job_fields, notes_text
from gahp.backends.lancium.state import ENDED_STATES, LIVE_STATES
from gahp.core.errors import BackendError, Conflict, GahpError, Missing, TransientError, Unavailable
from gahp.core.job import PilotJob
from gahp.core.retry import Backoff, retried
from gahp.rules.records import JobRecord, JobRecords

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    """The pilot's Lancium job; ``made`` is the job when this submit made it (None when a live job of
    the sandbox was already there)."""

    lancium_id: int
    record: JobRecord
    """What this GAHP recorded of the job (where its outputs go)."""
    made: Optional[JobJSON] = None

    @property
    def job_id(self) -> str:
        return job_id_of(self.lancium_id)


class Submitter:
    """Submits pilots to Lancium through one client and the shared job list, recording what it makes."""

    def __init__(self, client: LanciumClient, jobs: JobList, settings: LanciumSettings, records: JobRecords,
                 user: str) -> None:
        self.client = client
        self.jobs = jobs
        self.settings = settings
        self.records = records
        self.user = user

    def submit(self, job: PilotJob) -> Submitted:
        """Converge on one submitted Lancium job for the pilot's sandbox (see the module docstring)."""
        key = sandbox_key(self.settings.ce_name, self.user, job.sandbox_id)
        pending = self._pending(job, key)
        fields = job_fields(job, self.settings.spec, pending.name, notes_text(job, self.settings.ce_name, self.user))
        inputs = input_files(job, self.settings.max_input_bytes)

        def once() -> Submitted:
            live, half_made = self._existing(job, key, pending, time.time())
            if live is not None:
                log.info("%s: sandbox %s already has live Lancium job %s, not submitting again",
                         job_id_of(live.lancium_id), job.sandbox_id, live.lancium_id)
                self.records.drop(pending.key)
                return live
            return self._make(job, fields, inputs, half_made, pending)

        client = self.settings.client
        try:
            return retried(once, what=f"submit of sandbox {job.sandbox_id}", attempts=client.retries + 1,
                           backoff=Backoff(client.backoff_s, client.backoff_max_s),
                           retryable=lambda e: isinstance(e, TransientError))
        except TransientError:
            live = self._give_up(job, key, pending)
            if live is None:
                raise
            return live

    def _pending(self, job: PilotJob, key: str) -> JobRecord:
        """The record of the name this submit creates its job under (that of an earlier submit of the
        sandbox whose job was never recorded, so that a job its lost answer made is found again)."""
        pending = self.records.get(pending_key(key))
        if pending is not None and pending.sandbox_id == job.sandbox_id and key_of_name(pending.name) == key:
            return pending
        pending = JobRecord(key=pending_key(key), sandbox_id=job.sandbox_id, iwd=job.iwd, stdout=job.stdout,
                            stderr=job.stderr, made_at=time.time(), name=new_name(key))
        self.records.note(pending, "the Lancium job")
        return pending

    def _record(self, job: PilotJob, lancium_id: int, name: str) -> JobRecord:
        """Record a job this GAHP made (before anything makes it runnable)."""
        record = JobRecord(key=job_id_of(lancium_id), sandbox_id=job.sandbox_id, iwd=job.iwd, stdout=job.stdout,
                           stderr=job.stderr, made_at=time.time(), name=name)
        self.records.note(record, "the Lancium job")
        return record

    def _make(self, job: PilotJob, fields: Dict[str, Any], inputs: List[InputFile],
              half_made: Optional[Submitted], pending: JobRecord) -> Submitted:
        """One attempt: create the job (or complete a half-made one), add its inputs, submit it."""
        if half_made is None:
            made = self.client.create_job(fields)
            lancium_id = made["id"]
            try:
                record = self._record(job, lancium_id, fields["name"])
            except BackendError as e:
                self._discard_created(lancium_id, job_id_of(lancium_id), e)
                raise
            present: Dict[str, InputFileJSON] = {}
            how = "created"
        else:
            lancium_id, record = half_made.lancium_id, half_made.record
            made = self.client.update_job(lancium_id, dict(fields, name=record.name or fields["name"]))
            present = inputs_by_name(made)
            how = f"resumed ({len(present)} inputs already there)"
        self.records.drop(pending.key)
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
        log.info("%s: submitted (%d input files)", job_id, len(inputs))
        return Submitted(lancium_id, record, made)

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

    def _give_up(self, job: PilotJob, key: str, pending: JobRecord) -> Optional[Submitted]:
        """After the last attempt: a live job of the sandbox if one exists; else delete half-made ones.

        Best effort: when even this fails, a half-made job stays until the sandbox is submitted
        again or the clean-up (``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS``) deletes it.
        """
        try:
            live, half_made = self._existing(job, key, pending, time.time())
            if live is None and half_made is not None:
                log.info("%s: deleting the unsubmitted job of a failed submit", job_id_of(half_made.lancium_id))
                self._delete_half_made(half_made.lancium_id)
        except GahpError as e:
            log.warning("cannot clean up after the failed submit of sandbox %s: %s", job.sandbox_id, e)
            return None
        return live

    def _existing(self, job: PilotJob, key: str, pending: JobRecord,
                  not_before: float) -> Tuple[Optional[Submitted], Optional[Submitted]]:
        """The newest live job this GAHP made for the sandbox (or ended, when made under ``pending.name``:
        this submit's), and the newest half-made (``created``) one.

        A job is this GAHP's when it recorded making it for this sandbox, or when it is the oldest job
        of the name a create was sent under before its answer was lost (it is recorded now). Older
        half-made ones are deleted; jobs that only carry the sandbox's key are left alone. Needs a job
        list taken after ``not_before`` (concurrent submits share one).
        """
        snapshot, _ = self.jobs.get(not_before=not_before)
        live: List[Submitted] = []
        half_made: List[Submitted] = []
        lost_answer_seen = False
        for lancium_id, summary in sorted(snapshot.jobs.items()):
            if key_of_name(summary["name"]) != key:
                continue
            status = summary["status"]
            record, lost_answer_seen = self._owned(job, lancium_id, summary["name"], status, pending,
                                                   lost_answer_seen)
            if record is None:
                continue
            if status in LIVE_STATES or (status in ENDED_STATES and summary["name"] == pending.name):
                # An ended job of this submit's own name ran before the answer that said so was
                # lost: it is the pilot, not something to make again.
                live.append(Submitted(lancium_id, record))
            elif status == "created":
                half_made.append(Submitted(lancium_id, record))
        return (live[-1] if live else None), self._newest_half_made(half_made, bool(live))

    def _owned(self, job: PilotJob, lancium_id: int, name: Optional[str], status: str, pending: JobRecord,
               lost_answer_seen: bool) -> Tuple[Optional[JobRecord], bool]:
        """The record by which the job ``lancium_id`` (of the sandbox's name ``name``) is this GAHP's
        pilot of ``job``'s sandbox (None: not this GAHP's, another sandbox's, or cancelled), and whether
        the job of the create whose answer was lost has been seen now."""
        record = self.records.get(job_id_of(lancium_id))
        if name == pending.name:
            if record is None and status == "created" and not lost_answer_seen:
                log.info("%s: made by a create whose answer was lost; completing it", job_id_of(lancium_id))
                record = self._record(job, lancium_id, pending.name)
            lost_answer_seen = True  # only the oldest: a copy made by someone who saw it comes later
        if record is None:
            log.info("%s: carries the name of sandbox %s but was not made by this GAHP: left alone",
                     job_id_of(lancium_id), job.sandbox_id)
            return None, lost_answer_seen
        if record.sandbox_id != job.sandbox_id or record.cancel:
            return None, lost_answer_seen
        return record, lost_answer_seen

    def _newest_half_made(self, half_made: List[Submitted], live: bool) -> Optional[Submitted]:
        """The half-made job to submit (the newest, none when a live one exists); the others are deleted."""
        keep = half_made[-1] if half_made and not live else None
        for older in (half_made if live else half_made[:-1]):
            log.info("%s: deleting an unsubmitted job of the same sandbox", job_id_of(older.lancium_id))
            self._delete_half_made(older.lancium_id)
        return keep

    def _submit_created(self, lancium_id: int, job_id: str) -> None:
        try:
            self.client.submit_job(lancium_id)
        except Unavailable as e:
            if e.status != 503 or "qos" not in e.body.lower():
                raise  # a 503 from the service or a proxy in front of it: another attempt may pass
            raise BackendError(
                f"Lancium cannot run the job at the requested QOS right now (HTTP 503 \"QOS not "
                f"achievable\" after {self.settings.client.retries + 1} attempts): retry later "
                f"(condor_release), or lower the QOS (PODGAHP_LANCIUM_QOS or the route's lancium_qos) "
                f"or the pilot's cores/memory; {e.body}") from e
        except (TransientError, Conflict):
            # The submit may have been accepted before its answer was lost (a retry then gets
            # 409 "already submitted").
            status = self.client.show_job(lancium_id).get("status")
            if status != "created":
                log.info("%s: submit answer lost, but the job is %s", job_id, status)
                return
            raise

    def _discard_created(self, lancium_id: int, job_id: str, error: BaseException) -> None:
        log.warning("%s: submit failed, deleting the unsubmitted job: %s", job_id, error)
        if delete_quietly(self.client, lancium_id):
            self.records.drop(job_id)

    def _delete_half_made(self, lancium_id: int) -> None:
        """Delete a job that was never submitted; a failure is transient (the submit must not go on)."""
        try:
            self.client.delete_job(lancium_id)
        except Missing:
            pass
        self.records.drop(job_id_of(lancium_id))


def delete_quietly(client: LanciumClient, lancium_id: int) -> bool:
    """Delete a job; a failure is logged, not raised (the clean-up tries again later). Whether it is gone."""
    try:
        client.delete_job(lancium_id)
    except Missing:
        pass
    except GahpError as e:
        log.warning("%s: delete failed: %s", job_id_of(lancium_id), e)
        return False
    return True
