"""A Lancium submit as a convergence, not a sequence: create, add inputs, submit — once per sandbox,
whatever answers get lost.

Each attempt starts from a fresh job list. A live job with the sandbox's name is the pilot (an
earlier attempt, or an earlier GAHP, got further than its answer said) and is returned; a ``created``
one was left half-made and is completed (its fields set again, its missing inputs added) rather than
made anew. A transient failure anywhere starts another attempt (``PODGAHP_LANCIUM_RETRIES`` more, with
back-off); any other failure deletes the job and fails the submit. The backend serialises submits of
one sandbox around :meth:`Submitter.submit` and records what it returns.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gahp.backends.lancium.client import InputFileJSON, JobJSON, LanciumClient, inputs_by_name
from gahp.backends.lancium.refusals import LanciumConflict, LanciumNotFound, ServiceUnavailable
from gahp.backends.lancium.identity import job_id_of
from gahp.backends.lancium.jobs import JobList
from gahp.backends.lancium.settings import LanciumSettings
from gahp.backends.lancium.spec import InputFile, input_files, job_fields, job_name
from gahp.backends.lancium.state import LIVE_STATES
from gahp.errors import BackendError, GahpError, TransientError
from gahp.job import PilotJob

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    """The pilot's Lancium job; ``made`` is its record when this submit made it (None when a live job
    of the sandbox was already there)."""

    lancium_id: int
    made: Optional[JobJSON] = None
    notes: str = ""
    """The ``notes`` field this submit sent (what a later process needs of the pilot)."""


class Submitter:
    """Submits pilots to Lancium through one client and the shared job list."""

    def __init__(self, client: LanciumClient, jobs: JobList, settings: LanciumSettings) -> None:
        self.client = client
        self.jobs = jobs
        self.settings = settings

    def submit(self, job: PilotJob) -> Submitted:
        """Converge on one submitted Lancium job for the pilot's sandbox (see the module docstring)."""
        fields = job_fields(job, self.settings.spec)
        inputs = input_files(job, self.settings.max_input_bytes)
        name = job_name(job.sandbox_id)
        attempts = self.settings.client.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                live, half_made = self._existing(name, time.time())
                if live is not None:
                    log.info("%s: sandbox %s already has live Lancium job %s, not submitting again",
                             job_id_of(live), job.sandbox_id, live)
                    return Submitted(live)
                return self._make(job, fields, inputs, half_made)
            except TransientError as e:
                if attempt == attempts:
                    live = self._give_up(name)
                    if live is None:
                        raise
                    return Submitted(live)
                delay = self.settings.client.delay(attempt)
                log.info("submit of sandbox %s failed, attempt #%d/%d, retrying in %.1f s: %s",
                         job.sandbox_id, attempt, attempts, delay, e)
                time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns or raises

    def _make(self, job: PilotJob, fields: Dict[str, Any], inputs: List[InputFile],
              half_made: Optional[int]) -> Submitted:
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
        log.info("%s: submitted (%d input files)", job_id, len(inputs))
        return Submitted(lancium_id, made, fields["notes"])

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
        delete_quietly(self.client, lancium_id)

    def _delete_half_made(self, lancium_id: int) -> None:
        """Delete a job that was never submitted; a failure is transient (the submit must not go on)."""
        try:
            self.client.delete_job(lancium_id)
        except LanciumNotFound:
            pass


def delete_quietly(client: LanciumClient, lancium_id: int) -> None:
    """Delete a job; a failure is logged, not raised (the clean-up tries again later)."""
    try:
        client.delete_job(lancium_id)
    except LanciumNotFound:
        pass
    except GahpError as e:
        log.warning("%s: delete failed: %s", job_id_of(lancium_id), e)
