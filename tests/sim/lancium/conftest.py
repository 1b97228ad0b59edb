"""Fixtures of the ``test_lancium_sim_*`` modules: a running Lancium simulator with a fast clock, and
an :class:`~lancium_api.ApiClient` for it that checks every exchange against the description."""

from __future__ import annotations

from typing import Iterator

import pytest

from lancium_api import ApiClient, fast_settings
from podgahp_sim.lancium import LanciumSim


@pytest.fixture
def sim() -> Iterator[LanciumSim]:
    """A running simulator with a fast clock; tests change ``sim.settings`` for other knobs."""
    with LanciumSim(fast_settings()) as running:
        yield running


@pytest.fixture
def api(sim: LanciumSim) -> Iterator[ApiClient]:
    client = ApiClient(sim)
    try:
        yield client
    finally:
        client.close()
