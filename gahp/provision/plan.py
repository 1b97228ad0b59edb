"""The provisioner's decisions, as a pure function of demand, pilots, the pool and what it remembers
(no I/O; the time is an argument).

Per group, a cycle counts the pilots that will serve its waiting jobs without help: pilots that have
not started yet (idle at the CE: a pod waiting to be placed), pilots started but not yet in the pool,
and pilots idle (unclaimed) in the pool. It submits the difference to the jobs waiting (times
``pressure``), within a ramp: a group with no pilot in the pool gets ``ramp_start`` pilots and waits
for them; a group with pilots in the pool may have ``ramp_factor`` pilots on their way per pilot in
the pool; none while one of its pilots has waited longer than ``start_s`` to start (the cluster does
not place them: those beyond ``ramp_start`` are withdrawn).

What the pool shows holds a group back: a pilot idle in the pool for ``unmatched_s`` while its group's
jobs wait, or one that ended without ever running a job while they waited, means the jobs do not
match its pilots: no new pilot until the waiting jobs change (more of them), one of its pilots runs a
job, or ``retry_s`` passed (then one pilot tries). A pilot that ended without ever joining the pool
(a black hole, a bad image; not one the CE's history shows completed with exit code 0 after running at
least a pilot's idle time: it joined and left between two cycles) puts its group in back-off: one pilot at a time, doubling the wait from
one cycle up to ``backoff_max_s``, until a pilot joins.

Across groups: at most ``max_pilots`` pilots in all and ``max_pilots_per_group`` per group, at most
``max_starting`` not started; when a cap binds, groups take turns, the one with fewest pilots first.
Started pilots are never removed (they end themselves when idle in the pool); only pilots that have
not started are: the surplus of a group (more on their way than its jobs need), those withdrawn
when the cluster does not place them, and those idle at the CE past ``remove_idle_after_s``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from gahp.provision.history import GroupRecord, History, PilotRecord
from gahp.provision.shape import Group


@dataclass(frozen=True)
class Pilot:
    """One of this provisioner's pilot jobs at the CE."""

    job_id: str
    group: str
    idle: bool
    """Not started: idle or held at the CE."""
    since: float
    """When it entered its current status (epoch seconds)."""
    held: bool = False


@dataclass(frozen=True)
class Slot:
    """One of this provisioner's pilots as its startd shows it in the user pool."""

    pilot_id: str
    """The pilot's job id at the CE (``PodgahpPilotId``)."""
    group: str
    claimed: bool
    """Running a job (a partitionable pilot: any of its resources in use)."""
    idle_s: float
    """Seconds unclaimed (0 when claimed)."""
    served: bool = False
    """It ran a job before (a slot that left its first unclaimed state)."""


@dataclass(frozen=True)
class Ending:
    """How one of this provisioner's pilots that left the CE's queue ended, as the CE's job history says."""

    completed: bool
    """It completed (not removed)."""
    exit_code: Optional[int]
    """Its exit code (None: killed by a signal, or not said)."""
    ran_s: float
    """Seconds it ran."""


@dataclass(frozen=True)
class Policy:
    """Caps, ramp and tolerances (``PODGAHP_PROVISION_*``)."""

    max_pilots: int
    max_pilots_per_group: int
    max_starting: int
    ramp_start: int
    ramp_factor: int
    pressure_percent: int
    start_s: int
    boot_s: int
    unmatched_s: int
    idle_s: int
    """A pilot idle in the pool this long while no job of its group waits is removed."""
    retry_s: int
    backoff_max_s: int
    """Longest wait between two pilots of a group whose pilots end without joining the pool."""
    interval_s: int
    remove_idle_after_s: int
    """0: never remove."""
    pilot_idle_s: int = 0
    """A pilot quits after this long unclaimed in the pool: one that completed with exit code 0 after
    running at least this long joined the pool, seen there or not (0: none is taken to have)."""


@dataclass
class Row:
    """One group's line of a cycle's decision (what the log and ``--once`` say about it)."""

    key: str
    group: Optional[Group]
    demand: int
    """Pilots the group's waiting jobs need (shaped pilots: the jobs waiting)."""
    waiting: int = 0
    """Jobs waiting."""
    starting: int = 0
    """Pilots not started (idle or held at the CE)."""
    booting: int = 0
    """Started, not yet in the pool."""
    idle: int = 0
    """Idle (unclaimed) in the pool."""
    busy: int = 0
    """Running jobs in the pool (or started and lost: not in the pool past ``boot_s``)."""
    submit: int = 0
    remove: int = 0
    note: str = ""
    """Why the group gets no (or fewer) pilots, when something holds it back."""

    @property
    def alive(self) -> int:
        return self.starting + self.booting + self.idle + self.busy

    @property
    def running(self) -> int:
        return self.booting + self.idle + self.busy


@dataclass
class Decision:
    rows: List[Row] = field(default_factory=list)
    remove: List[Pilot] = field(default_factory=list)
    reasons: Dict[str, str] = field(default_factory=dict)
    """Why each pilot in :attr:`remove` goes (job id → reason)."""
    capped: str = ""
    """Which cap stopped submissions this cycle, if one did."""
    history: History = field(default_factory=History)
    """What to remember for the next cycle."""
    failures: int = 0
    """Submissions or removals the CE refused (filled in by the caller)."""

    @property
    def submissions(self) -> int:
        return sum(r.submit for r in self.rows)


@dataclass
class _Group:
    """Working state of one group during :func:`decide`."""

    row: Row
    waiting: List[Pilot] = field(default_factory=list)
    """Its pilots not started and not held (they may still start)."""
    stuck: int = 0
    """Of those, the ones waiting longer than ``start_s``."""
    held: int = 0
    early: int = 0
    """Idle at the CE, yet their startd is in the pool: started, never withdrawn; on their way for the ramp
    until the CE sees them run."""
    joined: int = 0
    """Of those, the unclaimed ones (supply)."""
    lost: int = 0
    """Started long ago, never seen in the pool (counted in the row's ``busy``)."""
    want: int = 0


def _backoff_s(record: GroupRecord, policy: Policy) -> float:
    return float(min(policy.backoff_max_s, policy.interval_s * 2 ** min(record.failures - 1, 30)))


def decide(demand: Mapping[Group, int], waiting: Mapping[Group, int], pilots: Sequence[Pilot],
           slots: Sequence[Slot], policy: Policy, history: History, now: float,
           complete: bool = True, endings: Optional[Mapping[str, Ending]] = None) -> Decision:
    """One cycle's decision. ``complete``: the demand holds every waiting job (else nothing is withdrawn
    or removed for lack of demand: the jobs of a schedd that did not answer are not gone).
    ``endings``: how pilots gone from the CE's queue since the last cycle ended (job id → ending), as
    far as the CE's history says."""
    groups: Dict[str, _Group] = {}
    for g, n in demand.items():
        if n > 0:
            groups[str(g)] = _Group(Row(str(g), g, n, waiting.get(g, 0)))
    decision = Decision()
    memory = decision.history = history.copy()

    def entry(key: str) -> _Group:
        if key not in groups:
            groups[key] = _Group(Row(key, None, 0))
        return groups[key]

    # the pool's word counts only for a pilot of the group it names that runs at the CE
    running = {p.job_id: p for p in pilots if not p.idle}
    seen: Dict[str, Slot] = {}
    for slot in slots:
        pilot = running.get(slot.pilot_id)
        if pilot is None or pilot.group != slot.group:
            continue
        other = seen.get(slot.pilot_id)
        if other is None or slot.claimed or (not other.claimed and slot.idle_s < other.idle_s):
            seen[slot.pilot_id] = replace(slot, served=slot.served or (other is not None and other.served))
    # a pilot the CE still shows idle may already be in the pool and running a job (the CE learns of
    # its start a status poll later): it has started, and withdrawing it would end that job
    started_early: Dict[str, Slot] = {}
    for slot in slots:
        if slot.pilot_id not in running and (slot.pilot_id not in started_early or slot.claimed):
            started_early[slot.pilot_id] = slot

    unmatched: Dict[str, int] = {}
    failed: Set[str] = set()
    """Groups with pilots that ended (or got lost) without joining the pool this cycle: one failure each,
    however many pilots (a batch that fails together doubles the back-off once)."""
    for pilot in pilots:
        work = entry(pilot.group)
        row = work.row
        record = memory.pilots.setdefault(pilot.job_id, PilotRecord(pilot.group, now))
        if pilot.idle:
            if _idle_too_long(pilot, policy, now):
                _remove(decision, row, pilot, record, f"idle at the CE for more than {policy.remove_idle_after_s} s "
                        "(podgahp provision)")
                continue
            row.starting += 1
            if pilot.held:
                work.held += 1
                continue
            early = started_early.get(pilot.job_id)
            if early is not None and early.group == pilot.group:
                work.early += 1
                if not early.claimed:
                    work.joined += 1
                continue
            work.waiting.append(pilot)
            if now - pilot.since >= policy.start_s:
                work.stuck += 1
            continue
        found = seen.get(pilot.job_id)
        if found is None:
            if now - pilot.since < policy.boot_s and not record.joined:
                row.booting += 1
            else:
                row.busy += 1  # started, not in the pool: not supply
                if not record.joined:
                    work.lost += 1
                    if not record.lost:
                        record.lost = True
                        failed.add(pilot.group)
            continue
        slot = found
        if not record.joined:  # a pilot newly in the pool: its group's pilots join again
            record.joined = True
            memory.group(pilot.group).failures = 0
        if slot.claimed or slot.served:
            record.served = True
        if slot.claimed:
            row.busy += 1
            memory.group(pilot.group).clear()
        elif row.waiting > 0 and slot.idle_s >= policy.unmatched_s:
            unmatched[pilot.group] = unmatched.get(pilot.group, 0) + 1
            _remove(decision, row, pilot, record, f"idle in the pool for {int(slot.idle_s)} s while jobs of its group "
                    "waited: they do not match it (podgahp provision)")
        elif row.waiting == 0 and complete and slot.idle_s >= policy.idle_s:
            _remove(decision, row, pilot, record, f"idle in the pool for {int(slot.idle_s)} s, no job of its group "
                    "waiting (podgahp provision)")
        else:
            row.idle += 1
            record.waited = row.waiting > 0

    # pilots gone since the last cycle, not removed by this provisioner: what became of them
    present = {p.job_id for p in pilots}
    for job_id, gone in list(memory.pilots.items()):
        if job_id in present:
            continue
        del memory.pilots[job_id]
        if gone.removed:
            continue
        if not gone.joined and not gone.lost and _ran_in_the_pool((endings or {}).get(job_id), policy):
            memory.group(gone.group).failures = 0  # it joined and left between two cycles
        elif not gone.joined:
            if not gone.lost:
                failed.add(gone.group)
        elif not gone.served and gone.waited:
            unmatched[gone.group] = unmatched.get(gone.group, 0) + 1

    for key in failed:
        memory.group(key).failed(now)
    for key, work in groups.items():
        row = work.row
        held = memory.groups.get(key)
        if row.waiting <= 0:
            if held is not None:
                held.clear()
        elif unmatched.get(key):
            memory.group(key).hold(now, row.waiting)
        elif held is not None and held.unmatched_at and row.waiting > held.unmatched_waiting:
            held.clear()  # more jobs: they may match
        elif held is not None and held.unmatched_at:
            held.unmatched_waiting = min(held.unmatched_waiting, row.waiting)
        _plan_group(work, memory.groups.get(key), policy, now, complete, decision)

    _share(groups, policy, decision)
    decision.rows = sorted((w.row for w in groups.values()), key=lambda r: (-r.waiting, -r.demand, r.key))
    memory.prune({r.key for r in decision.rows})
    return decision


def _remove(decision: Decision, row: Row, pilot: Pilot, record: PilotRecord, reason: str) -> None:
    decision.remove.append(pilot)
    decision.reasons[pilot.job_id] = reason
    record.removed = True
    row.remove += 1


def _ran_in_the_pool(ending: Optional[Ending], policy: Policy) -> bool:
    """Whether a pilot that left the CE's queue unseen in the pool ran as one in the pool does: it
    completed with exit code 0 after at least the time a pilot stays unclaimed before it quits."""
    return (ending is not None and ending.completed and ending.exit_code == 0 and policy.pilot_idle_s > 0
            and ending.ran_s >= policy.pilot_idle_s)


def _idle_too_long(pilot: Pilot, policy: Policy, now: float) -> bool:
    """Whether a pilot idle at the CE has been so past the limit."""
    return bool(policy.remove_idle_after_s) and now - pilot.since >= policy.remove_idle_after_s


def _withdraw(work: _Group, count: int, reason: str, decision: Decision) -> None:
    """Remove ``count`` of the group's pilots that have not started (nor are held), the newest first."""
    for pilot in sorted(work.waiting, key=lambda p: (-p.since, p.job_id))[:max(0, count)]:
        decision.remove.append(pilot)
        decision.reasons[pilot.job_id] = reason
        work.waiting.remove(pilot)
        work.row.remove += 1
        work.row.starting -= 1
        decision.history.pilots.pop(pilot.job_id, None)


def _plan_group(work: _Group, record: Optional[GroupRecord], policy: Policy, now: float, complete: bool,
                decision: Decision) -> None:
    row = work.row
    wanted = math.ceil(row.demand * policy.pressure_percent / 100) if row.group is not None else 0
    supply = len(work.waiting) + work.joined + row.booting + row.idle
    if supply > wanted and work.waiting and complete:
        _withdraw(work, supply - wanted,
                  "not started, and no longer needed by the jobs of its group (podgahp provision)", decision)
        supply = len(work.waiting) + work.joined + row.booting + row.idle
    if row.group is None or supply >= wanted:
        return
    stuck = work.held + min(work.stuck, len(work.waiting))
    if stuck:
        row.note = (f"{stuck} of its pilots waited more than {policy.start_s} s to start: the cluster "
                    "does not place more now")
        _withdraw(work, len(work.waiting) - policy.ramp_start,
                  f"not placed by the cluster after {policy.start_s} s: fewer waiting (podgahp provision)", decision)
        return
    if record is not None and record.unmatched_at:
        if now - record.unmatched_at < policy.retry_s or supply:
            row.note = ("its pilots idled in the pool while its jobs waited: the jobs do not match them; "
                        f"no new pilots until more jobs wait, one runs a job, or {policy.retry_s} s pass")
            return
        record.unmatched_at = now  # one pilot tries again; the hold stays until one runs a job
        work.want = 1
        row.note = "its pilots did not match its jobs: one tries again"
        return
    if record is not None and record.failures:
        wait = _backoff_s(record, policy)
        if now - record.failed_at < wait or supply:
            row.note = (f"{record.failures} of its pilots ended without joining the pool: one at a time, "
                        f"the next after {int(wait)} s")
            return
        work.want = 1
        return
    joined = row.idle + row.busy - work.lost
    on_their_way = len(work.waiting) + work.early + row.booting
    if joined == 0 and on_their_way:
        return  # its first pilots are on their way: whether they join the pool decides the next ones
    limit = policy.ramp_start if joined == 0 else max(policy.ramp_start, policy.ramp_factor * joined)
    work.want = max(0, min(wanted - supply, limit - on_their_way))


def _share(groups: Mapping[str, _Group], policy: Policy, decision: Decision) -> None:
    """Grant what groups want within the caps, one pilot at a time to the group with fewest."""
    total = sum(w.row.alive for w in groups.values())
    starting = sum(w.row.starting for w in groups.values())
    heap: List[Tuple[int, int, str]] = []
    for key, work in groups.items():
        if work.want > 0:
            heapq.heappush(heap, (work.row.alive, -work.row.waiting, key))
    while heap:
        if total >= policy.max_pilots:
            decision.capped = f"at most {policy.max_pilots} pilots in all"
            break
        if starting >= policy.max_starting:
            decision.capped = f"at most {policy.max_starting} pilots waiting to start"
            break
        alive, order, key = heapq.heappop(heap)
        work = groups[key]
        if work.row.alive + work.row.submit >= policy.max_pilots_per_group:
            if not work.row.note:
                work.row.note = f"at most {policy.max_pilots_per_group} pilots per group"
            continue
        work.row.submit += 1
        work.want -= 1
        total += 1
        starting += 1
        if work.want > 0:
            heapq.heappush(heap, (alive + 1, order, key))
    for work in groups.values():
        if work.want > 0 and decision.capped and not work.row.note:
            work.row.note = f"capped: {decision.capped}"
