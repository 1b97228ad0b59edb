"""The provisioner's decisions, as a pure function of demand, pilots, the pool and what it remembers
(no I/O; the time is an argument).

:func:`decide` runs the same steps every cycle, each a pure function of its own:

1. **demand** (:func:`demand_per_group`, :func:`wanted`): per group, the pilots its waiting jobs
   need (times ``pressure``).
2. **supply** (:func:`pool_word`, :func:`sort_pilot`): what each pilot is, from the CE and the pool.
   Supply is the pilots that will serve the group's waiting jobs without help: not started yet (idle
   at the CE: a pod waiting to be placed), started but not yet in the pool, and idle (unclaimed) in
   the pool. The pool's word counts only for a pilot of the group it names that runs at the CE, or
   that the CE still shows idle though its startd already joined (the CE learns of its start a poll
   later: it has started, and is never withdrawn).
3. **remove** (the kinds of :data:`REMOVED`): a started pilot is removed only when it is idle in the
   pool and its jobs do not need it — idle ``unmatched_s`` while its group's jobs wait (they do not
   match it), or idle ``idle_s`` while none waits; a pilot is removed when idle at the CE past
   ``remove_idle_after_s``. A pilot that runs a job is never removed.
4. **endings** (:func:`ending_of`, :func:`hold`): what became of pilots gone from the CE's queue since
   the last cycle, and so whether a group is held back. A pilot idle in the pool for ``unmatched_s``
   while its group's jobs wait, or one that ended without ever running a job while they waited, means
   the jobs do not match its pilots: no new pilot until more jobs wait, one of its pilots runs a job,
   or ``retry_s`` passed (then one pilot tries). A pilot that ended without ever joining the pool (a
   black hole, a bad image; not one the CE's history shows completed with exit code 0 after running at
   least a pilot's idle time: it joined and left between two cycles) is a failure of its group.
5. **withdraw** (:func:`withdrawals`): pilots not started are withdrawn, newest first, when the jobs
   no longer need them (supply beyond demand), and, whatever the supply, down to ``ramp_start`` when
   one of the group's pilots waited longer than ``start_s`` to start (the cluster does not place
   them now).
6. **back-off** (:func:`back_off`): a group held back gets nothing, or one pilot after ``retry_s``; a
   group with failures one pilot at a time, the wait doubling from one cycle up to ``backoff_max_s``,
   until a pilot joins; a group whose pilots the cluster does not place nothing more.
7. **ramp** (:func:`ramp`): a group with no pilot in the pool gets ``ramp_start`` pilots and waits
   for them (whether the cluster starts its shape and they join); one with pilots in the pool may have
   ``ramp_factor`` on their way per pilot in the pool. After the cluster left its pilots unplaced, the
   group has at most ``ramp_start`` on their way again, twice as many each cycle it plans more.
8. **share** (:func:`share`): across groups at most ``max_pilots`` pilots in all and
   ``max_pilots_per_group`` per group, at most ``max_starting`` not started; when a cap binds, groups
   take turns, the one with fewest pilots first.
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



# ------------------------------------------------------------------------------------------------
# The working state of a cycle

@dataclass
class Work:
    """One group's working state during a cycle of :func:`decide`: its row and how its pilots sorted."""

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

    @property
    def supply(self) -> int:
        """Its pilots that will serve its waiting jobs without help."""
        return len(self.waiting) + self.joined + self.row.booting + self.row.idle

    @property
    def unplaced(self) -> int:
        """Its pilots the cluster does not place: held, or waiting past ``start_s``."""
        return self.held + min(self.stuck, len(self.waiting))


@dataclass
class _Cycle:
    """What one cycle of :func:`decide` gathers across groups before it plans each."""

    decision: Decision
    groups: Dict[str, Work]
    failed: Set[str] = field(default_factory=set)
    """Groups with pilots that ended (or got lost) without joining the pool this cycle: one failure each,
    however many pilots (a batch that fails together doubles the back-off once)."""
    unmatched: Dict[str, int] = field(default_factory=dict)
    """Groups with pilots idle in the pool while their jobs waited, or gone having run none: how many."""

    def group(self, key: str) -> Work:
        if key not in self.groups:
            self.groups[key] = Work(Row(key, None, 0))
        return self.groups[key]

    def remove(self, pilot: Pilot, reason: str) -> None:
        self.decision.remove.append(pilot)
        self.decision.reasons[pilot.job_id] = reason
        self.group(pilot.group).row.remove += 1
        record = self.decision.history.pilots.get(pilot.job_id)
        if record is not None:
            record.removed = True


def decide(demand: Mapping[Group, int], waiting: Mapping[Group, int], pilots: Sequence[Pilot],
           slots: Sequence[Slot], policy: Policy, history: History, now: float,
           complete: bool = True, endings: Optional[Mapping[str, Ending]] = None) -> Decision:
    """One cycle's decision, the steps of this module in their order. ``complete``: the demand holds
    every waiting job (else nothing is withdrawn or removed for lack of demand: the jobs of a schedd that
    did not answer are not gone). ``endings``: how pilots gone from the CE's queue since the last cycle
    ended (job id → ending), as far as the CE's history says."""
    cycle = _Cycle(Decision(history=history.copy()), demand_per_group(demand, waiting))
    memory = cycle.decision.history
    seen, early = pool_word(pilots, slots)
    for pilot in pilots:
        work = cycle.group(pilot.group)
        record = memory.pilots.setdefault(pilot.job_id, PilotRecord(pilot.group, now))
        slot = seen.get(pilot.job_id) if not pilot.idle else early.get(pilot.job_id)
        kind = sort_pilot(pilot, slot, record, work.row.waiting, complete, policy, now)
        _count(cycle, work, pilot, slot, record, kind, policy)
    present = {p.job_id for p in pilots}
    for job_id in [j for j in memory.pilots if j not in present]:
        gone = memory.pilots.pop(job_id)
        _ended(cycle, gone, ending_of(gone, (endings or {}).get(job_id), policy))
    for key in cycle.failed:
        memory.group(key).failed(now)
    for key, work in cycle.groups.items():
        hold(memory, key, work.row.waiting, cycle.unmatched.get(key, 0), now)
        _plan_group(cycle, work, policy, now, complete)
    share(cycle.groups, policy, cycle.decision)
    cycle.decision.rows = sorted((w.row for w in cycle.groups.values()), key=lambda r: (-r.waiting, -r.demand, r.key))
    memory.prune({r.key for r in cycle.decision.rows})
    return cycle.decision


# ------------------------------------------------------------------------------------------------
# 1. demand

def demand_per_group(demand: Mapping[Group, int], waiting: Mapping[Group, int]) -> Dict[str, Work]:
    """A working group per group with demand (groups of pilots without demand join as they are met)."""
    return {str(g): Work(Row(str(g), g, n, waiting.get(g, 0))) for g, n in demand.items() if n > 0}


def wanted(row: Row, policy: Policy) -> int:
    """The pilots a group's waiting jobs call for: its demand times ``pressure`` (none without demand)."""
    return math.ceil(row.demand * policy.pressure_percent / 100) if row.group is not None else 0


# ------------------------------------------------------------------------------------------------
# 2. supply, and 3. which pilots are removed

#: What a pilot is this cycle (:func:`sort_pilot`).
EXPIRED = "expired"
"""Idle at the CE past ``remove_idle_after_s``: removed."""
HELD = "held"
"""Held at the CE: not started, and the cluster did not place it."""
EARLY_BUSY = "early busy"
"""Idle at the CE, its startd in the pool running a job: started."""
EARLY_IDLE = "early idle"
"""Idle at the CE, its startd in the pool unclaimed: started, supply."""
STUCK = "stuck"
"""Not started, waiting longer than ``start_s``: supply, and a sign the cluster does not place more."""
WAITING = "waiting"
"""Not started: supply."""
BOOTING = "booting"
"""Started, not yet in the pool, within ``boot_s`` and never seen there: supply."""
LOST = "lost"
"""Started, never seen in the pool past ``boot_s``: not supply, a failure of its group."""
AWAY = "away"
"""Started, seen in the pool before, not now: not supply."""
CLAIMED = "claimed"
"""Running a job in the pool: not supply (its job is not a waiting one)."""
UNMATCHED = "unmatched"
"""Idle in the pool ``unmatched_s`` while its group's jobs wait: they do not match it; removed."""
UNNEEDED = "unneeded"
"""Idle in the pool ``idle_s`` while no job of its group waits (and every schedd answered): removed."""
IDLE = "idle"
"""Idle in the pool: supply."""

#: The kinds of pilot a cycle removes, and why (the reason its removal gives).
REMOVED = {
    EXPIRED: "idle at the CE for more than {remove_idle_after_s} s (podgahp provision)",
    UNMATCHED: "idle in the pool for {idle} s while jobs of its group waited: they do not match it (podgahp provision)",
    UNNEEDED: "idle in the pool for {idle} s, no job of its group waiting (podgahp provision)",
}


def pool_word(pilots: Sequence[Pilot], slots: Sequence[Slot]) -> Tuple[Dict[str, Slot], Dict[str, Slot]]:
    """What the pool says of the pilots: for each pilot running at the CE, its slot (of the group the CE
    names; busy if any of its slots is, else the one idle the shortest, served if any was); and for each
    pilot the CE does not show running, the slot its startd shows (busy if any is)."""
    running = {p.job_id: p for p in pilots if not p.idle}
    seen: Dict[str, Slot] = {}
    early: Dict[str, Slot] = {}
    for slot in slots:
        pilot = running.get(slot.pilot_id)
        if pilot is None:
            if slot.pilot_id not in early or slot.claimed:
                early[slot.pilot_id] = slot
            continue
        if pilot.group != slot.group:
            continue
        other = seen.get(slot.pilot_id)
        if other is None or slot.claimed or (not other.claimed and slot.idle_s < other.idle_s):
            seen[slot.pilot_id] = replace(slot, served=slot.served or (other is not None and other.served))
    return seen, early


def sort_pilot(pilot: Pilot, slot: Optional[Slot], record: PilotRecord, jobs_waiting: int, complete: bool,
               policy: Policy, now: float) -> str:
    """What one pilot is this cycle: one of the kinds above. ``slot``: the pool's word for it
    (:func:`pool_word`: for a pilot idle at the CE, its startd's slot)."""
    if pilot.idle:
        return _not_started(pilot, slot, policy, now)
    if slot is None:
        if now - pilot.since < policy.boot_s and not record.joined:
            return BOOTING
        return AWAY if record.joined else LOST
    if slot.claimed:
        return CLAIMED
    if jobs_waiting > 0 and slot.idle_s >= policy.unmatched_s:
        return UNMATCHED
    if jobs_waiting == 0 and complete and slot.idle_s >= policy.idle_s:
        return UNNEEDED
    return IDLE


def _not_started(pilot: Pilot, slot: Optional[Slot], policy: Policy, now: float) -> str:
    if policy.remove_idle_after_s and now - pilot.since >= policy.remove_idle_after_s:
        return EXPIRED
    if pilot.held:
        return HELD
    if slot is not None and slot.group == pilot.group:
        return EARLY_BUSY if slot.claimed else EARLY_IDLE
    return STUCK if now - pilot.since >= policy.start_s else WAITING


def _count(cycle: _Cycle, work: Work, pilot: Pilot, slot: Optional[Slot], record: PilotRecord, kind: str,
           policy: Policy) -> None:
    """Count a sorted pilot in its group's row, and remember what it showed."""
    row = work.row
    if kind in REMOVED:
        if kind == UNMATCHED:
            cycle.unmatched[pilot.group] = cycle.unmatched.get(pilot.group, 0) + 1
        _joined(cycle, pilot, slot, record)
        cycle.remove(pilot, REMOVED[kind].format(remove_idle_after_s=policy.remove_idle_after_s,
                                                 idle=int(slot.idle_s) if slot is not None else 0))
    elif kind in (HELD, EARLY_BUSY, EARLY_IDLE, STUCK, WAITING):
        row.starting += 1
        work.held += kind == HELD
        work.early += kind in (EARLY_BUSY, EARLY_IDLE)
        work.joined += kind == EARLY_IDLE
        work.stuck += kind == STUCK
        if kind in (STUCK, WAITING):
            work.waiting.append(pilot)
    elif kind == BOOTING:
        row.booting += 1
    elif kind in (LOST, AWAY, CLAIMED):
        row.busy += 1
        work.lost += kind == LOST
        if kind == LOST and not record.lost:
            record.lost = True
            cycle.failed.add(pilot.group)
        _joined(cycle, pilot, slot, record)
    else:
        row.idle += 1
        _joined(cycle, pilot, slot, record)
        record.waited = row.waiting > 0


def _joined(cycle: _Cycle, pilot: Pilot, slot: Optional[Slot], record: PilotRecord) -> None:
    """Remember what the pool shows of a started pilot: in the pool (its group's pilots join again), running
    or having run a job (its group's jobs match)."""
    if slot is None or pilot.idle:
        return
    memory = cycle.decision.history
    if not record.joined:
        record.joined = True
        memory.group(pilot.group).failures = 0
    if slot.claimed or slot.served:
        record.served = True
    if slot.claimed:
        memory.group(pilot.group).clear()


# ------------------------------------------------------------------------------------------------
# 4. endings

#: What became of a pilot gone from the CE's queue (:func:`ending_of`).
GONE_REMOVED = "removed"
"""Removed by this provisioner: it says nothing of its group."""
GONE_RAN = "ran"
"""Never seen in the pool, yet its ending shows it ran there: its group's pilots join."""
GONE_FAILED = "failed"
"""Never joined the pool (and was not counted lost before): a failure of its group."""
GONE_UNMATCHED = "unmatched"
"""In the pool, never ran a job while its group's jobs waited: they do not match its pilots."""
GONE_NOTHING = "nothing"
"""Nothing new to learn: it ran jobs, no job of its group waited, or it was counted lost before."""


def ending_of(record: PilotRecord, ending: Optional[Ending], policy: Policy) -> str:
    """What a pilot gone from the CE's queue since the last cycle says of its group."""
    if record.removed:
        return GONE_REMOVED
    if not record.joined and not record.lost and _ran_in_the_pool(ending, policy):
        return GONE_RAN
    if not record.joined:
        return GONE_NOTHING if record.lost else GONE_FAILED
    if not record.served and record.waited:
        return GONE_UNMATCHED
    return GONE_NOTHING


def _ended(cycle: _Cycle, gone: PilotRecord, outcome: str) -> None:
    if outcome == GONE_RAN:
        cycle.decision.history.group(gone.group).failures = 0  # it joined and left between two cycles
    elif outcome == GONE_FAILED:
        cycle.failed.add(gone.group)
    elif outcome == GONE_UNMATCHED:
        cycle.unmatched[gone.group] = cycle.unmatched.get(gone.group, 0) + 1


def _ran_in_the_pool(ending: Optional[Ending], policy: Policy) -> bool:
    """Whether a pilot that left the CE's queue unseen in the pool ran as one in the pool does: it
    completed with exit code 0 after at least the time a pilot stays unclaimed before it quits."""
    return (ending is not None and ending.completed and ending.exit_code == 0 and policy.pilot_idle_s > 0
            and ending.ran_s >= policy.pilot_idle_s)


def hold(memory: History, key: str, jobs_waiting: int, unmatched: int, now: float) -> None:
    """Whether a group is held back for jobs that do not match its pilots: from when ``unmatched`` of its
    pilots showed it, until its jobs are gone or more of them wait (the fewest since is remembered)."""
    held = memory.groups.get(key)
    if jobs_waiting <= 0:
        if held is not None:
            held.clear()
    elif unmatched:
        memory.group(key).hold(now, jobs_waiting)
    elif held is not None and held.unmatched_at and jobs_waiting > held.unmatched_waiting:
        held.clear()  # more jobs: they may match
    elif held is not None and held.unmatched_at:
        held.unmatched_waiting = min(held.unmatched_waiting, jobs_waiting)


# ------------------------------------------------------------------------------------------------
# 5. withdraw, 6. back-off, 7. ramp: one group's plan

def _plan_group(cycle: _Cycle, work: Work, policy: Policy, now: float, complete: bool) -> None:
    row = work.row
    want = wanted(row, policy)
    surplus, unplaced = withdrawals(work, want, complete, policy)
    _withdraw(cycle, work, surplus, "not started, and no longer needed by the jobs of its group (podgahp provision)")
    _withdraw(cycle, work, unplaced,
              f"not placed by the cluster after {policy.start_s} s: fewer waiting (podgahp provision)")
    memory = cycle.decision.history
    if row.group is not None and work.unplaced:
        memory.group(row.key).unplaced = policy.ramp_start  # the ramp starts again once they are placed
    elif row.group is None or work.supply >= want:
        return
    record = memory.groups.get(row.key)
    gate = back_off(work, record, policy, now)
    if gate is not None:
        work.want, row.note = gate.want, gate.note
        if gate.retry and record is not None:
            record.unmatched_at = now  # the hold stays until one runs a job
        return
    work.want = ramp(work, want, record, policy)


def withdrawals(work: Work, wanted: int, complete: bool, policy: Policy) -> Tuple[int, int]:
    """How many of a group's pilots not started to withdraw (newest first): those its jobs no longer need
    (supply beyond ``wanted``; only when ``complete``), then, when the cluster does not place its pilots,
    those beyond ``ramp_start``, whatever the supply."""
    surplus = min(len(work.waiting), work.supply - wanted) if complete and work.supply > wanted else 0
    unplaced = max(0, len(work.waiting) - surplus - policy.ramp_start) if work.unplaced else 0
    return surplus, unplaced


def _withdraw(cycle: _Cycle, work: Work, count: int, reason: str) -> None:
    """Withdraw ``count`` of the group's pilots that have not started (nor are held), the newest first."""
    for pilot in sorted(work.waiting, key=lambda p: (-p.since, p.job_id))[:max(0, count)]:
        cycle.decision.remove.append(pilot)
        cycle.decision.reasons[pilot.job_id] = reason
        work.waiting.remove(pilot)
        work.row.remove += 1
        work.row.starting -= 1
        cycle.decision.history.pilots.pop(pilot.job_id, None)


@dataclass(frozen=True)
class Gate:
    """Why a group gets fewer pilots than its ramp would give (:func:`back_off`)."""

    want: int
    note: str
    retry: bool = False
    """One pilot tries again for jobs that did not match (the time of the hold is now)."""


def back_off(work: Work, record: Optional[GroupRecord], policy: Policy, now: float) -> Optional[Gate]:
    """What holds a group back this cycle, if anything: pilots the cluster does not place, jobs that do not
    match its pilots, pilots that end without joining the pool."""
    if work.unplaced:
        return Gate(0, f"{work.unplaced} of its pilots waited more than {policy.start_s} s to start: the cluster "
                       "does not place more now")
    if record is not None and record.unmatched_at:
        if now - record.unmatched_at < policy.retry_s or work.supply:
            return Gate(0, "its pilots idled in the pool while its jobs waited: the jobs do not match them; "
                           f"no new pilots until more jobs wait, one runs a job, or {policy.retry_s} s pass")
        return Gate(1, "its pilots did not match its jobs: one tries again", retry=True)
    if record is not None and record.failures:
        wait = _backoff_s(record, policy)
        if now - record.failed_at < wait or work.supply:
            return Gate(0, f"{record.failures} of its pilots ended without joining the pool: one at a time, "
                           f"the next after {int(wait)} s")
        return Gate(1, "")
    return None


def _backoff_s(record: GroupRecord, policy: Policy) -> float:
    return float(min(policy.backoff_max_s, policy.interval_s * 2 ** min(record.failures - 1, 30)))


def ramp(work: Work, wanted: int, record: Optional[GroupRecord], policy: Policy) -> int:
    """The pilots a group may add: what its jobs want beyond its supply, within its ramp (``ramp_start`` on
    their way until its pilots are in the pool, then ``ramp_factor`` per pilot in the pool; after the
    cluster left pilots unplaced, the limit :attr:`GroupRecord.unplaced` says, doubled each cycle)."""
    row = work.row
    joined = row.idle + row.busy - work.lost
    on_their_way = len(work.waiting) + work.early + row.booting
    if joined == 0 and on_their_way:
        return 0  # its first pilots are on their way: whether they join the pool decides the next ones
    limit = policy.ramp_start if joined == 0 else max(policy.ramp_start, policy.ramp_factor * joined)
    if record is not None and record.unplaced:
        limit, normal = min(limit, record.unplaced), limit
        record.unplaced = record.unplaced * 2 if record.unplaced * 2 < normal else 0
    return max(0, min(wanted - work.supply, limit - on_their_way))


# ------------------------------------------------------------------------------------------------
# 8. share

def share(groups: Mapping[str, Work], policy: Policy, decision: Decision) -> None:
    """Grant what groups want within the caps, one pilot at a time to the group with fewest."""
    total = sum(w.row.alive for w in groups.values())
    starting = sum(w.row.starting for w in groups.values())
    heap: List[Tuple[int, int, str]] = [(w.row.alive, -w.row.waiting, k) for k, w in groups.items() if w.want > 0]
    heapq.heapify(heap)
    while heap:
        decision.capped = _cap(total, starting, policy)
        if decision.capped:
            break
        alive, order, key = heapq.heappop(heap)
        work = groups[key]
        if work.row.alive + work.row.submit >= policy.max_pilots_per_group:
            work.row.note = work.row.note or f"at most {policy.max_pilots_per_group} pilots per group"
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


def _cap(total: int, starting: int, policy: Policy) -> str:
    """The cap that stops submissions now, if one does."""
    if total >= policy.max_pilots:
        return f"at most {policy.max_pilots} pilots in all"
    if starting >= policy.max_starting:
        return f"at most {policy.max_starting} pilots waiting to start"
    return ""
