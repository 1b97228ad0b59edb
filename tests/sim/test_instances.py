"""The directories of one simulator process each (``podgahp_sim.instances``), which the runc runtime and
the control plane share: one is its owner's while the owner's lock is held, and the next start finds
those whose owner is gone, and those a killed start left half made."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import List

from podgahp_sim.instances import MAKING_SECONDS, clean_dead, new_instance, take


def test_a_directory_is_its_owners_while_its_lock_is_held(tmp_path: Path) -> None:
    instance = new_instance()
    assert instance.startswith("%d-" % os.getpid())
    fd = take(str(tmp_path), instance, 0o700)
    removed: List[str] = []
    try:
        assert os.listdir(tmp_path) == [instance]
        assert (tmp_path / instance / "lock").exists() and (tmp_path / instance).stat().st_mode & 0o777 == 0o700
        assert clean_dead(str(tmp_path), removed.append) == [] and removed == []
    finally:
        os.close(fd)
    assert clean_dead(str(tmp_path), removed.append) == [str(tmp_path / instance)] == removed


def test_half_made_directories_go_once_old_and_a_lockless_one_after_its_grace(tmp_path: Path) -> None:
    old, young = tmp_path / ".1-0123abcd.new", tmp_path / ".2-0123abcd.new"
    lockless, other = tmp_path / "3-0123abcd", tmp_path / "not-an-instance"
    for directory in (old, young, lockless, other):
        directory.mkdir()
    then = time.time() - MAKING_SECONDS - 1
    os.utime(old, (then, then))
    removed: List[str] = []
    assert clean_dead(str(tmp_path), removed.append, unlocked_seconds=60) == []
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in (young, lockless, other))
    assert clean_dead(str(tmp_path), removed.append) == [str(lockless)] == removed
    assert clean_dead(str(tmp_path / "absent"), removed.append) == []
