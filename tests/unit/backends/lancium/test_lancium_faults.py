"""Lancium at 20 % random API faults: pilots still complete, none twice, nothing half-made."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from podgahp_sim.lancium import LanciumSim
from lancium_pilots import run

from lancium_helpers import fast_settings


@pytest.fixture
def sim() -> LanciumSim:
    # Deleted jobs stay visible ("delete pending") for the whole run, so a pilot submitted twice
    # and deleted once is still counted.
    with LanciumSim(dataclasses.replace(fast_settings(), delete_seconds=3600)) as running:
        yield running


@pytest.mark.timeout(600)
def test_pilots_complete_at_twenty_percent_faults(sim: LanciumSim, key_file: Path, tmp_path: Path) -> None:
    outcome = run(sim, str(key_file), str(tmp_path), pilots=300, rate=0.2, seed=7)
    print(outcome)
    assert outcome.faults > 0.15 * outcome.requests  # the faults did happen
    assert outcome.completed >= 0.98 * outcome.pilots, outcome
    assert outcome.twice == 0, outcome
    assert outcome.half_made == 0, outcome
