"""The black-hole guard: a queue whose pilots keep failing closes for a back-off that doubles while
failures go on, opens again after it, resets on a success, and keeps its state across a restart."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, List

import pytest

from gahp.rules.blackhole import Guard, GuardSettings
from gahp.core.config import Knobs
from gahp.core.errors import BackendError


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def settings(tmp_path: Path, **knobs: str) -> GuardSettings:
    values = {"PODGAHP_BLACKHOLE_FAILURES": "3", "PODGAHP_BLACKHOLE_WINDOW_SECONDS": "60",
              "PODGAHP_BLACKHOLE_BACKOFF_SECONDS": "100", "PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS": "250",
              "PODGAHP_STATE_DIR": str(tmp_path)}
    values.update(knobs)
    return GuardSettings.from_knobs(Knobs(values))


def fail(guard: Guard, n: int, queue: str = "cpu") -> None:
    for _ in range(n):
        guard.outcome(queue, True, 'image "x": ErrImagePull')


def test_closes_after_the_threshold_and_names_queue_cause_and_time(tmp_path: Path) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "ce-alice-k8s", clock)
    fail(guard, 2)
    guard.check("cpu")  # two failures: still open
    fail(guard, 1)
    with pytest.raises(BackendError) as refused:
        guard.check("cpu")
    assert "queue cpu is closed as a black hole" in str(refused.value)
    assert "ErrImagePull" in str(refused.value) and "100 s more" in str(refused.value)
    guard.check("gpu")  # other queues are not concerned
    health = {h.queue: h for h in guard.health()}
    assert health["cpu"].closed and health["cpu"].closed_count == 1


@pytest.mark.parametrize("steps, closed_for", [
    # (each step: seconds to wait, then failures), back-off of the last closing
    ([(0, 3)], 100),
    ([(0, 3), (100, 3)], 200),  # closes again without a success in between: doubled
    ([(0, 3), (100, 3), (200, 3)], 250),  # capped by PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS
])
def test_backoff_doubles_while_failures_go_on(tmp_path: Path, steps: List[Any], closed_for: float) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "s", clock)
    for wait, failures in steps:
        clock.now += wait
        fail(guard, failures)
    assert guard.health()[0].closed_until - clock.now == closed_for


def test_opens_after_the_backoff_and_counts_only_new_failures(tmp_path: Path) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "s", clock)
    fail(guard, 3)
    clock.now += 100
    guard.check("cpu")  # open again
    fail(guard, 2)
    guard.check("cpu")  # the failures that closed it do not count again
    fail(guard, 1)
    assert guard.health()[0].closed_until - clock.now == 200  # closed again, no success between: doubled


def test_a_success_resets_the_doubling_and_counts_in_the_rate(tmp_path: Path) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "s", clock)
    fail(guard, 3)
    clock.now += 100
    guard.outcome("cpu", False)
    fail(guard, 3)  # 3 of 4 recent outcomes failed: below PODGAHP_BLACKHOLE_FAILURE_RATE (0.8)
    guard.check("cpu")
    fail(guard, 1)  # 4 of 5
    assert guard.health()[0].closed_until - clock.now == 100


def test_old_failures_leave_the_window(tmp_path: Path) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "s", clock)
    fail(guard, 2)
    clock.now += 61
    fail(guard, 1)
    guard.check("cpu")


def test_state_survives_a_restart_and_a_foreign_file_is_ignored(tmp_path: Path) -> None:
    clock = Clock()
    fail(Guard(settings(tmp_path), "ce-alice-k8s", clock), 3)
    with pytest.raises(BackendError):
        Guard(settings(tmp_path), "ce-alice-k8s", clock).check("cpu")
    Guard(settings(tmp_path), "ce-bob-k8s", clock).check("cpu")  # another user's state is their own
    path = tmp_path / "PodgahpBlackholes.ce-alice-k8s.json"
    assert json.loads(path.read_text())["queues"]["cpu"]["level"] == 1
    link = tmp_path / "PodgahpBlackholes.ce-carol-k8s.json"
    os.symlink(path, link)  # planted by someone else: not read
    Guard(settings(tmp_path), "ce-carol-k8s", clock).check("cpu")


@pytest.mark.parametrize("content", ["", "not json", "[1, 2]", '{"queues": {"cpu": {"outcomes": "x", '
                                     '"closed_until": "soon", "level": -4}}}', '{"queues": 7}'])
def test_a_damaged_state_file_starts_afresh(tmp_path: Path, content: str) -> None:
    (tmp_path / "PodgahpBlackholes.s.json").write_text(content)
    guard = Guard(settings(tmp_path), "s", Clock())
    guard.check("cpu")
    fail(guard, 3)
    with pytest.raises(BackendError):
        guard.check("cpu")


def test_disabled_guard_never_closes(tmp_path: Path) -> None:
    guard = Guard(settings(tmp_path, PODGAHP_BLACKHOLE_ENABLED="false"), "s", Clock())
    fail(guard, 50)
    guard.check("cpu")
    assert not list(tmp_path.glob("PodgahpBlackholes.*"))


def test_the_state_file_is_written_once_a_second_and_at_once_when_a_queue_closes(tmp_path: Path) -> None:
    clock = Clock()
    guard = Guard(settings(tmp_path), "s", clock)
    path = tmp_path / "PodgahpBlackholes.s.json"

    def outcomes() -> int:
        return len(json.loads(path.read_text())["queues"]["cpu"]["outcomes"])

    guard.outcome("cpu", False)
    guard.outcome("cpu", False)  # the same second: kept in memory
    assert outcomes() == 1
    clock.now += 1
    guard.outcome("cpu", False)
    assert outcomes() == 3
    clock.now += 61  # the successes leave the window
    fail(guard, 3)  # closes the queue: written at once, whatever the second
    assert json.loads(path.read_text())["queues"]["cpu"]["level"] == 1
