"""Logging: the one place that attaches handlers, and the per-request context every line carries.

Stdout is the protocol channel, so nothing here ever writes there. The log goes to a rotating file
(``PODGAHP_LOG``); if that cannot be opened it goes to stderr, which the gridmanager copies into its
own log. Each line names the request id and job id of the request being served, and credentials are
masked before anything is written.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import os
import re
import sys
import threading
from typing import Iterator, Optional

from gahp.config import ServerSettings

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


def setup(settings: ServerSettings) -> str:
    """Send the ``gahp`` loggers to the configured file; returns where the log really goes."""
    handler: logging.Handler
    # On a CE, $(LOG) belongs to condor while the GAHP runs as the mapped user: then the log goes to
    # that user's home, and only if that fails too to stderr (the gridmanager's D_FULLDEBUG log).
    # No directory is made for the configured file: a path from a missing or wrong configuration
    # (HTCondor's built-in LOG is /log) must not appear on the machine.
    candidates = [settings.log_file,
                  os.path.join(os.path.expanduser("~"), ".podgahp", os.path.basename(settings.log_file))]
    problems = []
    handler, where = logging.StreamHandler(sys.stderr), ""
    for index, path in enumerate(candidates):
        try:
            if index:  # only the fallback's own directory is made; a configured one must exist
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(
                path, maxBytes=settings.log_max_bytes, backupCount=settings.log_backups, encoding="utf-8",
                errors="backslashreplace")
            where = path
            break
        except OSError as e:
            problems.append(f"{path}: {e.strerror}")
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
    logging.getLogger("gahp").setLevel(settings.log_level)
    logging.captureWarnings(True)
    return where
