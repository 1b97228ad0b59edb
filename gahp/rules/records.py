"""What a GAHP recorded itself of each job it made: proof that it made it, and where its outputs go.

A status, cancel or proxy refresh brings nothing but a job id, and what the remote side holds (pod
annotations and labels, Lancium names and notes) can be written by others: anyone allowed to patch
pods in the namespace, anyone with a key to the Lancium account. So at submit the GAHP writes, in its
user's own state directory (:mod:`gahp.core.statedir`), one small file per job with what the gridmanager
sent: the sandbox, ``Iwd``, ``Out`` and ``Err``. ``Out`` and ``Err`` are written back only where a
record says (:mod:`gahp.core.outputs`), and a backend may take a record as proof that this GAHP, for this
user and this CE, made the job. A record goes with its job, and any older than ``MAX_AGE_S`` is pruned.

Records of one CE and backend are ``<state dir>/jobs.<CE>-<backend>/<key>.json`` (the CE's name made
safe for a file name, with a short hash of it): a key is a job id with its ``/`` turned into ``.`` (or
another key a backend needs before the id is known).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass, fields
from typing import Any, List, Optional, Sequence

from gahp.core.errors import BackendError

log = logging.getLogger(__name__)

#: Records older than this are pruned (longer than any pilot runs: Lancium's longest run is 30 days).
MAX_AGE_S = 60 * 86400.0
#: Largest record read (a record is a few hundred bytes; paths are bounded by the submit ad).
MAX_BYTES = 64 * 1024
#: Values of :attr:`JobRecord.cancel`.
CANCEL_STATES = ("", "pending", "done")
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,250}$")
#: How a record's temporary file is made: a new file of this user only, never through a link.
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
#: Numbers of the temporary files this process makes (with its pid, a name no other process uses).
_serial = itertools.count()


@dataclass(frozen=True)
class JobRecord:
    """One job as the GAHP that made it recorded it."""

    key: str
    """The job id (``k8s/<namespace>/<pod>``, ``lancium/<id>``), or a backend's key before it has one."""
    sandbox_id: str
    iwd: str
    """``Iwd``: the job's directory; ``Out`` and ``Err`` are written only inside it."""
    stdout: Optional[str]
    stderr: Optional[str]
    made_at: float
    """``time.time()`` when the record was written."""
    name: str = ""
    """The remote object's name, where the backend chose one."""
    cancel: str = ""
    """``pending``: a cancel was asked and not seen through yet (the job may still be there); ``done``:
    cancelled (kept, so that a repeated cancel is still answered)."""

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name) for name in _FIELDS}, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Any) -> Optional[JobRecord]:
        if not isinstance(data, dict):
            return None
        key, sandbox_id, iwd, name = (data.get(k) for k in ("key", "sandbox_id", "iwd", "name"))
        stdout, stderr = data.get("stdout"), data.get("stderr")
        made_at, cancel = data.get("made_at"), data.get("cancel", "")
        if not (isinstance(key, str) and isinstance(sandbox_id, str) and isinstance(iwd, str)
                and isinstance(name, str) and (stdout is None or isinstance(stdout, str))
                and (stderr is None or isinstance(stderr, str)) and isinstance(made_at, (int, float))
                and not isinstance(made_at, bool) and cancel in CANCEL_STATES):
            return None
        return cls(key=key, sandbox_id=sandbox_id, iwd=iwd, stdout=stdout, stderr=stderr, made_at=float(made_at),
                   name=name, cancel=cancel)


_FIELDS = tuple(f.name for f in fields(JobRecord))


def file_name(key: str) -> str:
    """The file name of a key; ValueError for a key that cannot be one (never a path)."""
    name = key.replace("/", ".")
    if not _KEY.fullmatch(name) or ".." in name:
        raise ValueError(f"{key[:100]!r} cannot name a job record")
    return name + ".json"


class JobRecords:
    """The records of one CE and backend in this user's state directories (the first is written)."""

    def __init__(self, directories: Sequence[str], ce_name: str, backend: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", ce_name)[:64]
        digest = hashlib.sha256(ce_name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        self.directories = [os.path.join(d, f"jobs.{safe}-{digest}-{backend}") for d in directories]
        self._made = False

    def _writable(self) -> str:
        if not self.directories:
            raise OSError("no state directory can be used (PODGAHP_STATE_DIR, ~/.podgahp/state); see the log")
        path = self.directories[0]
        if not self._made:
            os.makedirs(path, mode=0o700, exist_ok=True)
            self._made = True
        return path

    def put(self, record: JobRecord) -> None:
        """Write (or replace) ``record``: a new file, then renamed to the record's (a reader sees the old
        record or the new one, whole); OSError when it cannot be written."""
        data = record.to_json().encode("utf-8", "surrogateescape")
        name = file_name(record.key)
        try:
            self._write(self._writable(), name, data)
        except FileNotFoundError:  # the directory was removed since it was made: make it again, once
            self._made = False
            self._write(self._writable(), name, data)

    def note(self, record: JobRecord, made: str = "the job") -> None:
        """Record a job before anything can make it run (what it was made for, where its outputs go);
        BackendError when the record cannot be written: then ``made`` (``the pod``) must not be made."""
        try:
            self.put(record)
        except (OSError, ValueError) as e:
            raise BackendError(f"{made} cannot be recorded, so it is not made: {e} (PODGAHP_STATE_DIR must be a "
                               f"directory where job owners can write, mode 1777 like $(USER_LOG))") from e

    @staticmethod
    def _write(directory: str, name: str, data: bytes) -> None:
        while True:
            tmp = os.path.join(directory, f".record-{os.getpid()}-{next(_serial)}")
            try:
                fd = os.open(tmp, _NEW, 0o600)
                break
            except FileExistsError:  # left by an earlier process of this pid
                continue
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, os.path.join(directory, name))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def get(self, key: str) -> Optional[JobRecord]:
        """The record of ``key`` (None when there is none, or it is damaged, a link or not this user's)."""
        try:
            name = file_name(key)
        except ValueError:
            return None
        for directory in self.directories:
            record = _read(os.path.join(directory, name))
            if record is not None and record.key == key:
                return record
        return None

    def drop(self, key: str) -> None:
        """Remove the record of ``key`` wherever it is (nothing if there is none)."""
        try:
            name = file_name(key)
        except ValueError:
            return
        for directory in self.directories:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("cannot remove the record of %s: %s", key, e)

    def all(self) -> List[JobRecord]:
        """Every record (the written directory's first), read from the files."""
        seen = set()
        records: List[JobRecord] = []
        for directory in self.directories:
            try:
                names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
            except OSError:
                continue
            for name in names:
                record = _read(os.path.join(directory, name))
                if record is not None and record.key not in seen and file_name(record.key) == name:
                    seen.add(record.key)
                    records.append(record)
        return records

    def prune(self, max_age_s: float = MAX_AGE_S, now: Optional[float] = None) -> int:
        """Remove records older than ``max_age_s``; how many were removed."""
        now = time.time() if now is None else now
        old = [r.key for r in self.all() if now - r.made_at > max_age_s]
        for key in old:
            self.drop(key)
        if old:
            log.info("pruned %d job records older than %.0f days", len(old), max_age_s / 86400)
        return len(old)


def _read(path: str) -> Optional[JobRecord]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            log.warning("%s is not a file of this user: ignored", path)
            return None
        data = b""
        size = min(info.st_size, MAX_BYTES)  # a record is written whole (renamed into place): one read
        while len(data) < size:
            chunk = os.read(fd, size - len(data))
            if not chunk:
                break
            data += chunk
        return JobRecord.from_json(json.loads(data))
    except (OSError, ValueError) as e:
        log.warning("job record %s cannot be read: %s", path, e)
        return None
    finally:
        os.close(fd)
