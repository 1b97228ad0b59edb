"""Each step of the provisioner's decision on its own, a row per case: demand, supply (the pool's word,
what each pilot is, which are removed), endings and holds, withdrawals, back-off, the ramp and the
share within the caps. tests/unit/provision/test_plan.py runs them together through ``decide``."""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, NamedTuple, Optional, Tuple

import pytest

from gahp.provision import plan
from gahp.provision.history import GroupRecord, History, PilotRecord
from gahp.provision.plan import Decision, Ending, Pilot, Policy, Row, Slot, Work
from gahp.provision.shape import Group, Shape

SMALL, LARGE = Group(Shape(1, 2048)), Group(Shape(8, 32768))
S, L = str(SMALL), str(LARGE)
NOW = 100_000.0
POLICY = Policy(max_pilots=500, max_pilots_per_group=400, max_starting=300, ramp_start=3, ramp_factor=10,
                pressure_percent=100, start_s=120, boot_s=300, unmatched_s=300, idle_s=120, retry_s=3600,
                backoff_max_s=300, interval_s=60, remove_idle_after_s=7200, pilot_idle_s=1200)


def work(demand: int = 40, waiting: int = 0, stuck: int = 0, held: int = 0, early: int = 0, joined: int = 0,
         booting: int = 0, idle: int = 0, busy: int = 0, lost: int = 0, group: Optional[Group] = SMALL) -> Work:
    """A group's working state: ``waiting`` pilots not started (``stuck`` of them past start_s)."""
    row = Row(str(group or SMALL), group, demand, demand, starting=waiting + held + early, booting=booting,
              idle=idle, busy=busy)
    pilots = [Pilot(f"1{i}.0", row.key, True, NOW - (200 if i < stuck else 30) - i) for i in range(waiting)]
    return Work(row, pilots, stuck=stuck, held=held, early=early, joined=joined, lost=lost)


# ------------------------------------------------------------------------------------------------
# 1. demand

@pytest.mark.parametrize("demand, pressure, expected", [
    (40, 100, 40),
    (40, 25, 10),
    (3, 50, 2),  # rounded up: a job waiting always calls for a pilot
    (0, 100, 0),
])
def test_wanted(demand: int, pressure: int, expected: int) -> None:
    row = Row(S, SMALL, demand, demand)
    assert plan.wanted(row, replace(POLICY, pressure_percent=pressure)) == expected


def test_a_group_of_pilots_without_demand_wants_none() -> None:
    assert plan.wanted(Row(S, None, 0), POLICY) == 0


def test_demand_per_group_keeps_the_groups_with_jobs() -> None:
    groups = plan.demand_per_group({SMALL: 40, LARGE: 0}, {SMALL: 35})
    assert list(groups) == [S] and (groups[S].row.demand, groups[S].row.waiting) == (40, 35)


# ------------------------------------------------------------------------------------------------
# 2. supply: the pool's word

RUN = Pilot("2.0", S, False, NOW - 600)
IDLE_AT_CE = Pilot("1.0", S, True, NOW - 30)


class Word(NamedTuple):
    what: str
    pilots: List[Pilot]
    slots: List[Slot]
    seen: Dict[str, Tuple[bool, float, bool]]
    """Pilot → (claimed, idle_s, served) of the slot that counts for it."""
    early: Dict[str, bool]
    """Pilot idle at the CE → claimed."""


WORDS = [
    Word("a running pilot's slot", [RUN], [Slot("2.0", S, False, 40)], {"2.0": (False, 40, False)}, {}),
    Word("a slot of another group does not count", [RUN], [Slot("2.0", L, True, 0)], {}, {}),
    Word("a slot naming no pilot at the CE is no pilot's", [RUN], [Slot("9.0", S, True, 0)], {}, {"9.0": True}),
    Word("two slots: busy if either is", [RUN], [Slot("2.0", S, False, 40), Slot("2.0", S, True, 0)],
         {"2.0": (True, 0, False)}, {}),
    Word("two idle slots: the one idle the shortest, served if either was", [RUN],
         [Slot("2.0", S, False, 40, served=True), Slot("2.0", S, False, 10)], {"2.0": (False, 10, True)}, {}),
    Word("a pilot idle at the CE whose startd joined", [IDLE_AT_CE], [Slot("1.0", S, False, 5)], {},
         {"1.0": False}),
    Word("a pilot idle at the CE with two slots: busy if either is", [IDLE_AT_CE],
         [Slot("1.0", S, True, 0), Slot("1.0", S, False, 5)], {}, {"1.0": True}),
]


@pytest.mark.parametrize("case", WORDS, ids=[c.what for c in WORDS])
def test_pool_word(case: Word) -> None:
    seen, early = plan.pool_word(case.pilots, case.slots)
    assert {k: (v.claimed, v.idle_s, v.served) for k, v in seen.items()} == case.seen
    assert {k: v.claimed for k, v in early.items()} == case.early


# ------------------------------------------------------------------------------------------------
# 2. supply and 3. remove: what each pilot is

class Sort(NamedTuple):
    what: str
    pilot: Pilot
    slot: Optional[Slot]
    kind: str
    record: PilotRecord = PilotRecord(S, NOW - 1000)
    jobs_waiting: int = 10
    complete: bool = True


SORTS = [
    Sort("idle at the CE past remove_idle_after_s", Pilot("1.0", S, True, NOW - 8000), None, plan.EXPIRED),
    Sort("held at the CE", Pilot("1.0", S, True, NOW - 30, held=True), None, plan.HELD),
    Sort("held at the CE past remove_idle_after_s", Pilot("1.0", S, True, NOW - 8000, held=True), None,
         plan.EXPIRED),
    Sort("idle at the CE, its startd running a job", IDLE_AT_CE, Slot("1.0", S, True, 0), plan.EARLY_BUSY),
    Sort("idle at the CE, its startd unclaimed", IDLE_AT_CE, Slot("1.0", S, False, 5), plan.EARLY_IDLE),
    Sort("idle at the CE, a slot of another group names it", IDLE_AT_CE, Slot("1.0", L, True, 0), plan.WAITING),
    Sort("not started past start_s", Pilot("1.0", S, True, NOW - 200), None, plan.STUCK),
    Sort("not started", IDLE_AT_CE, None, plan.WAITING),
    Sort("started, not in the pool within boot_s", Pilot("2.0", S, False, NOW - 60), None, plan.BOOTING),
    Sort("started, never in the pool past boot_s", RUN, None, plan.LOST),
    Sort("started, in the pool before, not now", Pilot("2.0", S, False, NOW - 60), None, plan.AWAY,
         record=PilotRecord(S, NOW - 1000, joined=True)),
    Sort("running a job", RUN, Slot("2.0", S, True, 0), plan.CLAIMED),
    Sort("running a job, no job waiting", RUN, Slot("2.0", S, True, 0), plan.CLAIMED, jobs_waiting=0),
    Sort("idle past unmatched_s while jobs wait", RUN, Slot("2.0", S, False, 400), plan.UNMATCHED),
    Sort("idle past idle_s while jobs wait: may match soon", RUN, Slot("2.0", S, False, 200), plan.IDLE),
    Sort("idle past idle_s, no job waiting", RUN, Slot("2.0", S, False, 130), plan.UNNEEDED, jobs_waiting=0),
    Sort("idle past idle_s, no job waiting, a schedd did not answer", RUN, Slot("2.0", S, False, 130), plan.IDLE,
         jobs_waiting=0, complete=False),
    Sort("idle, not for long", RUN, Slot("2.0", S, False, 60), plan.IDLE, jobs_waiting=0),
]


@pytest.mark.parametrize("case", SORTS, ids=[c.what for c in SORTS])
def test_sort_pilot(case: Sort) -> None:
    assert plan.sort_pilot(case.pilot, case.slot, case.record, case.jobs_waiting, case.complete, POLICY,
                           NOW) == case.kind


def test_only_pilots_idle_in_the_pool_or_at_the_ce_are_removed() -> None:
    """No kind of pilot that runs a job, or may still start or join, is among the removed."""
    assert set(plan.REMOVED) == {plan.EXPIRED, plan.UNMATCHED, plan.UNNEEDED}


# ------------------------------------------------------------------------------------------------
# 4. endings and holds

class End(NamedTuple):
    what: str
    record: PilotRecord
    ending: Optional[Ending]
    outcome: str
    policy: Policy = POLICY


ENDS = [
    End("removed by the provisioner", PilotRecord(S, 0.0, removed=True), None, plan.GONE_REMOVED),
    End("never seen in the pool, its ending not known", PilotRecord(S, 0.0), None, plan.GONE_FAILED),
    End("never seen in the pool, completed with exit code 0 after a pilot's idle time", PilotRecord(S, 0.0),
        Ending(True, 0, 1300), plan.GONE_RAN),
    End("never seen in the pool, exit code 0 too soon", PilotRecord(S, 0.0), Ending(True, 0, 600),
        plan.GONE_FAILED),
    End("never seen in the pool, a non-zero exit code", PilotRecord(S, 0.0), Ending(True, 1, 1300),
        plan.GONE_FAILED),
    End("never seen in the pool, killed by a signal", PilotRecord(S, 0.0), Ending(True, None, 1300),
        plan.GONE_FAILED),
    End("never seen in the pool, removed at the CE", PilotRecord(S, 0.0), Ending(False, 0, 1300),
        plan.GONE_FAILED),
    End("never seen in the pool, the pilot's idle time not known", PilotRecord(S, 0.0), Ending(True, 0, 1300),
        plan.GONE_FAILED, replace(POLICY, pilot_idle_s=0)),
    End("lost, already counted as a failure", PilotRecord(S, 0.0, lost=True), None, plan.GONE_NOTHING),
    End("in the pool, never ran a job while jobs waited", PilotRecord(S, 0.0, joined=True, waited=True), None,
        plan.GONE_UNMATCHED),
    End("in the pool, ran a job", PilotRecord(S, 0.0, joined=True, served=True, waited=True), None,
        plan.GONE_NOTHING),
    End("in the pool, no job waited", PilotRecord(S, 0.0, joined=True), None, plan.GONE_NOTHING),
]


@pytest.mark.parametrize("case", ENDS, ids=[c.what for c in ENDS])
def test_ending_of(case: End) -> None:
    assert plan.ending_of(case.record, case.ending, case.policy) == case.outcome


class Hold(NamedTuple):
    what: str
    before: Optional[GroupRecord]
    jobs_waiting: int
    unmatched: int
    after: Optional[Tuple[float, int]]
    """(unmatched_at, unmatched_waiting) after; None: no record."""


HOLDS = [
    Hold("nothing to hold", None, 40, 0, None),
    Hold("pilots idled while jobs waited: held", None, 40, 2, (NOW, 40)),
    Hold("held, the same jobs wait", GroupRecord(NOW - 60, 40), 40, 0, (NOW - 60, 40)),
    Hold("held, fewer jobs wait: the fewest remembered", GroupRecord(NOW - 60, 40), 30, 0, (NOW - 60, 30)),
    Hold("held, more jobs wait: they may match", GroupRecord(NOW - 60, 40), 41, 0, (0.0, 0)),
    Hold("held, its jobs are gone", GroupRecord(NOW - 60, 40), 0, 0, (0.0, 0)),
]


@pytest.mark.parametrize("case", HOLDS, ids=[c.what for c in HOLDS])
def test_hold(case: Hold) -> None:
    memory = History({}, {S: replace(case.before)} if case.before else {})
    plan.hold(memory, S, case.jobs_waiting, case.unmatched, NOW)
    record = memory.groups.get(S)
    assert (None if record is None else (record.unmatched_at, record.unmatched_waiting)) == case.after


# ------------------------------------------------------------------------------------------------
# 5. withdraw

class Withdraw(NamedTuple):
    what: str
    work: Work
    wanted: int
    expected: Tuple[int, int]
    """(surplus, unplaced)."""
    complete: bool = True


WITHDRAWALS = [
    Withdraw("supply meets demand", work(waiting=5), 5, (0, 0)),
    Withdraw("more on their way than the jobs need", work(waiting=5), 2, (3, 0)),
    Withdraw("supply in the pool beyond the jobs: only those not started go", work(waiting=2, idle=5), 3, (2, 0)),
    Withdraw("a schedd did not answer: none for lack of demand", work(waiting=5), 0, (0, 0), complete=False),
    Withdraw("the cluster does not place them, supply short: down to ramp_start", work(waiting=6, stuck=1), 40,
             (0, 3)),
    Withdraw("the cluster does not place them, supply enough: down to ramp_start all the same",
             work(waiting=50, stuck=10), 50, (0, 47)),
    Withdraw("the cluster does not place them, more than needed: the surplus, then down to ramp_start",
             work(waiting=50, stuck=10), 20, (30, 17)),
    Withdraw("held pilots: the cluster does not place them", work(waiting=5, held=1), 40, (0, 2)),
    Withdraw("waiting past start_s, no more than ramp_start: none", work(waiting=3, stuck=3), 40, (0, 0)),
]


@pytest.mark.parametrize("case", WITHDRAWALS, ids=[c.what for c in WITHDRAWALS])
def test_withdrawals(case: Withdraw) -> None:
    assert plan.withdrawals(case.work, case.wanted, case.complete, POLICY) == case.expected


# ------------------------------------------------------------------------------------------------
# 6. back-off

class Back(NamedTuple):
    what: str
    work: Work
    record: Optional[GroupRecord]
    want: Optional[int]
    """None: nothing holds it back."""
    note: str = ""
    retry: bool = False


BACKS = [
    Back("nothing holds it back", work(), None, None),
    Back("a pilot waits past start_s: none", work(waiting=3, stuck=1), None, 0, "to start"),
    Back("held back for jobs that do not match", work(), GroupRecord(NOW - 60, 40), 0, "do not match"),
    Back("held back, pilots still in supply: none even after retry_s", work(idle=1), GroupRecord(NOW - 4000, 40),
         0, "do not match"),
    Back("held back, retry_s passed: one pilot tries", work(), GroupRecord(NOW - 4000, 40), 1, "tries again",
         retry=True),
    Back("pilots ended without joining: none within the back-off", work(),
         GroupRecord(failures=2, failed_at=NOW - 60), 0, "without joining"),
    Back("pilots ended without joining, the back-off over: one", work(),
         GroupRecord(failures=2, failed_at=NOW - 200), 1),
    Back("pilots ended without joining, one on its way: none", work(waiting=1),
         GroupRecord(failures=2, failed_at=NOW - 200), 0, "without joining"),
]


@pytest.mark.parametrize("case", BACKS, ids=[c.what for c in BACKS])
def test_back_off(case: Back) -> None:
    gate = plan.back_off(case.work, case.record, POLICY, NOW)
    assert (None if gate is None else gate.want) == case.want
    if gate is not None:
        assert case.note in gate.note and gate.retry == case.retry


@pytest.mark.parametrize("failures, wait", [(1, 60), (2, 120), (3, 240), (4, 300), (40, 300)])
def test_the_back_off_doubles_up_to_its_most(failures: int, wait: int) -> None:
    gate = plan.back_off(work(), GroupRecord(failures=failures, failed_at=NOW - wait + 1), POLICY, NOW)
    assert gate is not None and gate.want == 0
    gate = plan.back_off(work(), GroupRecord(failures=failures, failed_at=NOW - wait), POLICY, NOW)
    assert gate is not None and gate.want == 1


# ------------------------------------------------------------------------------------------------
# 7. ramp

class Ramp(NamedTuple):
    what: str
    work: Work
    wanted: int
    want: int
    unplaced: int = 0
    """The group's :attr:`GroupRecord.unplaced` before."""
    after: int = 0
    """... and after."""


RAMPS = [
    Ramp("nothing yet: ramp_start", work(), 40, 3),
    Ramp("never more than the jobs want", work(), 2, 2),
    Ramp("first pilots on their way: wait for them", work(waiting=3), 40, 0),
    Ramp("first pilots booting: wait for them", work(booting=3), 40, 0),
    Ramp("pilots in the pool: ramp_factor on their way per pilot", work(busy=2), 100, 20),
    Ramp("the ramp counts those on their way", work(busy=2, waiting=5), 100, 15),
    Ramp("idle pilots in the pool count for the ramp and as supply", work(idle=2, busy=1), 100, 30),
    Ramp("lost pilots do not count for the ramp", work(busy=2, lost=2), 40, 3),
    Ramp("early pilots are on their way", work(early=2, joined=1, busy=1), 40, 8),
    Ramp("after pilots went unplaced: ramp_start, then twice as many", work(busy=100), 400, 3, unplaced=3,
         after=6),
    Ramp("the limit after unplaced pilots counts those on their way", work(busy=100, waiting=4), 400, 2,
         unplaced=6, after=12),
    Ramp("the limit after unplaced pilots ends where the ramp's own is lower", work(busy=1), 400, 8,
         unplaced=8, after=0),
]


@pytest.mark.parametrize("case", RAMPS, ids=[c.what for c in RAMPS])
def test_ramp(case: Ramp) -> None:
    record = GroupRecord(unplaced=case.unplaced) if case.unplaced else None
    assert plan.ramp(case.work, case.wanted, record, POLICY) == case.want
    assert (record.unplaced if record else 0) == case.after


# ------------------------------------------------------------------------------------------------
# 8. share

class Share(NamedTuple):
    what: str
    wants: Dict[str, int]
    alive: Dict[str, int]
    submits: Dict[str, int]
    policy: Policy = POLICY
    capped: str = ""


SHARES = [
    Share("within the caps: what each wants", {S: 3, L: 2}, {}, {S: 3, L: 2}),
    Share("cap on pilots not started: turns, fewest first", {S: 5, L: 5}, {S: 0, L: 2}, {S: 3, L: 1},
          replace(POLICY, max_starting=4), "waiting to start"),
    Share("cap on all pilots counts the running ones", {S: 5}, {L: 9}, {S: 1}, replace(POLICY, max_pilots=10),
          "in all"),
    Share("cap per group", {S: 5}, {S: 2}, {S: 3}, replace(POLICY, max_pilots_per_group=5)),
]


@pytest.mark.parametrize("case", SHARES, ids=[c.what for c in SHARES])
def test_share(case: Share) -> None:
    groups = {}
    for key in set(case.wants) | set(case.alive):
        w = work(demand=case.wants.get(key, 0), busy=case.alive.get(key, 0),
                 group=SMALL if key == S else LARGE)
        w.want = case.wants.get(key, 0)
        groups[key] = w
    decision = Decision()
    plan.share(groups, case.policy, decision)
    assert {k: w.row.submit for k, w in groups.items() if w.row.submit} == case.submits
    assert case.capped in decision.capped and bool(decision.capped) == bool(case.capped)
