"""Lancium job state → neutral :class:`~gahp.core.jobstate.JobState`: the backend's one state table, and the
state sets submit and the clean-up act on.

:func:`classify` reduces a Lancium state and the job's details (when read) to a key of
:data:`STATE_TABLE` plus what a hold reason or an exit needs (:class:`~gahp.backends.table.Classified`);
:func:`job_state` turns that into a ``JobState`` through the row (:func:`gahp.backends.table.answer`).
Every row is documented in ``docs/lancium.md`` and covered by a parametrized test. Pure functions.
"""

from __future__ import annotations

from typing import Mapping, Optional

from gahp.rules import holds
from gahp.backends.http import truncate
from gahp.backends.lancium.api import JobJSON
from gahp.backends.table import Classified, Rule, answer
from gahp.core.jobstate import JobState, Phase

#: Pseudo-state of a job that is absent from ``GET /jobs`` and answers 404.
GONE = "gone"

#: Key (the Lancium state, then why) → what the gridmanager is told. Keys are produced by :func:`classify`.
STATE_TABLE: Mapping[str, Rule] = {
    "created": Rule(Phase.IDLE),  # created, not yet submitted (inputs still uploading)
    "submitted": Rule(Phase.IDLE),
    "queued": Rule(Phase.IDLE),
    "ready": Rule(Phase.IDLE),  # resources reserved, container not started yet
    "running": Rule(Phase.RUNNING),
    "finished": Rule(Phase.COMPLETED),  # with exit_code; reported once Out/Err are written
    "error": Rule(Phase.HELD, holds.REMOTE_ERROR, "job failed"),  # with error_string
    "error/RunTime": Rule(Phase.HELD, holds.RUN_TIME, "job failed, its run time used up"),
    "delete pending": Rule(Phase.REMOVED),
    GONE: Rule(Phase.REMOVED),
}

#: States in which the job still holds (or waits for) resources: submit reuses such a job.
LIVE_STATES = frozenset({"submitted", "queued", "ready", "running"})
#: States of a job that was submitted and has ended: submit returns such a job only when this very
#: submit made it (its name), i.e. the job ran before a lost answer was resolved.
ENDED_STATES = frozenset({"finished", "error"})
#: States the clean-up may delete after ``PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS``.
CLEANUP_STATES = frozenset({"created", "finished", "error"})


def classify(status: str, detail: Optional[JobJSON]) -> Optional[Classified]:
    """The :data:`STATE_TABLE` key of a job in Lancium state ``status`` (``detail``: its details, when
    read), with what goes with it; None for a state Lancium has added since (no row)."""
    detail = detail or {}
    exit_code = detail.get("exit_code")
    code = exit_code if isinstance(exit_code, int) else None
    if status == "error":
        message = truncate(str(detail.get("error_string") or "no error_string given"))
        if code is not None:
            message += f" (exit code {code})"
        run, limit = detail.get("execution_time"), detail.get("max_run_time")
        if isinstance(run, (int, float)) and isinstance(limit, int) and run >= limit:
            return Classified("error/RunTime", f"{message}; it ran {run} s, its max_run_time (BatchRuntime) "
                                               f"of {limit} s")
        return Classified("error", message)
    if status not in STATE_TABLE:
        return None
    return Classified(status, exit_code=code if status == "finished" else None)


def job_state(lancium_id: int, classified: Classified, detail: Optional[JobJSON]) -> JobState:
    """The ``JobState`` of the job for a classified state, with what its details say (when read): the
    resources it got and its run time."""
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
        if isinstance(run, (int, float)) and STATE_TABLE[classified.key].phase in (Phase.COMPLETED, Phase.HELD):
            wall_clock = float(run)
    details = JobState(Phase.IDLE, batch_id=str(lancium_id), cpus_provisioned=cpus, memory_provisioned_mb=memory_mb,
                       disk_provisioned_kb=disk_kb, wall_clock_s=wall_clock)
    return answer(STATE_TABLE, classified, details, f"Lancium job {lancium_id}")
