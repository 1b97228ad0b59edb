"""The provisioner's decisions, one row per rule: pressure per group, caps, turns, removals."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from gahp.provision.plan import Caps, Pilot, decide
from gahp.provision.shape import Group, Shape

SMALL, LARGE, GPU = Group(Shape(1, 2048)), Group(Shape(8, 32768)), Group(Shape(4, 16384, 1))
NOW = 10_000.0
CAPS = Caps(max_idle_per_group=5, max_idle=50, max_pilots=500, remove_idle_after_s=3600)


def pilots(group: Group, idle: int = 0, running: int = 0, idle_for: float = 60) -> List[Pilot]:
    made = [Pilot(f"{i}.0", str(group), True, NOW - idle_for) for i in range(idle)]
    return made + [Pilot(f"{i}.1", str(group), False, NOW - 60) for i in range(running)]


#: (what the case is, demand, pilots, caps, submissions per group, pilots removed)
CASES: List[Tuple[str, Dict[Group, int], List[Pilot], Caps, Dict[str, int], int]] = [
    ("jobs wait, no pilots: pressure of max idle per group", {SMALL: 40}, [], CAPS, {str(SMALL): 5}, 0),
    ("never more idle pilots than waiting jobs", {SMALL: 2}, [], CAPS, {str(SMALL): 2}, 0),
    ("idle pilots count against the pressure", {SMALL: 40}, pilots(SMALL, idle=3), CAPS, {str(SMALL): 2}, 0),
    ("running pilots do not: their jobs are not the waiting ones", {SMALL: 40}, pilots(SMALL, running=30),
     CAPS, {str(SMALL): 5}, 0),
    ("pressure met: nothing", {SMALL: 40}, pilots(SMALL, idle=5), CAPS, {}, 0),
    ("no demand: no pilots, none removed", {}, pilots(SMALL, idle=4, running=2), CAPS, {}, 0),
    ("each group its own pressure", {SMALL: 40, LARGE: 3, GPU: 1}, [], CAPS,
     {str(SMALL): 5, str(LARGE): 3, str(GPU): 1}, 0),
    ("idle cap: groups take turns, most waiting first", {SMALL: 40, LARGE: 30, GPU: 20}, [],
     Caps(5, 4, 500, 0), {str(SMALL): 2, str(LARGE): 1, str(GPU): 1}, 0),
    ("total cap counts running pilots", {SMALL: 40}, pilots(LARGE, running=9), Caps(5, 50, 10, 0),
     {str(SMALL): 1}, 0),
    ("at the total cap: nothing", {SMALL: 40}, pilots(SMALL, running=10), Caps(5, 50, 10, 0), {}, 0),
    ("idle past the limit: removed, and replaced while jobs wait", {SMALL: 40},
     pilots(SMALL, idle=2, idle_for=4000), CAPS, {str(SMALL): 5}, 2),
    ("idle past the limit without demand: removed, not replaced", {},
     pilots(SMALL, idle=2, idle_for=4000), CAPS, {}, 2),
    ("running pilots are never removed", {}, pilots(SMALL, running=3), Caps(5, 50, 500, 1), {}, 0),
    ("limit 0: never removed", {}, pilots(SMALL, idle=2, idle_for=10 ** 6), Caps(5, 50, 500, 0), {}, 0),
    ("max idle per group 0: nothing", {SMALL: 40}, [], Caps(0, 50, 500, 0), {}, 0),
]


@pytest.mark.parametrize("case, demand, existing, caps, submits, removed", CASES, ids=[c[0] for c in CASES])
def test_decide(case: str, demand: Dict[Group, int], existing: List[Pilot], caps: Caps,
                submits: Dict[str, int], removed: int) -> None:
    decision = decide(demand, existing, caps, NOW)
    assert {r.key: r.submit for r in decision.rows if r.submit} == submits
    assert len(decision.remove) == removed
    idle_after = sum(r.idle + r.submit for r in decision.rows)
    total_after = idle_after + sum(r.running for r in decision.rows)
    assert idle_after <= max(caps.max_idle, sum(r.idle for r in decision.rows))
    assert total_after <= max(caps.max_pilots, len(existing) - removed)


def test_a_capped_cycle_says_which_cap() -> None:
    assert "idle" in decide({SMALL: 40}, [], Caps(5, 2, 500, 0), NOW).capped
    assert "in all" in decide({SMALL: 40}, pilots(SMALL, running=3), Caps(5, 50, 3, 0), NOW).capped
    assert decide({SMALL: 4}, [], CAPS, NOW).capped == ""


def test_pilots_of_groups_without_demand_are_reported() -> None:
    decision = decide({SMALL: 1}, pilots(LARGE, idle=1, running=2), CAPS, NOW)
    rows = {r.key: (r.demand, r.idle, r.running, r.submit) for r in decision.rows}
    assert rows == {str(SMALL): (1, 0, 0, 1), str(LARGE): (0, 1, 2, 0)}
