"""Every hold podgahp reports, in one registry: its ``HoldReasonCode`` and ``HoldReasonSubCode``.

Two codes, shared by every backend so that one site policy or pilot factory release rule covers them
all: :data:`HOLD_RETRYABLE` (the infrastructure failed the pilot; a release, a fresh submit, may well
succeed) and :data:`HOLD_FATAL` (the pilot cannot run as configured; fix the route or knobs first).
The subcode says why, and is unique across backends: a backend takes its holds from here and never
numbers one of its own, so a subcode means the same thing whichever backend reported it. A new kind
of hold is added here, with the next free subcode, and to the hold table of the backend's document.
Knows nothing of any backend.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, Tuple

from gahp.core.jobstate import JobState, Phase

HOLD_RETRYABLE = 1001
"""HoldReasonCode: the infrastructure failed the pilot; releasing the job may well succeed."""
HOLD_FATAL = 1002
"""HoldReasonCode: the pilot cannot run as configured (image, container config); fix it first."""


@dataclass(frozen=True)
class Hold:
    """One kind of hold: its codes and what it means."""

    code: int
    """:data:`HOLD_RETRYABLE` or :data:`HOLD_FATAL`."""
    subcode: int
    """Unique across every backend."""
    meaning: str

    @property
    def retryable(self) -> bool:
        return self.code == HOLD_RETRYABLE

    def of(self, state: JobState, reason: str) -> JobState:
        """``state`` held for this reason (an exit status it carried is dropped: a held job has none)."""
        return dataclasses.replace(state, phase=Phase.HELD, hold_code=self.code, hold_subcode=self.subcode,
                                   hold_reason=reason, exit_code=None, exit_signal=None, exit_reason=None)


UNSCHEDULABLE = Hold(HOLD_RETRYABLE, 1, "no node could take the pilot within its queue's time limit")
EVICTED = Hold(HOLD_RETRYABLE, 2, "evicted by the node (when disruptions hold)")
PREEMPTED = Hold(HOLD_RETRYABLE, 3, "preempted or evicted by the service (when disruptions hold)")
NODE_SHUTDOWN = Hold(HOLD_RETRYABLE, 4, "ended by a node shutdown (when disruptions hold)")
OUTPUT = Hold(HOLD_RETRYABLE, 5, "the pilot ended but its Out or Err cannot be written under its Iwd")
OUT_OF_MEMORY = Hold(HOLD_RETRYABLE, 6, "the kernel killed the pilot for going over its memory limit (OOMKilled)")
IMAGE_PULL = Hold(HOLD_FATAL, 10, "the pilot's image cannot be pulled")
INVALID_IMAGE = Hold(HOLD_FATAL, 11, "the pilot's image name is invalid")
CONTAINER_CONFIG = Hold(HOLD_FATAL, 12, "the pilot's container cannot be configured or created")
REMOTE_ERROR = Hold(HOLD_RETRYABLE, 20, "the service reported the job failed on its side")
RUN_TIME = Hold(HOLD_FATAL, 21, "the job used up its maximum run time (BatchRuntime)")


def _registry() -> Dict[Tuple[int, int], Hold]:
    found: Dict[Tuple[int, int], Hold] = {}
    subcodes: Dict[int, Hold] = {}
    for value in globals().values():
        if isinstance(value, Hold):
            if value.subcode in subcodes:
                raise AssertionError(f"hold subcode {value.subcode} registered twice")
            subcodes[value.subcode] = found[(value.code, value.subcode)] = value
    return found


HOLDS: Dict[Tuple[int, int], Hold] = _registry()
"""(code, subcode) -> the hold: every hold podgahp reports."""
