"""The one table from Lancium job states to :class:`~gahp.jobstate.Phase`, and the state sets submit and
the clean-up act on. Lancium's holds are :mod:`gahp.holds`' ``OUTPUT``, ``REMOTE_ERROR`` and ``RUN_TIME``."""

from __future__ import annotations

from typing import Mapping

from gahp.jobstate import Phase

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
