"""The provisioner's decisions, as a pure function of demand, pilots and caps (no I/O, no clock).

Per group: while jobs wait, keep up to ``max_idle_per_group`` pilots idle at the CE, and never
more idle pilots than waiting jobs; no demand, no new pilots. Across groups: at most ``max_idle``
idle pilots and ``max_pilots`` in all; when the caps bind, groups take turns, the one with most
waiting jobs first. Pilots are never removed for lack of demand (they end themselves when idle in
their pool); only a pilot that stayed idle at the CE past ``remove_idle_after_s`` is removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from gahp.provision.shape import Group


@dataclass(frozen=True)
class Pilot:
    """One of this provisioner's pilot jobs at the CE."""

    job_id: str
    group: str
    idle: bool
    since: float
    """When it entered its current status (epoch seconds)."""


@dataclass(frozen=True)
class Caps:
    max_idle_per_group: int
    max_idle: int
    max_pilots: int
    remove_idle_after_s: int
    """0: never remove."""


@dataclass
class Row:
    """One group's line of a cycle's decision (what the log says about it)."""

    key: str
    group: Optional[Group]
    demand: int
    """Pilots the group's waiting jobs need (for shaped pilots, the jobs waiting)."""
    waiting: int = 0
    """Jobs waiting (filled in by the caller, for the log)."""
    idle: int = 0
    running: int = 0
    submit: int = 0
    remove: int = 0


@dataclass
class Decision:
    rows: List[Row] = field(default_factory=list)
    remove: List[Pilot] = field(default_factory=list)
    capped: str = ""
    """Which cap stopped submissions this cycle, if one did."""
    failures: int = 0
    """Submissions or removals the CE refused (filled in by the caller)."""

    @property
    def submissions(self) -> int:
        return sum(r.submit for r in self.rows)


def decide(demand: Mapping[Group, int], pilots: Sequence[Pilot], caps: Caps, now: float) -> Decision:
    rows: Dict[str, Row] = {str(g): Row(str(g), g, n) for g, n in demand.items() if n > 0}
    decision = Decision()
    for pilot in pilots:
        row = rows.get(pilot.group)
        if row is None:
            row = rows[pilot.group] = Row(pilot.group, None, 0)
        if pilot.idle and caps.remove_idle_after_s and now - pilot.since >= caps.remove_idle_after_s:
            decision.remove.append(pilot)
            row.remove += 1
        elif pilot.idle:
            row.idle += 1
        else:
            row.running += 1
    idle = sum(r.idle for r in rows.values())
    total = idle + sum(r.running for r in rows.values())
    wanting = [r for r in rows.values() if r.group is not None
               and min(caps.max_idle_per_group, r.demand) > r.idle]
    wanting.sort(key=lambda r: (-r.demand, r.key))
    while wanting:
        if idle >= caps.max_idle:
            decision.capped = f"at most {caps.max_idle} idle pilots in all"
            break
        if total >= caps.max_pilots:
            decision.capped = f"at most {caps.max_pilots} pilots in all"
            break
        for row in list(wanting):
            if idle >= caps.max_idle or total >= caps.max_pilots:
                break
            row.submit += 1
            idle += 1
            total += 1
            if row.idle + row.submit >= min(caps.max_idle_per_group, row.demand):
                wanting.remove(row)
    decision.rows = sorted(rows.values(), key=lambda r: (-r.demand, r.key))
    return decision
