"""Running a piece of a test as another local user (tests run as root): a forked child that drops to
the user's uid and gid, runs the function and reports success by its exit status. For attacks where
it matters that the attacker and the victim are two different unprivileged users (root may replace
any file, so the victim must not be root either)."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


def run_as(user: str, action: Callable[[], None]) -> None:
    """Run ``action`` in a child process as ``user``; AssertionError if it fails (its traceback on stderr)."""
    entry = pwd.getpwnam(user)
    with warnings.catch_warnings():  # the child runs only ``action``, no other thread's work
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(entry.pw_gid)
            os.setuid(entry.pw_uid)
            action()
            code = 0
        except BaseException:  # noqa: BLE001 - reported through the exit status
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"the part run as {user} failed (see its traceback above)"


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A directory like a CE's $(USER_LOG): mode 1777, reachable by every user (outside the test's own
    tmp_path, which only root can enter); removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="podgahp-shared-", dir="/tmp"))
    try:
        os.chmod(path, 0o1777)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
