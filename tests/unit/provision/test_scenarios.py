"""podgahp's decision with its default knobs in the scenario benchmark's model world (model time, no
clock): a burst drains within 1.2x the cluster-bound ideal and faster than the peers' models, and where
jobs go away or never match it spends less idle core time than the most frugal peer model; a shape
the cluster cannot place gets a few pilots, many groups get their pilots in equal turns within the
caps, and odd requests get pilots only where they are usable."""

from __future__ import annotations

import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest

from gahp.core.config import Knobs
from gahp.provision.settings import ProvisionSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import provision_scenarios as world  # noqa: E402

SCENARIOS = {s.name: s for s in world.scenarios()}


def figures(name: str) -> Dict[str, "world.Figures"]:
    logging.getLogger("gahp").setLevel(logging.CRITICAL)
    return {p: world.run(SCENARIOS[name], p, {}) for p in world.PROVISIONERS}


def test_a_burst_drains_near_the_ideal_and_before_the_peers() -> None:
    s1 = figures("S1")
    ours, ideal = s1["podgahp"].drain_s, s1["ideal"].drain_s
    assert ours is not None and ideal is not None
    assert ours <= 1.2 * ideal
    assert all(s1[p].drain_s is None or ours <= s1[p].drain_s for p in ("PRP", "COBalD"))  # type: ignore[operator]


@pytest.mark.parametrize("name", ["S4", "S5"])
def test_no_more_idle_time_than_the_most_frugal_peer(name: str) -> None:
    found = figures(name)
    assert found["podgahp"].idle_core_h <= min(found[p].idle_core_h for p in ("PRP", "COBalD"))


def test_a_shape_the_cluster_cannot_place_gets_a_few_pilots_only() -> None:
    s3 = figures("S3")["podgahp"]
    assert s3.peak_pending <= 5 and s3.pods <= 15


@pytest.mark.parametrize("name", ["S4", "filling"])
def test_pods_the_cluster_does_not_place_are_withdrawn_down_to_the_ramp(name: str) -> None:
    """A full cluster (S4: 60 cores for 500 jobs; filling: other tenants take the room): however many
    jobs wait, at most the ramp's start of pods waits past START_SECONDS to be placed."""
    ours = figures(name)["podgahp"]
    assert 0 < ours.long_pending <= 5, ours


def pods_per_group(name: str, times: List[float]) -> List["Counter[str]"]:
    """The pods podgahp made per group by each of ``times`` (model seconds) in scenario ``name``."""
    logging.getLogger("gahp").setLevel(logging.CRITICAL)
    scenario = SCENARIOS[name]
    for job in scenario.jobs:
        job.state, job.end = "future", 0.0
    model = world.World(scenario)
    world.PROVISIONERS["podgahp"](model, {})
    found = []
    for until in times:
        model.run(until)
        found.append(Counter(pod.label for pod in model.pods))
    return found


def test_many_groups_get_their_pilots_in_equal_turns_within_the_caps() -> None:
    cap = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_NAME": "bench",
                                              "PODGAHP_PROVISION_POOL": "pool.example:9618"})).max_pilots
    for counts in pods_per_group("S6", [61.0, 200.0, 1800.0]):
        assert len(counts) == 40 and len(set(counts.values())) == 1, counts  # every group, each as many
        assert sum(counts.values()) <= cap
    s6 = figures("S6")
    assert s6["podgahp"].left == 0 and s6["podgahp"].no_job == 0


def test_odd_requests_get_pilots_only_where_usable() -> None:
    counts = pods_per_group("S7", [1800.0])[0]
    assert sorted(counts) == ["2c/2048MiB", "3c/2048MiB"], counts  # 2.0 and 2.5 cores; no pilot for the others
    s7 = figures("S7")["podgahp"]
    assert s7.drain_s is not None and s7.left == 0 and s7.pods == 100 and s7.no_job == 0
