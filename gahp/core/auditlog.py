"""Who submitted a job, as the schedd's audit log records it.

The schedd of an HTCondor-CE keeps an audit log (``SCHEDD_AUDIT_LOG = $(LOG)/AuditLog`` with
``SCHEDD_DEBUG = D_AUDIT``, both in HTCondor-CE's shipped configuration): for every connection that
may change the queue it writes the command and the identity the connection authenticated as, then
what the connection did, each line tagged with the connection's number::

    12/02/26 01:08:51 (cid:9) Command=QMGMT_WRITE_CMD, peer=<127.0.0.1:15771>
    12/02/26 01:08:51 (cid:9) AuthMethod=FS, AuthId=alice, CondorId=alice@users.htcondor.org
    12/02/26 01:08:51 (cid:9) Submitting new job 1.0

It is the one record of who submitted a job that no client can write: a job's owner can set or
edit every attribute the JobRouter writes, and the router submits as the owner, over the daemons'
family session (HTCondor's ``submit_job.cpp`` and ``QmgmtSetEffectiveOwner``). The schedd does not
log the identity of connections of its own daemons: before HTCondor 24.8 ``condor`` of its own
``UID_DOMAIN`` and ``condor@child``, from 24.8 on ``condor@family`` and ``condor@child``
(``AuditLogNewConnection`` in ``schedd.cpp``). So the router's submit is recorded as
``AuthMethod=FAMILY ... CondorId=condor@family`` on HTCondor 23, and with no identity line at all
on 25; a user's always with its own.

Proving that a connection has *no* identity line needs a bound: connection numbers grow with
every socket the schedd makes (and start again at a restart), and the identity line is written
when the command is dispatched, at most ``SEC_TCP_SESSION_DEADLINE`` (120 s) after the connection
was accepted. A connection numbered below the submitter's that logged its command at time ``t``
was accepted before it, so the submitter was accepted after ``t - deadline``: its identity line,
if any, is later than that. The log is read backwards from the submit line down to that time.

Only lines the schedd writes are read: the header (time, optional ``(pid:)``, ``(tid:)``,
``(fd:)``) and the connection tag come before any text a client controls (attribute values, which
hold no newline: the schedd refuses such values), and the first tag of a line is its own.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

from gahp.core.errors import GahpError

#: HTCondor's default time header (``DEBUG_TIME_FORMAT``), without its trailing blank.
DEFAULT_TIME_FORMAT = "%m/%d/%y %H:%M:%S"
#: The schedd's default handshake deadline (``SEC_TCP_SESSION_DEADLINE``).
DEFAULT_DEADLINE_S = 120
#: How far from a job's QDate its submit line is looked for (the router sets QDate just after its
#: NewCluster, which the line records; a busy schedd may take a few seconds in between): first
#: within the near window, then within the far one.
QDATE_NEAR_S = 10
QDATE_SLACK_S = 300
#: Line headers whose time is kept read (a log's lines share a header for each second).
_TIMES_KEPT = 4096
#: Most bytes read for one job: a log of a busy CE holds a few hundred bytes a connection.
MAX_SCAN_BYTES = 64 * 1024 * 1024
_CHUNK = 64 * 1024
_FIRST_CHUNK = 4 * 1024

_LINE = re.compile(rb"^(?P<head>[^()\n]*?)\s*(?:\((?:pid|tid|fd):\d+\)\s*)*\(cid:(?P<cid>\d+)\) (?P<msg>[^\n]*)$")
_IDENTITY = re.compile(rb"^AuthMethod=(?P<method>[^,]*), AuthId=(?P<auth>[^,]*), CondorId=(?P<id>\S*)$")
_SUB_SECOND = re.compile(r"\.\d+$")


class AuditLogError(GahpError):
    """The audit log cannot answer: not configured, unreadable, or too long to settle a job."""


@dataclass(frozen=True)
class Submitter:
    """The connection that submitted a job: its number and the identity the schedd recorded for it
    (``identity`` None when the schedd logged none: one of its own daemons)."""

    job_id: str
    cid: int
    identity: Optional[str]
    method: Optional[str]


@dataclass(frozen=True)
class _Line:
    time: Optional[float]
    cid: Optional[int]
    msg: bytes


class AuditLog:
    """Reads one schedd's audit log (the file and its rotated copies ``FILE.*``)."""

    def __init__(self, path: str, time_format: str = DEFAULT_TIME_FORMAT,
                 deadline_s: float = DEFAULT_DEADLINE_S, max_scan_bytes: int = MAX_SCAN_BYTES,
                 max_rotated: int = 1) -> None:
        self.path = path
        self.time_format = time_format.strip() or DEFAULT_TIME_FORMAT
        self.deadline_s = deadline_s
        self.max_scan_bytes = max_scan_bytes
        self.max_rotated = max_rotated
        """``MAX_NUM_SCHEDD_AUDIT_LOG``: rotated copies the schedd keeps; with fewer, none was deleted."""
        self._times: Dict[bytes, Optional[float]] = {}

    # -------------------------------------------------------------------------------- lines

    def parse(self, raw: bytes) -> _Line:
        m = _LINE.match(raw.rstrip(b"\r"))
        if not m:
            return _Line(self._time(raw.split(b" (", 1)[0]), None, b"")
        return _Line(self._time(m.group("head")), int(m.group("cid")), m.group("msg"))

    def _time(self, head: bytes) -> Optional[float]:
        """The time a line header says, in seconds since the epoch (kept for the last headers read)."""
        try:
            return self._times[head]
        except KeyError:
            pass
        if len(self._times) >= _TIMES_KEPT:
            self._times.clear()
        value = self._times[head] = self._read_time(head)
        return value

    def _read_time(self, head: bytes) -> Optional[float]:
        text = head.decode("ascii", "replace").strip()
        if text.isdigit():  # D_TIMESTAMP: seconds since the epoch
            return float(text)
        try:
            return time.mktime(time.strptime(_SUB_SECOND.sub("", text), self.time_format))
        except (ValueError, OverflowError):
            return None

    def files(self) -> List[str]:
        """The log and its rotated copies, newest first."""
        directory, name = os.path.split(self.path)
        try:
            entries = os.listdir(directory or ".")
        except OSError as e:
            raise AuditLogError(f"cannot read the schedd's audit log {self.path}: {e.strerror}") from e
        try:
            owner = os.stat(self.path).st_uid
        except OSError as e:
            raise AuditLogError(f"cannot read the schedd's audit log {self.path}: {e.strerror}") from e
        rotated = [os.path.join(directory, n) for n in entries if n.startswith(name + ".")]
        dated = []
        for path in rotated:
            try:
                info = os.stat(path)
            except OSError:
                continue
            if info.st_uid == owner:  # a copy the schedd rotated, not a file someone else put beside it
                dated.append((info.st_mtime, path))
        dated.sort(reverse=True)
        return [self.path] + [p for _, p in dated]

    # ------------------------------------------------------------------------------ the answer

    def submitter(self, job_id: str, qdate: float, since: Optional[float] = None) -> Optional[Submitter]:
        """Who submitted ``job_id`` (``N.P``), whose QDate is ``qdate``; None when no line of the
        log records its submission near that time (a QDate the submitter set itself finds none).
        ``since``: when the schedd started, if known; older lines are another lifetime's."""
        wanted = b"Submitting new job " + job_id.encode("ascii")
        files = self.files()
        for index, path in enumerate(files):
            try:
                with open(path, "rb") as f:
                    found = (self._find_submit(f, wanted, qdate, QDATE_NEAR_S)
                             or self._find_submit(f, wanted, qdate, QDATE_SLACK_S))
            except FileNotFoundError:
                continue  # rotated away meanwhile: the next file holds older lines
            except OSError as e:
                raise AuditLogError(f"cannot read the schedd's audit log {path}: {e.strerror}") from e
            if found is not None:
                offset, line = found
                assert line.cid is not None
                return self._identity(job_id, line.cid, files[index:], offset, since, len(files) - 1 < self.max_rotated)
        return None

    def _find_submit(self, f: BinaryIO, wanted: bytes, qdate: float, slack: float) -> Optional[Tuple[int, _Line]]:
        """(offset, line) of the line ``wanted`` between qdate - slack and qdate + slack. A line is
        parsed whole only when it holds ``wanted``; else only its time, when its header changed."""
        start = self._first_at(f, qdate - slack)
        f.seek(start)
        read = 0
        head, end = b"", qdate + slack
        for raw in f:
            read += len(raw)
            if wanted in raw:
                line = self.parse(raw.rstrip(b"\n"))
                if line.cid is not None and line.msg == wanted:
                    return f.tell() - len(raw), line
            cut = raw.find(b" (")
            if cut > 0 and raw[:cut] != head:
                head = raw[:cut]
                stamp = self._time(head)
                if stamp is not None and stamp > end:
                    return None
            if read > self.max_scan_bytes:
                raise AuditLogError(f"more than {self.max_scan_bytes} bytes of the schedd's audit log "
                                    f"{self.path} around one job's QDate")
        return None

    def _first_at(self, f: BinaryIO, when: float) -> int:
        """Offset of a line start at or before the first line logged at ``when`` or later (binary
        search on the lines' times; lines whose time does not parse are stepped over)."""
        size = f.seek(0, os.SEEK_END)
        low, high = 0, size
        while high - low > _CHUNK:
            middle = (low + high) // 2
            f.seek(middle)
            f.readline()  # to the next line start
            stamp = None
            for _ in range(64):
                raw = f.readline()
                if not raw:
                    break
                stamp = self.parse(raw.rstrip(b"\n")).time
                if stamp is not None:
                    break
            if stamp is None or stamp >= when:
                high = middle
            else:
                low = middle
        if low:
            f.seek(low)
            f.readline()
            return f.tell()
        return 0

    def _identity(self, job_id: str, cid: int, files: Sequence[str], offset: int,
                  since: Optional[float], whole: bool) -> Submitter:
        """Read backwards from the submit line of connection ``cid`` for its identity line: down to
        the bound an earlier connection gives, or to the schedd's start. ``whole``: no rotated copy
        was deleted, so read to its first line the log holds all of the schedd's lifetime."""
        scan = _Scan(cid, None if since is None else since - 1)
        mine_tag = b"(cid:%d) " % cid
        read = 0
        head, stamp = b"", None
        for raw in _backwards(files, offset):
            read += len(raw) + 1
            if read > self.max_scan_bytes:
                raise AuditLogError(
                    f"cannot settle who submitted job {job_id}: its connection's start is more than "
                    f"{self.max_scan_bytes} bytes before its submit in the schedd's audit log {self.path}")
            cut = raw.find(b" (")
            if cut > 0 and raw[:cut] != head:  # a line's time, read when its header changes
                head, stamp = raw[:cut], self._time(raw[:cut])
            if scan.past_bound(stamp):
                return Submitter(job_id, cid, None, None)
            # Only two kinds of line count: this connection's, and another's command (a bound).
            if mine_tag in raw or (scan.stop is None and b") Command=" in raw):
                found = self._take(scan, self.parse(raw), job_id)  # read whole, and anchored
                if found is not None:
                    return found
        # The log read to its first line
        if scan.stop is None and not (whole and since is not None):
            raise AuditLogError(f"cannot settle who submitted job {job_id}: the schedd's audit log {self.path} "
                                f"holds no earlier connection to bound its own"
                                + ("" if since is not None else ", and the schedd's start is unknown"))
        return Submitter(job_id, cid, None, None)

    def _take(self, scan: "_Scan", line: _Line, job_id: str) -> Optional[Submitter]:
        """One line that counts, read backwards: the submitter's identity (kept), its command (the
        answer), or an earlier connection's command (the bound of the read)."""
        if line.cid == scan.cid:
            m = _IDENTITY.match(line.msg)
            if m:
                scan.identity = (m.group("id").decode("utf-8", "replace"), m.group("method").decode("utf-8", "replace"))
            elif line.msg.startswith(b"Command="):
                if scan.identity is None:  # a command with no identity: authentication failed
                    return Submitter(job_id, scan.cid, "(not authenticated)", None)
                return Submitter(job_id, scan.cid, scan.identity[0], scan.identity[1])
        elif line.cid is not None and line.cid < scan.cid and line.msg.startswith(b"Command=") and scan.stop is None:
            if line.time is None:
                raise AuditLogError(f"the schedd's audit log {self.path} has a line whose time does not read "
                                    f"as DEBUG_TIME_FORMAT ({self.time_format!r})")
            scan.stop = line.time - self.deadline_s
        return None


@dataclass
class _Scan:
    """What a backward read from a submit line has found so far."""

    cid: int
    floor: Optional[float]
    """Nothing of the connection is older than this (the schedd's start, less a second)."""
    identity: Optional[Tuple[str, str]] = None
    """The identity line of the connection, when read: (CondorId, AuthMethod)."""
    stop: Optional[float] = None
    """The bound an earlier connection's command gives: the connection was accepted after it."""

    def past_bound(self, stamp: Optional[float]) -> bool:
        return stamp is not None and ((self.stop is not None and stamp < self.stop)
                                      or (self.floor is not None and stamp < self.floor))


def _backwards(files: Sequence[str], offset: int) -> Iterator[bytes]:
    """The lines before ``offset`` of ``files[0]``, last first, then those of each older file."""
    for index, path in enumerate(files):
        try:
            with open(path, "rb") as f:
                end = offset if index == 0 else f.seek(0, os.SEEK_END)
                yield from _lines_before(f, end)
        except FileNotFoundError:
            continue
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                raise AuditLogError(f"cannot read the schedd's audit log {path}: {e.strerror}") from e
            raise


def _lines_before(f: BinaryIO, end: int) -> Iterator[bytes]:
    tail = b""
    position = end
    size = _FIRST_CHUNK
    while position > 0:
        size = min(size, position)
        position -= size
        f.seek(position)
        lines = (f.read(size) + tail).split(b"\n")
        tail = lines[0]
        for raw in reversed(lines[1:]):
            if raw:
                yield raw
        size = min(size * 4, _CHUNK)  # the answer is mostly near: read a little first
    if tail:
        yield tail
