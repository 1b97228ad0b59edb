"""podgahp's decision with its default knobs in the scenario benchmark's model world (model time, no
clock): a burst drains within 1.2x the cluster-bound ideal and faster than the peers' models, and where
jobs go away or never match it spends less idle core time than the most frugal peer model."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Dict

import pytest

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
    assert s3.peak_pending <= 10 and s3.pods <= 30
