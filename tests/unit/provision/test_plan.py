"""The provisioner's decisions, one row per rule: supply counted from the CE and the pool, the ramp,
what the cluster does not place, groups held back (jobs that do not match, pilots that never join),
removals of pilots that have not started or idle in the pool, caps and turns."""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, NamedTuple, Optional, Sequence

import pytest

from gahp.provision.history import GroupRecord, History, PilotRecord
from gahp.provision.plan import Ending, Pilot, Policy, Slot, decide
from gahp.provision.shape import Group, Shape

SMALL, LARGE, GPU = Group(Shape(1, 2048)), Group(Shape(8, 32768)), Group(Shape(4, 16384, 1))
S = str(SMALL)
NOW = 100_000.0
POLICY = Policy(max_pilots=500, max_pilots_per_group=400, max_starting=300, ramp_start=3, ramp_factor=10,
                pressure_percent=100, start_s=120, boot_s=300, unmatched_s=300, idle_s=120, retry_s=3600,
                backoff_max_s=300, interval_s=60, remove_idle_after_s=7200, pilot_idle_s=1200)


def waiting(group: Group = SMALL, n: int = 3, age: float = 30, held: bool = False, first: int = 0) -> List[Pilot]:
    """Pilots idle at the CE (not started)."""
    return [Pilot(f"1{first + i}.0", str(group), True, NOW - age, held) for i in range(n)]


def running(group: Group = SMALL, n: int = 1, age: float = 600, first: int = 0) -> List[Pilot]:
    return [Pilot(f"2{first + i}.0", str(group), False, NOW - age) for i in range(n)]


def slots(pilots: Sequence[Pilot], claimed: bool = False, idle_s: float = 10, group: Optional[str] = None,
          served: bool = False) -> List[Slot]:
    return [Slot(p.job_id, group or p.group, claimed, 0 if claimed else idle_s, served) for p in pilots]


def held_back(key: str = S, at: float = NOW - 60, jobs: int = 40, failures: int = 0) -> History:
    record = GroupRecord(unmatched_at=at if not failures else 0.0, unmatched_waiting=jobs if not failures else 0,
                         failures=failures, failed_at=at if failures else 0.0)
    return History({}, {key: record})


class Case(NamedTuple):
    what: str
    demand: Dict[Group, int]
    pilots: List[Pilot]
    slots: List[Slot]
    submits: Dict[str, int]
    removed: int = 0
    history: Optional[History] = None
    policy: Policy = POLICY
    complete: bool = True
    note: str = ""
    endings: Optional[Dict[str, Ending]] = None


IDLE3 = running(n=3)
BUSY2 = running(n=2, first=5)


def gone(joined: bool = False, failures: int = 0) -> History:
    """A pilot (9.0) submitted a while ago, gone from the CE's queue since the last cycle."""
    history = held_back(failures=failures, at=NOW - 60) if failures else History()
    history.pilots["9.0"] = PilotRecord(S, NOW - 2000, joined=joined)
    return history


def ended(completed: bool = True, exit_code: Optional[int] = 0, ran_s: float = 1300) -> Dict[str, Ending]:
    return {"9.0": Ending(completed, exit_code, ran_s)}

CASES = [
    Case("jobs wait, nothing started: the group's first pilots", {SMALL: 40}, [], [], {S: 3}),
    Case("never more pilots than jobs waiting", {SMALL: 2}, [], [], {S: 2}),
    Case("pressure: pilots per job waiting", {SMALL: 40}, running(n=1), slots(running(n=1), claimed=True), {S: 10},
         policy=replace(POLICY, pressure_percent=25)),
    Case("first pilots on their way: the next ones wait for how the cluster takes them", {SMALL: 40}, waiting(),
         [], {}),
    Case("pilots started: as many on their way as ramp_factor per pilot started", {SMALL: 100}, BUSY2,
         slots(BUSY2, claimed=True), {S: 20}),
    Case("the ramp counts the pilots already on their way", {SMALL: 100}, BUSY2 + waiting(n=5),
         slots(BUSY2, claimed=True), {S: 15}),
    Case("a burst gets the rest at once when its first pilots started", {SMALL: 1000},
         running(n=10), slots(running(n=10), claimed=True), {S: 100}),
    Case("idle pilots in the pool are supply", {SMALL: 5}, IDLE3 + BUSY2, slots(IDLE3) + slots(BUSY2, claimed=True),
         {S: 2}),
    Case("pilots started, not yet in the pool, are supply", {SMALL: 5}, running(n=4, age=60) + BUSY2,
         slots(BUSY2, claimed=True), {S: 1}),
    Case("the first pilots started, none in the pool yet: the next ones wait for them to join", {SMALL: 40},
         running(n=3, age=60), [], {}),
    Case("pilots running jobs are not supply: their jobs are not the waiting ones", {SMALL: 5},
         BUSY2, slots(BUSY2, claimed=True), {S: 5}),
    Case("supply meets the jobs: nothing", {SMALL: 3}, IDLE3, slots(IDLE3), {}),
    Case("a pilot waiting to start past start_s: the cluster does not place more; the rest withdrawn",
         {SMALL: 100}, BUSY2 + waiting(n=1, age=200) + waiting(n=5, age=30, first=1), slots(BUSY2, claimed=True),
         {}, removed=3, note="to start"),
    Case("a pilot waiting to start past start_s, supply enough for the jobs: withdrawn down to ramp_start all the "
         "same", {SMALL: 50}, BUSY2 + waiting(n=10, age=200) + waiting(n=40, age=30, first=10),
         slots(BUSY2, claimed=True), {}, removed=47, note="to start"),
    Case("placed again after pilots went unplaced: ramp_start on their way, not the ramp's own", {SMALL: 100},
         running(n=20), slots(running(n=20), claimed=True), {S: 3},
         history=History({}, {S: GroupRecord(unplaced=3)})),
    Case("held pilots: the cluster does not place more", {SMALL: 40}, BUSY2 + waiting(n=1, held=True),
         slots(BUSY2, claimed=True), {}, note="to start"),
    Case("pilots not started and no longer needed are withdrawn", {SMALL: 2}, waiting(n=5), [], {}, removed=3),
    Case("no jobs: every pilot not started is withdrawn", {}, waiting(n=4) + BUSY2, slots(BUSY2, claimed=True), {},
         removed=4),
    Case("idle at the CE, its startd in the pool running a job (the CE not yet told): not withdrawn", {},
         waiting(n=2), slots(waiting(n=1), claimed=True), {}, removed=1),
    Case("idle at the CE, its startd in the pool unclaimed: supply, not withdrawn", {SMALL: 1},
         waiting(n=2), slots(waiting(n=1)), {}, removed=1),
    Case("idle at the CE, a slot of another group names it: withdrawn", {}, waiting(n=1),
         slots(waiting(n=1), group=str(LARGE), claimed=True), {}, removed=1),
    Case("a schedd did not answer: none withdrawn for lack of demand", {}, waiting(n=4), [], {}, complete=False),
    Case("idle in the pool, no job of its group waiting, past idle_s: removed", {}, IDLE3, slots(IDLE3, idle_s=130),
         {}, removed=3),
    Case("idle in the pool, no job waiting, but not for long: kept", {}, IDLE3, slots(IDLE3, idle_s=60), {}),
    Case("idle in the pool past idle_s while jobs wait: kept (they may match soon)", {SMALL: 5}, IDLE3,
         slots(IDLE3, idle_s=200), {S: 2}),
    Case("idle in the pool past unmatched_s while jobs wait: the jobs do not match; removed, none added",
         {SMALL: 40}, IDLE3, slots(IDLE3, idle_s=400), {}, removed=3, note="do not match"),
    Case("held back: no pilots while the same jobs wait", {SMALL: 40}, [], [], {}, history=held_back(),
         note="do not match"),
    Case("held back: more jobs wait, they may match", {SMALL: 41}, [], [], {S: 3}, history=held_back()),
    Case("held back: after retry_s one pilot tries", {SMALL: 40}, [], [], {S: 1},
         history=held_back(at=NOW - 4000), note="tries again"),
    Case("held back: one of its pilots runs a job: the hold ends", {SMALL: 40}, BUSY2, slots(BUSY2, claimed=True),
         {S: 20}, history=held_back()),
    Case("held back: its jobs are gone: the hold ends", {}, [], [], {}, history=held_back()),
    Case("pilots ended without joining: one at a time after a back-off", {SMALL: 40}, [], [], {},
         history=held_back(failures=2, at=NOW - 60), note="without joining"),
    Case("after the back-off: one pilot", {SMALL: 40}, [], [], {S: 1}, history=held_back(failures=2, at=NOW - 200)),
    Case("pilots in the pool for long do not hide new ones that never join", {SMALL: 40}, BUSY2,
         slots(BUSY2, claimed=True), {}, note="without joining",
         history=History({"25.0": PilotRecord(S, 0.0, joined=True), "26.0": PilotRecord(S, 0.0, joined=True),
                          "9.0": PilotRecord(S, NOW - 100)}, {})),
    Case("gone, never seen in the pool, its ending not known: never joined, a failure", {SMALL: 40}, [], [], {},
         history=gone(), note="without joining"),
    Case("gone, seen in the pool in an earlier cycle: not a failure", {SMALL: 40}, [], [], {S: 3},
         history=gone(joined=True)),
    Case("gone unseen, completed with exit code 0 after a pilot's idle time: it joined and left, not a failure",
         {SMALL: 40}, [], [], {S: 3}, history=gone(), endings=ended()),
    Case("gone unseen, completed with exit code 0 after a pilot's idle time: its group's back-off ends",
         {SMALL: 40}, [], [], {S: 3}, history=gone(failures=2), endings=ended()),
    Case("gone unseen, exit code 0 before a pilot's idle time: never joined", {SMALL: 40}, [], [], {},
         history=gone(), endings=ended(ran_s=600), note="without joining"),
    Case("gone unseen, a non-zero exit code after a pilot's idle time: never joined", {SMALL: 40}, [], [], {},
         history=gone(), endings=ended(exit_code=1), note="without joining"),
    Case("gone unseen, killed by a signal: never joined", {SMALL: 40}, [], [], {},
         history=gone(), endings=ended(exit_code=None), note="without joining"),
    Case("gone unseen, removed at the CE (not completed): never joined", {SMALL: 40}, [], [], {},
         history=gone(), endings=ended(completed=False), note="without joining"),
    Case("gone unseen, the pilot's idle time not known: never joined", {SMALL: 40}, [], [], {},
         history=gone(), endings=ended(), policy=replace(POLICY, pilot_idle_s=0), note="without joining"),
    Case("started long ago, never in the pool: not supply, and a failure", {SMALL: 40}, running(n=2, age=400), [],
         {}, note="without joining"),
    Case("running pilots are never removed", {}, BUSY2, slots(BUSY2, claimed=True), {}),
    Case("a slot naming a pilot that does not run at the CE is not supply", {SMALL: 3}, waiting(n=1, age=10),
         slots(waiting(n=1, age=10)), {}),
    Case("a slot naming another group is not supply", {SMALL: 4}, running(n=3, age=60) + BUSY2,
         slots(running(n=3, age=60), group=str(LARGE), idle_s=400) + slots(BUSY2, claimed=True), {S: 1}),
    Case("two ads for one pilot: one pilot, busy if either says so", {SMALL: 4}, IDLE3,
         slots(IDLE3) + slots(IDLE3, claimed=True), {S: 4}),
    Case("idle at the CE past remove_idle_after_s: removed", {SMALL: 40}, waiting(n=2, age=8000, held=True), [],
         {S: 3}, removed=2),
    Case("each group its own ramp", {SMALL: 40, LARGE: 3, GPU: 1}, [], [], {S: 3, str(LARGE): 3, str(GPU): 1}),
    Case("caps on pilots not started: turns, fewest pilots first", {SMALL: 40, LARGE: 30, GPU: 20},
         running(LARGE, n=1) + running(GPU, n=1, first=1),
         slots(running(LARGE, n=1) + running(GPU, n=1, first=1), claimed=True),
         {S: 3, str(LARGE): 2, str(GPU): 2}, policy=replace(POLICY, max_starting=7)),
    Case("cap on all pilots counts the running ones", {SMALL: 40}, running(LARGE, n=9),
         slots(running(LARGE, n=9), claimed=True), {S: 1}, policy=replace(POLICY, max_pilots=10)),
    Case("cap per group", {SMALL: 400}, BUSY2, slots(BUSY2, claimed=True), {S: 3},
         policy=replace(POLICY, max_pilots_per_group=5), note="per group"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_decide(case: Case) -> None:
    decision = decide(case.demand, case.demand, case.pilots, case.slots, case.policy, case.history or History(),
                      NOW, complete=case.complete, endings=case.endings)
    assert {r.key: r.submit for r in decision.rows if r.submit} == case.submits
    assert len(decision.remove) == case.removed
    running_ids = {p.job_id for p in case.pilots if not p.idle}
    assert not running_ids & {p.job_id for p in decision.remove if not any(
        s.pilot_id == p.job_id and not s.claimed for s in case.slots)}, "a busy or unseen running pilot was removed"
    in_pool = {(s.pilot_id, s.group) for s in case.slots}
    assert not [p for p in decision.remove if p.idle and (p.job_id, p.group) in in_pool], \
        "a pilot idle at the CE whose startd is in the pool was withdrawn"
    if case.note:
        assert any(case.note in r.note for r in decision.rows), [r.note for r in decision.rows]
    total = sum(r.alive for r in decision.rows) + decision.submissions
    assert total <= max(case.policy.max_pilots, len(case.pilots))


def test_a_cycle_says_which_cap() -> None:
    assert "not started" not in decide({SMALL: 40}, {SMALL: 40}, [], [], replace(POLICY, max_starting=2),
                                       History(), NOW).capped
    assert "waiting to start" in decide({SMALL: 40}, {SMALL: 40}, [], [], replace(POLICY, max_starting=2),
                                        History(), NOW).capped
    assert "in all" in decide({SMALL: 40}, {SMALL: 40}, running(n=3), slots(running(n=3), claimed=True),
                              replace(POLICY, max_pilots=3), History(), NOW).capped
    assert decide({SMALL: 2}, {SMALL: 2}, [], [], POLICY, History(), NOW).capped == ""


def test_pilots_of_groups_without_demand_are_reported() -> None:
    decision = decide({SMALL: 1}, {SMALL: 1}, running(LARGE, n=2), slots(running(LARGE, n=2), claimed=True),
                      POLICY, History(), NOW)
    rows = {r.key: (r.demand, r.busy, r.submit) for r in decision.rows}
    assert rows == {S: (1, 0, 1), str(LARGE): (0, 2, 0)}


def test_what_became_of_pilots_is_remembered() -> None:
    """A pilot that ended without joining puts its group in back-off; one that idled in the pool while
    jobs waited holds it back; one that ran a job clears both; removed pilots say nothing."""
    history = History({"7.0": PilotRecord(S, NOW - 600), "8.0": PilotRecord(S, NOW - 600, joined=True, waited=True),
                       "9.0": PilotRecord(S, NOW - 600, removed=True)}, {})
    after = decide({SMALL: 40}, {SMALL: 40}, [], [], POLICY, history, NOW).history
    assert after.pilots == {} and after.groups[S].failures == 1 and after.groups[S].unmatched_at == NOW
    served = History({"8.0": PilotRecord(S, NOW - 600, joined=True, served=True, waited=True)}, {})
    assert decide({SMALL: 40}, {SMALL: 40}, [], [], POLICY, served, NOW).history.groups == {}


def test_the_history_holds_only_the_pilots_and_groups_of_the_cycle() -> None:
    history = History({f"{i}.0": PilotRecord(S, 0.0, removed=True) for i in range(1000)},
                      {f"old{i}": GroupRecord(unmatched_at=1.0) for i in range(1000)})
    after = decide({SMALL: 40}, {SMALL: 40}, running(n=2), [], POLICY, history, NOW).history
    assert set(after.pilots) == {"20.0", "21.0"} and set(after.groups) <= {S}


def test_a_stream_of_pilots_that_never_join_backs_off() -> None:
    """Pilots that end before any cycle sees them run: the group gets one at a time, less and less often."""
    history, submitted, now = History(), [], NOW
    for cycle in range(60):
        decision = decide({SMALL: 40}, {SMALL: 40}, [], [], POLICY, history, now)
        history = decision.history
        for i in range(decision.submissions):  # as the service remembers what it submits
            history.pilots[f"{cycle}.{i}"] = PilotRecord(S, now)
        submitted.append(decision.submissions)
        now += POLICY.interval_s
    times = [i for i, n in enumerate(submitted) if n]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert submitted[0] == 3 and all(n <= 1 for n in submitted[1:]), submitted
    assert gaps == sorted(gaps) and gaps[-1] >= POLICY.backoff_max_s // POLICY.interval_s, gaps
    assert sum(submitted) <= 3 + 60 * POLICY.interval_s // POLICY.backoff_max_s + 4, submitted
