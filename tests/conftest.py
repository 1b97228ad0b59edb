"""Shared test fixtures; ``tests/`` is on sys.path so tests import ``gahp_driver``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from gahp_driver import GahpProcess, gahp_env, script


@pytest.fixture
def start_gahp(tmp_path: Path) -> Iterator[Callable[..., GahpProcess]]:
    """Start ``podgahp gahp --backend NAME`` (or a named console script) with knobs as keywords."""
    started: List[GahpProcess] = []

    def start(backend: str = "memory", program: str = "", **knobs: str) -> GahpProcess:
        argv = [script(program)] if program else [script("podgahp"), "gahp", "--backend", backend]
        proc = GahpProcess(argv, env=gahp_env(str(tmp_path), **knobs), cwd=str(tmp_path))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()
