"""Each user's own directory for what a GAHP keeps between runs (job records, figures, black-hole state).

The GAHPs of every job owner share one directory, ``PODGAHP_STATE_DIR`` (on a CE ``$(USER_LOG)``, mode
1777), where any user can create any name: a file name fixed in advance can be pre-created by another
user, which then blocks the owner's saves or passes the other user's bytes off as the owner's. So a
user's files live in a directory of their own, ``Podgahp.<user>.<random>``, made with ``mkdtemp`` (a name
nobody can take first) and used only while it is a real directory (not a link) owned by the user and
writable by nobody else. Inside it only that user (and root) can create or replace anything.

Readers (``podgahp reap`` and ``podgahp health``, as the condor user) pick the same directory per user
by the same rule: the directory's owner must be the user its name says (or root), and when a user has
several (two GAHPs of the user made one at the same moment), the one with the smallest name counts
for writers and readers alike. A shared directory that is writable by all but lacks the sticky bit
(anyone could rename a user's directory away) is not used.

When the shared directory cannot be used, the GAHP keeps its state in ``~/.podgahp/state`` instead
(its own, but not seen by ``podgahp reap``) and says so in its log.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import tempfile
import threading
from typing import Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

PREFIX = "Podgahp."
#: Most entries of the shared directory looked at (a user can fill it with names).
MAX_ENTRIES = 100_000

_lock = threading.Lock()
_found: Dict[Tuple[str, str, int], str] = {}


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _shared_dir_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot hold per-user directories (None: it can)."""
    try:
        info = os.stat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        return f"{path} is writable by every user but has no sticky bit (chmod 1777 it)"
    return None


def _usable(path: str, uid: int) -> bool:
    """A real directory (not a link), owned by ``uid``, writable by its owner alone."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == uid
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _user_of(name: str) -> Optional[str]:
    """The user part of ``Podgahp.<user>.<random>`` (None for another name)."""
    if not name.startswith(PREFIX) or name.count(".") < 2:
        return None
    user = name[len(PREFIX):].rsplit(".", 1)[0]
    return user or None


def _entries(path: str) -> List[str]:
    names: List[str] = []
    with os.scandir(path) as it:
        for entry in it:
            if entry.name.startswith(PREFIX):
                names.append(entry.name)
            if len(names) >= MAX_ENTRIES:
                break
    return sorted(names)


def _candidates(shared: str, user: str, uid: int) -> List[str]:
    return [n for n in _entries(shared) if _user_of(n) == user and _usable(os.path.join(shared, n), uid)]


def own_directory(shared: str, user: str) -> str:
    """This user's directory in ``shared`` (found or made, mode 0755); OSError when there can be none."""
    uid = os.getuid()
    key = (os.path.abspath(shared), user, uid)
    with _lock:
        known = _found.get(key)
        if known is not None and _usable(known, uid):
            return known
        problem = _shared_dir_problem(key[0])
        if problem is not None:
            raise OSError(problem)
        names = _candidates(key[0], user, uid)
        if not names:
            made = tempfile.mkdtemp(prefix=f"{PREFIX}{user}.", dir=key[0])
            os.chmod(made, 0o755)  # podgahp reap (condor) reads the figures; nobody else writes
            names = _candidates(key[0], user, uid)
            if os.path.basename(made) not in names[:1]:  # another GAHP of this user made one first
                try:
                    os.rmdir(made)
                except OSError as e:
                    log.debug("cannot remove %s: %s", made, e)
        if not names:
            raise OSError(f"{key[0]}: no directory of {user} could be made there")
        found = _found[key] = os.path.join(key[0], names[0])
        return found


def _fallback_path() -> str:
    return os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".podgahp", "state")


def state_directories(shared: str, user: str) -> List[str]:
    """Where this user's state is written (the first) and may be found (all): the own directory in
    ``shared`` when it can be used, else ``~/.podgahp/state`` (also searched when it exists, for what
    was written there while ``shared`` could not be used). Empty when neither can be used."""
    uid = os.getuid()
    fallback = _fallback_path()
    try:
        found = [own_directory(shared, user)]
    except OSError as e:
        try:
            os.makedirs(fallback, mode=0o700, exist_ok=True)
        except OSError as e2:
            log.warning("no state directory can be used: %s; %s", e, e2)
            return []
        if not _usable(fallback, uid):
            log.warning("no state directory can be used: %s; %s is not a directory of this user "
                        "writable by it alone", e, fallback)
            return []
        log.warning("state kept in %s, where podgahp reap does not see it: %s", fallback, e)
        return [fallback]
    if _usable(fallback, uid):
        found.append(fallback)
    return found


def user_directories(shared: str) -> Dict[str, str]:
    """Every user's directory in ``shared`` by user name, as a reader (another user) picks it."""
    chosen: Dict[str, str] = {}
    try:
        names = _entries(shared)
    except OSError as e:
        log.warning("%s cannot be read: %s", shared, e)
        return chosen
    for name in names:
        user = _user_of(name)
        if user is None or user in chosen:
            continue
        path = os.path.join(shared, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            continue
        if info.st_uid != 0 and _owner_name(info.st_uid) != user:
            log.warning("%s belongs to %s, not %s: not counted", path, _owner_name(info.st_uid), user)
            continue
        chosen[user] = path
    return chosen
