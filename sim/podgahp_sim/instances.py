"""Directories of one simulator process each, under a base that other processes share: a runc
runtime's (its containers' state, volumes, logs) and a control plane's (etcd's data, certificates,
logs). Each is ``<base>/<pid>-<hex>``, held by an ``flock`` on its ``lock`` file while its owner lives.

Owns the naming, the taking (made under a temporary name and renamed with its lock held, so that no
one finds it without its holder), and the finding of those whose owner is gone (killed with -9,
say) at the next start. What such a directory holds, and how to remove what it left on the machine,
is its owner's (:mod:`.k8s.runc`, :mod:`.kube.controlplane`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
import uuid
from typing import Callable, List

_INSTANCE = re.compile(r"\d+-[0-9a-f]{8}")
_MAKING = re.compile(r"\.\d+-[0-9a-f]{8}\.new")
MAKING_SECONDS = 600.0
"""A directory still under its temporary name after this long was left by a start that was killed
(one being made holds that name for a moment only)."""


def new_instance() -> str:
    """A name of this process's own: ``<pid>-<8 hex digits>``."""
    return "%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])


def take(base: str, instance: str, mode: int) -> int:
    """Make ``base/instance`` (with ``mode``) holding its lock; the lock's descriptor, whose closing
    lets the next start remove the directory."""
    making = os.path.join(base, ".%s.new" % instance)
    os.makedirs(making, mode)
    fd = os.open(os.path.join(making, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(making, os.path.join(base, instance))
    except BaseException:
        os.close(fd)
        raise
    return fd


def clean_dead(base: str, remove: Callable[[str], None], unlocked_seconds: float = 0.0) -> List[str]:
    """Call ``remove`` on each directory of ``base`` whose owner is gone (its lock free, and held
    meanwhile), and delete those left half made; the directories given to ``remove``. One without a
    lock file is its owner's for ``unlocked_seconds`` after it was made (an owner that locks it
    only once made)."""
    removed = []
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        directory = os.path.join(base, name)
        if _MAKING.fullmatch(name) and os.path.isdir(directory):
            with contextlib.suppress(OSError):
                if time.time() - os.stat(directory).st_mtime > MAKING_SECONDS:
                    shutil.rmtree(directory, ignore_errors=True)
            continue
        if not _INSTANCE.fullmatch(name) or not os.path.isdir(directory):
            continue
        try:
            fd = os.open(os.path.join(directory, "lock"), os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its owner lives
            else:
                try:
                    if time.time() - os.stat(directory).st_mtime < unlocked_seconds:
                        continue
                except OSError:
                    continue  # gone meanwhile
            remove(directory)
            removed.append(directory)
        finally:
            if fd >= 0:
                os.close(fd)
    return removed
