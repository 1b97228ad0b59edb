"""The one table from Lancium job states to :class:`~gahp.jobstate.Phase`, the state sets submit and the
clean-up act on, and the hold codes of Lancium holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gahp.jobstate import HOLD_FATAL, HOLD_RETRYABLE, SUB_OUTPUT, Phase

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
