"""The agent: one class between the commands and every backend, which runs the rules every backend obeys,
in one order written once (an adapter's verbs, :class:`gahp.backends.base.Backend`, know none of them).

* **Submit**: admission (a queue closed as a black hole refuses at once, :mod:`gahp.rules.blackhole`, and
  counts), then the backend's *create* (which records the job before it can run, in the records the
  agent lends it: :meth:`gahp.rules.records.JobRecords.note`); a create the service refuses as over quota or
  invalid counts as a failed pilot of its queue; a job made is counted; a new job under an old id
  starts afresh (its answers are forgotten).
* **Status**, with the job's lock held (:meth:`gahp.rules.answers.Reports.lock`): a final answer given before
  wins (checked inside the lock, so that two workers never both work one out); else the backend
  *observes* the job, its ``Out``/``Err`` are written before it is reported completed (an ``OSError``
  holds it instead: :data:`gahp.rules.holds.OUTPUT`; a writer that says they are not ready keeps it
  running), the answer never goes back (:class:`gahp.rules.answers.Reports`), and the first final answer
  counts once for the guard of its queue and for the health figures (:mod:`gahp.rules.figures`). The quick
  status does the same from the backend's memory, without I/O or waiting for the lock.
* **Cancel**: the job's record says a cancel is pending; the backend *removes* the job; the record
  then says done (kept, so that a repeated cancel is still answered) and the job is answered removed
  from then on: in this GAHP at once, in a fresh one when it ends (a cancelled job's end is the
  cancel's, and counts for no guard or figure). A removal that fails is an error result and is tried again in the background
  (:class:`gahp.rules.cancels.CancelRetries`) and, should this GAHP exit first, by the next GAHP of the user
  (it takes up every pending cancel at start).
* **Clean-up**: a job the backend's own clean-up deleted is forgotten: its record, its answers, counted.
* **Ping**: the backend's problems, and every queue closed as a black hole.

Knows nothing of any service, nor of the wire format.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from typing import Optional

from gahp.rules import holds
from gahp.backends.base import Backend, Outputs, Seen
from gahp.backends.http import truncate
from gahp.rules.blackhole import Guard, verdict
from gahp.rules.cancels import CancelRetries
from gahp.core.errors import BackendError, Invalid, QuotaExceeded, TransientError
from gahp.rules.figures import Stats, scope_of
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from gahp.rules.records import JobRecords
from gahp.rules.answers import RANK, Reports
from gahp.core.statedir import state_directories

log = logging.getLogger(__name__)

#: Seconds :meth:`Agent.close` waits for the start's pass over the job records.
RESUME_WAIT_SECONDS = 10.0


class Agent:
    """The GAHP-wide rules around one backend of one user on one CE (thread-safe)."""

    def __init__(self, backend: Backend) -> None:
        place = backend.place
        directories = state_directories(place.blackhole.state_dir, place.user)
        own = directories[0] if directories else place.blackhole.state_dir
        scope = scope_of(place.ce_name, place.user, backend.name)
        self.backend = backend
        """The adapter over the service."""
        self.records = JobRecords(directories, place.ce_name, backend.name)
        """What this GAHP recorded of the jobs it made (lent to the backend)."""
        self.guard = Guard(place.blackhole, scope, directory=own)
        self.stats = Stats(own, scope, backend.totals)
        self.reports = Reports()
        self._fast_s = place.blackhole.fast_s
        self._cancels = CancelRetries(place.cancel_retry_max_s, place.backoff_s, place.backoff_max_s,
                                      done=self._cancelled)
        self._resuming: Optional[threading.Thread] = None
        backend.bind(self.records, self._tidied)
        self.stats.start()

    # -- the GAHP's life ------------------------------------------------------------------

    def start(self) -> None:
        """Prune old job records and take up the cancels a GAHP of this user could not see through, in
        the background; then the backend's own start."""
        self._resuming = threading.Thread(target=self._resume, name="records", daemon=True)
        self._resuming.start()
        self.backend.start()

    def _resume(self) -> None:
        try:
            self.records.prune()
            for record in self.records.all():
                if record.cancel == "pending":
                    log.info("[%s] taking up a cancel a GAHP could not see through", record.key)
                    self._cancels.add(record.key, functools.partial(self.backend.remove, record.key))
        except Exception:  # noqa: BLE001 - a background pass must not end the GAHP
            log.exception("job records cannot be gone through")

    def close(self) -> None:
        """Stop the background work, the backend's and the agent's, waiting for it (bounded)."""
        if self._resuming is not None and self._resuming is not threading.current_thread():
            self._resuming.join(RESUME_WAIT_SECONDS)  # then a cancel it takes up is seen by the close below
        self.backend.stop()  # first: a removal waiting to be tried again gives up at once
        self._cancels.close()
        try:
            self.backend.close()
        finally:
            self.stats.close()

    # -- the verbs ------------------------------------------------------------------------

    def ping(self) -> None:
        """The backend's problems, and every queue closed as a black hole: BackendError naming them."""
        problems = list(self.backend.ping())
        closed = [h for h in self.guard.health() if h.closed]
        for health in closed:
            log.warning("ping: queue %s is closed as a black hole until %s: %s", health.queue,
                        time.strftime("%H:%M:%S UTC", time.gmtime(health.closed_until)), health.cause)
        queues = set(self.backend.queues())
        if closed and queues and {h.queue for h in closed} >= queues:
            problems.append("every queue is closed as a black hole (" + "; ".join(
                f"{h.queue}: {h.cause}" for h in closed) + ")")
        if problems:
            raise BackendError("; ".join(problems))

    def submit(self, job: PilotJob) -> str:
        """The pilot's job id, once its queue is admitted (see the module docstring)."""
        queue = self.backend.queue_of(job)
        try:
            self.guard.check(queue)
        except BackendError:
            self.stats.count("submits_refused_blackhole")
            raise
        try:
            created = self.backend.create(job)
        except (QuotaExceeded, Invalid) as e:
            self.guard.outcome(queue, True, f"{self.backend.noun} refused by {self.backend.service}: "
                                            f"{truncate(str(e), 200)}")
            self.stats.count("pods_refused")
            raise
        if created.made:
            self.stats.count("pods_created")
        self.reports.forget(created.job_id)
        return created.job_id

    def status(self, job_id: str) -> JobState:
        """The answer for the job now, by the rules of the module docstring."""
        self.backend.polled(job_id)
        with self.reports.lock(job_id):
            final = self.reports.final(job_id)
            if final is not None:
                return final
            return self._answer(job_id, self.backend.observe(job_id))

    def status_now(self, job_id: str) -> Optional[JobState]:
        """The answer if it can be given at once, from memory, without I/O or waiting; None when
        :meth:`status` must be asked on a worker. An unchanged record of the backend's gets the answer
        derived from it before (:meth:`gahp.rules.answers.Reports.again`)."""
        source = self.backend.cached(job_id)
        known = self.reports.again(job_id, source)
        if known is not None:
            return known
        seen = self.backend.observe_cached(job_id, source)
        if seen is None:
            return None
        lock = self.reports.lock(job_id)
        if not lock.acquire(blocking=False):  # a worker is busy with this job: never wait here
            return None
        try:
            final = self.reports.final(job_id)
            return final if final is not None else self._answer(job_id, seen)
        finally:
            lock.release()

    def cancel(self, job_id: str) -> None:
        """Remove the job (idempotent); see the module docstring."""
        self.backend.check(job_id)
        self._mark(job_id, "pending")
        try:
            self.backend.remove(job_id)
        except (TransientError, BackendError) as e:
            noun, removed = self.backend.noun, self.backend.removed
            log.warning("[%s] cancel failed (%s); retrying in the background", job_id, truncate(str(e)))
            self._cancels.add(job_id, functools.partial(self.backend.remove, job_id))
            after = f", and {self.backend.after_failed_removal}" if self.backend.after_failed_removal else ""
            raise TransientError(f"the {noun} could not be {removed} now ({truncate(str(e), 300)}); that is "
                                 f"retried in the background until it is done{after}") from e
        finally:
            self.reports.forget(job_id)
        self._cancelled(job_id)

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        self.backend.refresh_proxy(job_id, proxy_path)

    # -- the rules ------------------------------------------------------------------------

    def _answer(self, job_id: str, seen: Seen) -> JobState:
        """The answer for what the backend saw (the job's lock held)."""
        state = seen.state
        if state.phase.final and self._was_cancelled(job_id):
            # Its end is the cancel's, not the pilot's: removed, and no outcome for the guard or figures.
            return self.reports.answer(job_id, JobState(Phase.REMOVED, batch_id=state.batch_id))
        if state.phase is Phase.COMPLETED and seen.outputs is not None:
            state = self._outputs(job_id, state, seen.outputs)
        answer = self.reports.answer(job_id, state, started=seen.started, source=seen.source)
        if RANK[answer.phase] == 2:
            judged = verdict(answer, self._fast_s, seen.cause)
            if judged is not None:
                failed, why = judged
                self.guard.outcome(seen.queue, failed, why)
                self.stats.count("pilots_failed" if failed else "pilots_succeeded")
        if seen.answered is not None:
            seen.answered(answer)
        return answer

    def _outputs(self, job_id: str, state: JobState, outputs: Outputs) -> JobState:
        try:
            if outputs():
                return state
        except OSError as e:
            log.warning("[%s] outputs cannot be written: %s", job_id, e)
            return holds.OUTPUT.of(state, f"{self.backend.noun} finished but its output cannot be written: "
                                          f"{e.filename or ''}: {e.strerror or e}" + (f" (errno {e.errno})" if e.errno else ""))
        return JobState(Phase.RUNNING, batch_id=state.batch_id, worker_node=state.worker_node,
                        cpus_provisioned=state.cpus_provisioned, memory_provisioned_mb=state.memory_provisioned_mb,
                        disk_provisioned_kb=state.disk_provisioned_kb)

    def _was_cancelled(self, job_id: str) -> bool:
        """The job's record says it was cancelled (read once a job ends: a final answer is given once)."""
        record = self.records.get(job_id)
        return record is not None and record.cancel != ""

    def _mark(self, job_id: str, cancel: str) -> None:
        """The job's record says its cancel is ``pending`` or ``done`` (a job with no record has none)."""
        record = self.records.get(job_id)
        if record is None or record.cancel == cancel:
            return
        try:
            self.records.put(dataclasses.replace(record, cancel=cancel))
        except (OSError, ValueError) as e:
            log.warning("[%s] the job's record cannot say its cancel is %s: %s", job_id, cancel, e)

    def _cancelled(self, job_id: str) -> None:
        """The job is removed: its record says so (a repeated cancel is still answered), and so does every
        later status (whatever the remote job's end looks like while it goes); the backend forgets it."""
        self._mark(job_id, "done")
        self.reports.forget(job_id)
        self.reports.answer(job_id, JobState(Phase.REMOVED, batch_id=job_id.rsplit("/", 1)[-1]))
        self.backend.forget(job_id)

    def _tidied(self, job_id: str) -> None:
        """A finished job the backend's clean-up deleted: forgotten, its record gone, counted."""
        self.records.drop(job_id)
        self.reports.forget(job_id)
        self.backend.forget(job_id)
        self.stats.count("pods_cleaned")

