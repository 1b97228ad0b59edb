"""Fixtures of the ``test_lancium_*`` files: a running Lancium simulator with fast clocks, an API key
file for it, and Lancium backends built from knobs (closed after the test)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from gahp.agent import Agent
from gahp.backends.lancium.backend import LanciumBackend
from factories import made_then_ended
from lancium_helpers import BackendFactory, fast_settings, knobs_for
from podgahp_sim.lancium import LanciumSim


@pytest.fixture
def sim() -> Iterator[LanciumSim]:
    with LanciumSim(fast_settings()) as running:
        yield running


@pytest.fixture
def key_file(sim: LanciumSim, tmp_path: Path) -> Path:
    path = tmp_path / "lancium.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(sim.api_key + "\n")
    return path


@pytest.fixture
def make_backend(sim: LanciumSim, key_file: Path) -> Iterator[BackendFactory]:
    """Build backends from knobs (keywords override); every one is closed afterwards."""
    yield from made_then_ended(lambda **extra: Agent(LanciumBackend.from_knobs(knobs_for(sim, key_file, **extra))),
                               Agent.close)


@pytest.fixture
def backend(make_backend: BackendFactory) -> Agent:
    return make_backend()
