"""The BLAHP wire format as ``condor_gridmanager`` speaks it: escaping, splitting, command shapes.

Owns the byte-level rules (gahp-client.cpp ``escapeGahpString`` / ``GahpServer::read_argv``), the
banner, the list of commands with their argument counts and result arities, and the shape of a
failed result. Knows nothing about jobs, backends, threads or I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence

from gahp import RELEASE_DATE, __version__

#: What every "no value" field is written as (``NULLSTRING`` in gahp-client.h).
NULL = "NULL"

#: Printed unprompted at start-up; the gridmanager reads at most 150 bytes of it.
BANNER = f"$GahpVersion: {__version__} {RELEASE_DATE} podgahp $"

def escape(value: str) -> str:
    """Escape one field: a backslash before space, backslash, CR and LF; empty becomes ``NULL``.
    (Four passes of ``str.replace`` run at C speed; ``str.translate`` with a table of strings looks
    up each character in a Python dict, several times slower on a status ad.)"""
    if value == "":
        return NULL
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    return value.replace(" ", "\\ ").replace("\r", "\\\r").replace("\n", "\\\n")


def split(line: str) -> List[str]:
    """Split one line (without its newline) exactly as the gridmanager does.

    A backslash makes the next character literal; an unescaped space always splits (so two spaces
    make an empty field); an unescaped CR is dropped.
    """
    if "\\" not in line:  # the common case, at C speed
        return line.replace("\r", "").split(" ")
    fields: List[str] = []
    current: List[str] = []
    escaped = False
    for c in line:
        if escaped:
            current.append(c)
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == " ":
            fields.append("".join(current))
            current = []
        elif c != "\r":
            current.append(c)
    fields.append("".join(current))
    return fields


def newline_escaped(text: bytes) -> bool:
    """Whether a newline right after ``text`` is escaped: ``text`` ends in an odd run of backslashes."""
    run = len(text) - len(text.rstrip(b"\\"))
    return run % 2 == 1


def join(fields: Sequence[str]) -> str:
    """One output line from its fields."""
    return " ".join(escape(f) for f in fields)


@dataclass(frozen=True)
class AsyncCommand:
    """An asynchronous ``BLAH_*`` command: ``NAME <reqid> <args...>`` → ``S``, later a result line."""

    name: str
    min_args: int
    """Arguments after the request id."""
    max_args: int
    failure_tail: Sequence[str]
    """Fields after ``<rc> <errstr>`` in a failed result, so the arity is right."""

    def failure(self, message: str, rc: int = 1) -> List[str]:
        """Result fields (after the request id) reporting ``message``."""
        return [str(rc), message or "error", *self.failure_tail]


ASYNC_COMMANDS: Dict[str, AsyncCommand] = {c.name: c for c in (
    # <reqid> <rc> <errstr>
    AsyncCommand("BLAH_PING", 0, 1, ()),
    # <reqid> <rc> <errstr> <jobid>
    AsyncCommand("BLAH_JOB_SUBMIT", 1, 1, (NULL,)),
    # <reqid> <rc> <errstr> <jobstatus> <classad>
    AsyncCommand("BLAH_JOB_STATUS", 1, 1, ("0", NULL)),
    # <reqid> <rc> <errstr>
    AsyncCommand("BLAH_JOB_CANCEL", 1, 1, ()),
    # <reqid> <rc> <errstr>
    AsyncCommand("BLAH_JOB_REFRESH_PROXY", 2, 2, ()),
)}

#: Result arity after the request id, checked before any result line is written.
RESULT_FIELDS: Dict[str, int] = {
    "BLAH_PING": 2, "BLAH_JOB_SUBMIT": 3, "BLAH_JOB_STATUS": 4,
    "BLAH_JOB_CANCEL": 2, "BLAH_JOB_REFRESH_PROXY": 2,
}

SYNC_COMMANDS = ("ASYNC_MODE_OFF", "ASYNC_MODE_ON", "COMMANDS", "QUIT", "RESULTS", "VERSION")

#: The ``COMMANDS`` reply: never ``RESPONSE_PREFIX`` (every later line would need the prefix).
SUPPORTED = tuple(sorted(SYNC_COMMANDS + tuple(ASYNC_COMMANDS)))

#: Highest request id the gridmanager uses (it wraps below 990,000,000).
MAX_REQUEST_ID = 990_000_000


def valid_request_id(text: str) -> bool:
    return text.isdigit() and text.isascii() and 0 < int(text) < MAX_REQUEST_ID
