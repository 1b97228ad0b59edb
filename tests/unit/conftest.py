"""Unit tests: state a backend keeps on disk by default (black-hole state, in the temporary
directory when no log directory is configured, or in ~/.podgahp/state when the state directory
cannot be used) stays inside each test's own directory; and no thread of podgahp or of a simulator's
own loops outlives the test that started it (a watch left running would go on asking a later test's
simulator, or load the machine a later test is timed on)."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Iterator, List, Optional, Set

import pytest

import gahp
from gahp.core import statedir
from polling import wait_until

#: Where podgahp's own code is: a thread running it (a watch, a reaper, a cancel retry...) is podgahp's.
PRODUCT = os.path.dirname(os.path.abspath(gahp.__file__)) + os.sep
#: The simulators' own threads (serving, cluster loop, clock), which their stop() joins. A thread of
#: one of their requests is not counted: a stopped simulator cuts its connection, and one held up by a
#: test's delay fault ends with it.
SIMULATOR_THREADS = ("k8s-sim-", "lancium-sim-")
#: How long a thread that is on its way out after its test (its stop seen, its last line running)
#: may take to end before it is called left running.
GRACE_SECONDS = 2.0


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "tmp"
    state.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(state))
    monkeypatch.setattr(statedir, "_fallback_path", lambda: str(tmp_path / "home" / ".podgahp" / "state"))


def _runs_product_code(frame: Optional[FrameType]) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(PRODUCT):
            return True
        frame = frame.f_back
    return False


def _ours(before: Set[threading.Thread]) -> List[threading.Thread]:
    """Threads started since ``before`` that run podgahp's code, or are a simulator's own."""
    frames = sys._current_frames()
    return [t for t in threading.enumerate() if t not in before and t.is_alive() and (
        t.name.startswith(SIMULATOR_THREADS) or _runs_product_code(frames.get(t.ident or -1)))]


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test() -> Iterator[None]:
    """Fails a test (at its teardown, after every other fixture's) that leaves a thread of podgahp or a
    simulator running: every test stops what it starts (``backend.close()``, ``sim.stop()``)."""
    before = set(threading.enumerate())
    yield
    if not _ours(before):
        return
    try:
        wait_until(lambda: not _ours(before), "threads on their way out to end", GRACE_SECONDS, 0.05)
    except AssertionError:
        frames = sys._current_frames()
        pytest.fail("threads left running by this test (close what it started): " + "; ".join(
            f"{t.name} at {_where(frames.get(t.ident or -1))}" for t in _ours(before)), pytrace=False)


def _where(frame: Optional[FrameType]) -> str:
    """The innermost line of podgahp's code a thread is at (else its innermost line)."""
    first = frame
    while frame is not None:
        if frame.f_code.co_filename.startswith(PRODUCT):
            return f"{os.path.relpath(frame.f_code.co_filename, os.path.dirname(PRODUCT))}:{frame.f_lineno}"
        frame = frame.f_back
    return f"{first.f_code.co_filename}:{first.f_lineno}" if first is not None else "?"
