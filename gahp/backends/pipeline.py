"""The rules every backend's answers go through, in one place: a backend reads its remote record and
maps it through its state table; the pipeline does the rest, the same way for every backend.

* **Admission** (:meth:`Pipeline.admit`): a submit to a queue closed as a black hole is refused at
  once (:mod:`gahp.blackhole`), and counted.
* **Outputs** (:meth:`Pipeline.report`): before a job is reported completed, its ``Out`` and
  ``Err`` are written back (the backend's own writer, into the job's directory only:
  :mod:`gahp.outputs`); an ``OSError`` while writing holds the job instead (:data:`gahp.holds.OUTPUT`,
  retryable once the file system is fixed); a writer that says the outputs are not ready yet keeps
  the job running.
* **Never back, final answers** (:class:`gahp.reports.Reports`): no answer moves to a lower rank, and
  once a job was reported completed, held or removed every later status gets that same answer.
* **Black-hole verdict and figures**: the first final answer of a job counts once, for the guard
  (failed fast or held: the queue may close) and for the health figures (:mod:`gahp.health`).
* **What the GAHP keeps of its jobs** (:mod:`gahp.records`, in the user's own state directory,
  :mod:`gahp.statedir`), next to the guard's state and the figures: a job is recorded before it can
  run (:meth:`Pipeline.record`), and a job that cannot be recorded is not made.

A backend calls :meth:`Pipeline.report` with the job's lock held (:meth:`Pipeline.lock`). Knows
nothing of any service.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Optional, Tuple

from gahp import holds
from gahp.blackhole import Guard, GuardSettings, verdict
from gahp.errors import BackendError
from gahp.health import Stats, scope_of
from gahp.jobstate import JobState, Phase
from gahp.records import JobRecord, JobRecords
from gahp.reports import RANK, Reports
from gahp.statedir import state_directories

log = logging.getLogger(__name__)

#: ``Out``/``Err`` writer of a finished job: True once written, False while the service prepares them;
#: OSError when they cannot be written.
Outputs = Callable[[], bool]


class Pipeline:
    """The GAHP-wide rules for one backend of one user on one CE (thread-safe)."""

    def __init__(self, backend: str, ce_name: str, user: str, blackhole: GuardSettings,
                 api_totals: Callable[[], Tuple[int, int, float]]) -> None:
        directories = state_directories(blackhole.state_dir, user)
        own = directories[0] if directories else blackhole.state_dir
        scope = scope_of(ce_name, user, backend)
        self.fast_s = blackhole.fast_s
        self.records = JobRecords(directories, ce_name, backend)
        """What this GAHP recorded of the jobs it made."""
        self.guard = Guard(blackhole, scope, directory=own)
        self.stats = Stats(own, scope, api_totals)
        self.reports = Reports()

    def start(self) -> None:
        self.stats.start()

    def close(self) -> None:
        self.stats.close()

    def lock(self, job_id: str) -> threading.Lock:
        """The lock a backend holds while it works out, and reports, one job's state."""
        return self.reports.lock(job_id)

    def admit(self, queue: str) -> None:
        """BackendError when ``queue`` is closed as a black hole (the submit is refused, counted)."""
        try:
            self.guard.check(queue)
        except BackendError:
            self.stats.count("submits_refused_blackhole")
            raise

    def record(self, record: JobRecord, made: str = "the job") -> None:
        """Record a job before anything can make it run (what it was made for, where its outputs go);
        BackendError when the record cannot be written: then ``made`` (``the pod``) must not be made."""
        try:
            self.records.put(record)
        except (OSError, ValueError) as e:
            raise BackendError(f"{made} cannot be recorded, so it is not made: {e} (PODGAHP_STATE_DIR must be a "
                               f"directory where job owners can write, mode 1777 like $(USER_LOG))") from e

    def report(self, job_id: str, state: JobState, *, queue: str, cause: str = "",
               outputs: Optional[Outputs] = None, outputs_of: str = "the job", started: bool = False,
               source: Optional[object] = None) -> JobState:
        """The answer for ``state`` (the backend's table applied to its record of the job), by the rules
        of the module docstring: a final answer given before wins; a completed job's ``outputs`` are
        written first (``outputs_of`` names the job in a hold reason); the first final answer counts for
        the guard of ``queue`` (``cause``: what the backend says of a held job) and the figures.
        ``started``: the job is known to have run; ``source``: the record ``state`` came from, when the
        same record always gives the same state (:meth:`gahp.reports.Reports.answer`)."""
        final = self.reports.final(job_id)
        if final is not None:
            return final
        if state.phase is Phase.COMPLETED and outputs is not None:
            state = self._outputs(job_id, state, outputs, outputs_of)
        answer = self.reports.answer(job_id, state, started=started, source=source)
        if RANK[answer.phase] == 2:
            judged = verdict(answer, self.fast_s, cause)
            if judged is not None:
                failed, why = judged
                self.guard.outcome(queue, failed, why)
                self.stats.count("pilots_failed" if failed else "pilots_succeeded")
        return answer

    def _outputs(self, job_id: str, state: JobState, outputs: Outputs, outputs_of: str) -> JobState:
        try:
            if outputs():
                return state
        except OSError as e:
            log.warning("[%s] outputs cannot be written: %s", job_id, e)
            return holds.OUTPUT.of(state, f"{outputs_of} finished but its output cannot be written: "
                                          f"{e.filename or ''}: {e.strerror or e}" + (f" (errno {e.errno})" if e.errno else ""))
        return JobState(Phase.RUNNING, batch_id=state.batch_id, worker_node=state.worker_node,
                        cpus_provisioned=state.cpus_provisioned, memory_provisioned_mb=state.memory_provisioned_mb,
                        disk_provisioned_kb=state.disk_provisioned_kb)

    def forget(self, job_id: str) -> None:
        """A job's answers are dropped (a cancel, or a new submit under the same job id)."""
        self.reports.forget(job_id)
