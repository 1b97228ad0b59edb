"""Logging: the one place that attaches handlers, and the per-request context every line carries.

Stdout is the protocol channel, so nothing here ever writes there. The log goes to a rotating file
(``PODGAHP_LOG``); if that cannot be opened it goes to stderr, which the gridmanager copies into its
own log. Each line names the request id and job id of the request being served, and credentials are
masked before anything is written.

The GAHPs of every job owner log into one directory (on a CE ``$(USER_LOG)``, mode 1777), where any
user can create any name: a log file named in advance (``PodgahpLog.<backend>.<user>``) could be
created first by another user, who would then read and write the owner's log. So a log whose directory
another user can write goes into the owner's own directory there (:mod:`gahp.core.statedir`:
``Podgahp.<user>.<random>``, a name nobody can take first, where only the owner creates anything), and
every log file is opened without following a symbolic link, only if it is a regular file of the
process's user, and created readable by that user alone. :func:`find` gives readers (``podgahp trace``,
admins) the same place.
"""

from __future__ import annotations

import contextlib
import io
import logging
import logging.handlers
import os
import re
import stat
import sys
import threading
from typing import Iterator, List, Optional

from gahp.core import statedir
from gahp.core.config import ServerSettings, user_name

_context = threading.local()

FORMAT = "%(asctime)s %(levelname)s [%(process)d] req=%(request_id)s job=%(job_id)s %(name)s: %(message)s"

# Bearer tokens, API keys, passwords in URLs or key=value text.
_SECRETS = re.compile(
    r"(?i)(bearer\s+|authorization[\"']?\s*[:=]\s*[\"']?(?:bearer\s+)?|(?:token|api[_-]?key|password|secret)[\"']?\s*[:=]\s*[\"']?)"
    r"([^\s\"',;]+)")
MASK = "***"


def mask_secrets(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by ``***``."""
    return _SECRETS.sub(lambda m: m.group(1) + MASK, text)


@contextlib.contextmanager
def request_context(request_id: str, job_id: Optional[str] = None) -> Iterator[None]:
    """Tag every log line written by this thread inside the block with the request (and job) id."""
    saved = getattr(_context, "request_id", None), getattr(_context, "job_id", None)
    _context.request_id, _context.job_id = request_id, job_id
    try:
        yield
    finally:
        _context.request_id, _context.job_id = saved


def set_job(job_id: str) -> None:
    """Name the job the current request is about, once it is known (e.g. after a submit)."""
    _context.job_id = job_id


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = getattr(_context, "request_id", None) or "-"
        record.job_id = getattr(_context, "job_id", None) or "-"
        return True


def _escaped(char: str) -> str:
    code = ord(char)
    return "\\x%02x" % code if code < 0x100 else "\\u%04x" % code if code < 0x10000 else "\\U%08x" % code


def printable(text: str) -> str:
    """``text`` safe for one line of a log or a terminal: every character that is not printable becomes a
    backslash escape. That is control characters (newlines too: a user's field must not forge a line;
    ESC, BEL, CR: it must not drive an admin's terminal), the C1 controls, format characters such as
    bidirectional overrides, line separators, and bytes that were not UTF-8 (surrogate escapes)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


class _MaskingFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return printable(super().formatMessage(record))

    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))


def _others_may_write(directory: str) -> bool:
    """Whether a user other than this process's (and root) can create a name in ``directory``: it is
    writable by its group or by all, or it belongs to another user (who could create the file first)."""
    info = os.stat(directory)
    return bool(info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) or info.st_uid not in (os.getuid(), 0)


def own_path(configured: str, user: Optional[str] = None) -> str:
    """Where this process writes the log configured as ``configured``: that path where no one else can
    create names, else the same file name in ``user``'s own directory in that directory (made if
    needed). OSError when neither can be used."""
    directory = os.path.dirname(os.path.abspath(configured))
    if not _others_may_write(directory):
        return configured
    return os.path.join(statedir.own_directory(directory, user or user_name()), os.path.basename(configured))


def find(configured: str, user: str) -> Optional[str]:
    """Where the GAHP of ``user`` writes the log configured as ``configured`` (for readers: nothing is
    made); None when that user's own directory does not exist there (yet)."""
    directory = os.path.dirname(os.path.abspath(configured))
    try:
        shared = _others_may_write(directory)
    except OSError:
        return None
    if not shared:
        return configured
    own = statedir.user_directories(directory).get(user)
    return os.path.join(own, os.path.basename(configured)) if own else None


class _OwnFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log opened as only the user's own file may be: never through a symbolic link, only
    a regular file of this user (one another user made or linked there is refused, whatever its
    mode), created with mode 0600.

    A line is formatted once and written with one system call: the file's size is known from its
    opening on (what this process wrote since), where the standard handler formats each line twice
    and asks the file system for the file's kind and size at every line."""

    _size = 0
    """Bytes in the file: its size when opened, plus what was written since."""

    def _open(self) -> io.TextIOWrapper:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(self.baseFilename, flags, 0o600)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
                raise PermissionError(0, "not a file of this user alone (made or linked by another?)",
                                      self.baseFilename)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
            self._size = info.st_size
            return open(fd, "a", encoding=self.encoding, errors=self.errors)  # noqa: SIM115 - the handler keeps it
        except BaseException:
            os.close(fd)
            raise

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
            if self.stream is None:
                self.stream = self._open()
            size = len(line.encode(self.encoding or "utf-8", self.errors or "strict"))
            if self.maxBytes > 0 and self.backupCount > 0 and self._size and self._size + size >= self.maxBytes:
                self.doRollover()  # closes, renames and opens the file again (_open: its size)
            self.stream.write(line)
            self.stream.flush()
            self._size += size
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own rule: a line that cannot be written is reported, not raised
            self.handleError(record)


def setup(settings: ServerSettings) -> str:
    """Send the ``gahp`` loggers to the configured file; returns where the log really goes."""
    handler: logging.Handler
    # On a CE, $(LOG) belongs to condor while the GAHP runs as the mapped user: then the log goes to
    # that user's home, and only if that fails too to stderr (the gridmanager's D_FULLDEBUG log).
    # No directory is made for the configured file: a path from a missing or wrong configuration
    # (HTCondor's built-in LOG is /log) must not appear on the machine.
    home = os.path.join(os.path.expanduser("~"), ".podgahp")
    candidates = [settings.log_file, os.path.join(home, os.path.basename(settings.log_file))]
    problems: List[str] = []
    handler, where = logging.StreamHandler(sys.stderr), ""
    for index, configured in enumerate(candidates):
        path = configured
        try:
            if index:  # only the fallback's own directory is made; a configured one must exist
                os.makedirs(home, mode=0o700, exist_ok=True)
            path = own_path(configured)
            handler = _OwnFileHandler(path, maxBytes=settings.log_max_bytes, backupCount=settings.log_backups,
                                      encoding="utf-8", errors="backslashreplace")
            where = path
            break
        except OSError as e:
            problems.append(f"{path}: {e.strerror or e}")
    if not where:
        where = "stderr (cannot open " + "; ".join(problems) + ")"
    handler.addFilter(_ContextFilter())
    handler.setFormatter(_MaskingFormatter(FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    # What FORMAT does not print is not gathered for each line (the logging HOWTO's optimisations):
    # the calling function's file and line, the thread and the multiprocessing process name.
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging.getLogger("gahp").setLevel(settings.log_level)
    logging.captureWarnings(True)
    return where
