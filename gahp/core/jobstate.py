"""The neutral job state every backend reports and its BLAHP form (the status code and the status ad
the gridmanager reads). Knows nothing about the wire format or any backend; rules about how states may
follow each other are in :mod:`gahp.rules.answers`, the hold codes in :mod:`gahp.rules.holds`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

import classad2

class Phase(enum.Enum):
    """Where a pilot is, in words every backend can map its own states to."""

    IDLE = "idle"
    RUNNING = "running"
    COMPLETED = "completed"
    HELD = "held"
    REMOVED = "removed"

    @property
    def final(self) -> bool:
        """The end: completed, held or removed (an answer of this phase is given for good)."""
        return self in (Phase.COMPLETED, Phase.HELD, Phase.REMOVED)


#: BLAHP ``<jobstatus>`` code for each phase (1 IDLE, 2 RUNNING, 3 REMOVED, 4 COMPLETED, 5 HELD).
BLAHP_STATUS: Mapping[Phase, int] = {
    Phase.IDLE: 1,
    Phase.RUNNING: 2,
    Phase.REMOVED: 3,
    Phase.COMPLETED: 4,
    Phase.HELD: 5,
}


@dataclass(frozen=True)
class JobState:
    """A backend's answer to "how is this pilot?", free of any backend's vocabulary."""

    phase: Phase
    exit_code: Optional[int] = None
    """Exit status of a completed pilot that exited normally."""
    exit_signal: Optional[int] = None
    """Signal that killed a completed pilot (then ``exit_code`` is None)."""
    exit_reason: Optional[str] = None
    """Why a completed pilot ended, when it is more than its exit code (OOMKilled, deadline)."""
    hold_reason: Optional[str] = None
    hold_code: int = 0
    hold_subcode: int = 0
    batch_id: Optional[str] = None
    """The backend's own name for the job (pod name, Lancium job id)."""
    worker_node: Optional[str] = None
    wall_clock_s: Optional[float] = None
    cpus_provisioned: Optional[int] = None
    memory_provisioned_mb: Optional[int] = None
    disk_provisioned_kb: Optional[int] = None

    @property
    def blahp_status(self) -> int:
        return BLAHP_STATUS[self.phase]

    def status_ad(self) -> str:
        """The one-line ClassAd the gridmanager copies into the job (``JobStatus`` and friends); built
        once per object (it is immutable), so an answer handed out again costs nothing more."""
        built = self.__dict__.get("_status_ad")
        if built is None:
            built = self.__dict__["_status_ad"] = self._build_status_ad()
        return str(built)

    def _build_status_ad(self) -> str:
        ad = classad2.ClassAd()
        ad["JobStatus"] = self.blahp_status
        values: List[Tuple[str, object]] = [
            ("BatchjobId", self.batch_id),
            ("WorkerNode", self.worker_node),
            ("RemoteWallClockTime", self.wall_clock_s),
            ("CpusProvisioned", self.cpus_provisioned),
            ("MemoryProvisioned", self.memory_provisioned_mb),
            ("DiskProvisioned", self.disk_provisioned_kb),
        ]
        if self.phase is Phase.COMPLETED:
            if self.exit_signal is not None:
                values += [("ExitBySignal", True), ("ExitSignal", self.exit_signal)]
            else:
                values += [("ExitBySignal", False), ("ExitCode", self.exit_code or 0)]
            values.append(("ExitReason", self.exit_reason))
        elif self.phase is Phase.HELD:
            values += [("HoldReason", self.hold_reason or "held by the backend with no reason"),
                       ("HoldReasonCode", self.hold_code), ("HoldReasonSubCode", self.hold_subcode)]
        for name, value in values:
            if value is not None:
                ad[name] = value
        return repr(ad)
