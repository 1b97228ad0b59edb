"""The GAHP server: the stdin read loop, the worker pool, the results queue and stdout.

Owns the process side of the protocol: the banner, synchronous commands answered inline, an
immediate ``S`` for every well-formed asynchronous request, request work on a bounded thread pool
with a deadline, results reported once each in completion order, ``R`` in async mode, and a clean
exit on EOF, SIGTERM or ``QUIT``. The reader never waits on request work. Every stdout line is
written whole under one lock. Knows nothing about jobs or backends: it calls a handler per command.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import FrameType
from typing import BinaryIO, Callable, Dict, List, Mapping, Optional, Tuple

from gahp.core import logs
from gahp.program import protocol
from gahp.core.errors import GahpError

log = logging.getLogger(__name__)

#: A command handler: the request's arguments (after the request id) → result fields (after it).
Handler = Callable[[List[str]], List[str]]

_ENCODING = "utf-8"
_ERRORS = "surrogateescape"  # bytes that are not UTF-8 pass through unchanged


class _Stop(BaseException):
    """Raised in the main thread by SIGTERM to leave the read loop (past any per-line handler)."""


#: The second field of the one non-S reply the gridmanager accepts (gahp-client.cpp GahpOverloadError).
OVERLOADED = "Threads limit reached"


@dataclass
class _Pending:
    command: protocol.AsyncCommand
    deadline: float
    started: float
    size: int = 0


class Server:
    """One GAHP process's protocol engine."""

    def __init__(self, handlers: Mapping[str, Handler], stdin: BinaryIO, stdout_fd: int,
                 workers: int = 16, request_timeout_s: float = 240.0,
                 max_line_bytes: int = 16 * 1024 * 1024, max_pending: int = 1000,
                 max_pending_bytes: int = 64 * 1024 * 1024,
                 quick: Optional[Mapping[str, Callable[[List[str]], Optional[List[str]]]]] = None) -> None:
        unknown = set(handlers) - set(protocol.ASYNC_COMMANDS)
        if unknown:
            raise ValueError(f"handlers for unknown commands: {sorted(unknown)}")
        self._handlers = dict(handlers)
        self._quick = dict(quick or {})
        """Handlers that may answer on the reading thread, without I/O (status from a cache)."""
        self._stdin = stdin
        self._out_fd = stdout_fd
        self._out_lock = threading.Lock()
        self._lock = threading.Lock()  # guards everything below
        self._results: List[str] = []
        self._pending: Dict[str, _Pending] = {}
        self._async = False
        self._r_written = False
        self._closed = False
        self._timeout = request_timeout_s
        self._max_line = max_line_bytes
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._pending_bytes = 0
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="request")
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._expire_loop, name="watchdog", daemon=True)

    # ---------------------------------------------------------------------------------- output
    def _write(self, lines: List[str]) -> None:
        with self._out_lock:
            self._write_locked(lines)

    def _write_locked(self, lines: List[str]) -> None:
        """Write whole lines; the caller holds the output lock."""
        view = memoryview("".join(line + "\n" for line in lines).encode(_ENCODING, _ERRORS))
        while view:
            try:
                view = view[os.write(self._out_fd, view):]
            except BrokenPipeError:  # the gridmanager is gone
                self._stop.set()
                return

    def _reply(self, *fields: str) -> None:
        self._write([protocol.join(fields)])

    # ---------------------------------------------------------------------------------- results
    def _add_result(self, request_id: str, fields: List[str]) -> None:
        line = protocol.join([request_id, *fields])
        with self._lock:
            done = self._pending.pop(request_id, None)
            if done is None:
                return  # already answered (timed out); a late result is dropped
            self._pending_bytes -= done.size
            self._results.append(line)
            notify = self._async and not self._r_written
            if notify:
                self._r_written = True
        if notify:
            self._write(["R"])

    def _results_reply(self) -> None:
        with self._out_lock:
            with self._lock:
                batch, self._results = self._results, []
                self._r_written = False
            self._write_locked([f"S {len(batch)}", *batch])

    # ---------------------------------------------------------------------------------- requests
    def _run(self, request_id: str, command: protocol.AsyncCommand, args: List[str]) -> None:
        started = time.monotonic()
        with self._lock:
            expired = request_id not in self._pending
        if expired:
            # It waited in the queue past its deadline and was answered "timed out": it must not act
            # now, unseen (a submit would make a pod nobody tracks).
            with logs.request_context(request_id):
                log.warning("%s timed out while queued; not run", command.name)
            return
        with logs.request_context(request_id):
            try:
                fields = self._handlers[command.name](args)
                if len(fields) != protocol.RESULT_FIELDS[command.name]:
                    raise RuntimeError(f"{command.name} handler returned {len(fields)} fields")
            except GahpError as e:
                fields = command.failure(str(e))
            except Exception as e:  # noqa: BLE001 - the per-request boundary: nothing escapes
                log.error("%s failed unexpectedly:\n%s", command.name, traceback.format_exc())
                fields = command.failure(f"podgahp internal error in {command.name}: "
                                         f"{type(e).__name__}: {e}")
            self._add_result(request_id, fields)  # logged once queued: the line means "answered"
            # A successful poll or submit is a DEBUG line: what changed is logged once, by gahp.rules.answers,
            # and what a submit made by the command itself ("sandbox ... is <job id>").
            level = logging.DEBUG if command.name in ("BLAH_JOB_STATUS", "BLAH_JOB_SUBMIT") and fields[0] == "0" \
                else logging.INFO
            log.log(level, "%s rc=%s %s (%.3f s)", command.name, fields[0],
                    "ok" if fields[0] == "0" else repr(fields[1]), time.monotonic() - started)

    def _expire_loop(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._lock:
                expired = [(rid, p) for rid, p in self._pending.items() if p.deadline <= now]
            for request_id, pending in expired:
                with logs.request_context(request_id):
                    log.warning("%s not done after %.0f s; reporting a timeout", pending.command.name,
                                self._timeout)
                self._add_result(request_id, pending.command.failure(
                    f"{pending.command.name} timed out after {self._timeout:.0f} s in podgahp"))

    def _async_request(self, fields: List[str]) -> None:
        command = protocol.ASYNC_COMMANDS[fields[0].upper()]
        args = fields[2:]
        refusal = self._malformed(command, fields, args)
        if refusal:
            self._reply("E", refusal)
            return
        request_id = fields[1]
        duplicate, full, busy = self._take_pending(request_id, command, args)
        if duplicate:
            self._reply("E", f"request id {request_id} is already pending")
            return
        if full and busy:
            # The one refusal the gridmanager takes: it lowers its in-flight limit and sends the
            # request again later (it does so only while other requests of this GAHP are pending).
            log.warning("queue full (%s); request %s refused for now", full, request_id)
            self._reply("F", OVERLOADED)
            return
        self._reply("S")
        if full:  # alone and still too large: answered at once with an error result
            self._add_result(request_id, command.failure(f"request too large: {full}"))
            return
        quick = self._quick.get(command.name)
        if quick is not None and self._answer_now(request_id, command, args, quick):
            return
        self._pool.submit(self._run, request_id, command, args)

    def _malformed(self, command: protocol.AsyncCommand, fields: List[str], args: List[str]) -> str:
        """Why a request line cannot be taken at all ("" when it can)."""
        if len(fields) < 2 or not protocol.valid_request_id(fields[1]):
            return f"{command.name}: bad or missing request id"
        if not command.min_args <= len(args) <= command.max_args or any(a == "" for a in args):
            return f"{command.name}: wrong number of arguments"
        if command.name not in self._handlers:
            return f"{command.name}: not supported"
        return ""

    def _take_pending(self, request_id: str, command: protocol.AsyncCommand,
                      args: List[str]) -> Tuple[bool, str, bool]:
        """Enter a request among the pending ones, within the bounds: (already pending, why the bounds
        are exceeded or "", other requests are pending). A request over the bounds while others are
        pending is not entered (it is refused for now); alone, it is entered with no size (it is
        answered at once with an error)."""
        now = time.monotonic()
        size = sum(len(a) for a in args)
        full = ""
        with self._lock:
            duplicate = request_id in self._pending
            busy = len(self._pending) > 0
            if len(self._pending) >= self._max_pending:
                full = f"{len(self._pending)} requests pending (PODGAHP_MAX_PENDING_REQUESTS)"
            elif self._pending_bytes + size > self._max_pending_bytes:
                full = f"{self._pending_bytes + size} bytes of requests pending (PODGAHP_MAX_PENDING_BYTES)"
            if not duplicate and not (full and busy):
                self._pending[request_id] = _Pending(command, now + self._timeout, now, 0 if full else size)
                self._pending_bytes += 0 if full else size
        return duplicate, full, busy

    def _answer_now(self, request_id: str, command: protocol.AsyncCommand, args: List[str],
                    quick: Callable[[List[str]], Optional[List[str]]]) -> bool:
        """Answer on the reading thread if the quick handler can (no hand-off to a worker)."""
        try:
            fields = quick(args)
        except Exception:  # noqa: BLE001 - anything odd goes the normal way, which reports it properly
            log.debug("quick answer to %s failed; asking a worker", command.name, exc_info=True)
            return False
        if fields is None or len(fields) != protocol.RESULT_FIELDS[command.name]:
            return False
        self._add_result(request_id, fields)
        return True

    def _sync_request(self, fields: List[str]) -> bool:
        """Answer a synchronous command; False means stop reading."""
        name = fields[0].upper()
        if len(fields) != 1:
            self._reply("E", f"{name} takes no arguments")
        elif name == "COMMANDS":
            self._reply("S", *protocol.SUPPORTED)
        elif name == "VERSION":
            self._reply("S", protocol.BANNER)
        elif name in ("ASYNC_MODE_ON", "ASYNC_MODE_OFF"):
            with self._lock:
                self._async = name == "ASYNC_MODE_ON"
                notify = self._async and bool(self._results) and not self._r_written
                self._r_written = self._r_written or notify
            self._reply("S")
            if notify:
                self._write(["R"])
        elif name == "RESULTS":
            self._results_reply()
        elif name == "QUIT":
            self._reply("S")
            return False
        return True

    def handle_line(self, line: str) -> bool:
        """Answer one request line; False means the server should stop."""
        fields = protocol.split(line)
        name = fields[0].upper()
        if name in protocol.ASYNC_COMMANDS:
            self._async_request(fields)
        elif name in protocol.SYNC_COMMANDS:
            return self._sync_request(fields)
        else:
            self._reply("E", f"unknown command {fields[0][:64]!r}" if fields[0] else "empty line")
        return True

    # ---------------------------------------------------------------------------------- loop
    def _read_line(self) -> Optional[bytes]:
        """The next request line without its newline; None at EOF; ValueError if over the limit.

        As the gridmanager's ``read_argv``, a newline after an odd number of backslashes is escaped:
        it belongs to a field, and the request goes on (one request, one reply).
        """
        line = b""
        while True:
            part = self._stdin.readline(self._max_line + 1 - len(line))
            if not part:
                return line if line else None
            line += part
            if line.endswith(b"\n") and protocol.newline_escaped(line[:-1]):
                if len(line) > self._max_line:
                    self._skip_rest()
                    raise ValueError("line too long")
                continue
            if line.endswith(b"\n"):
                return line[:-1]
            if len(line) <= self._max_line:
                return line  # last line without a newline
            self._skip_rest()
            raise ValueError("line too long")

    def _skip_rest(self) -> None:
        """Discard the rest of an over-long request, escaped newlines included."""
        tail = b"x"
        while True:
            part = self._stdin.readline(1024 * 1024)
            if not part:
                return
            tail = (tail + part)[-(1024 * 1024 + 2):]
            if part.endswith(b"\n") and not protocol.newline_escaped(tail[:-1]):
                return

    def serve(self) -> int:
        """Run until EOF, SIGTERM or QUIT; returns the exit status."""
        previous = signal.signal(signal.SIGTERM, _raise_stop)
        self._watchdog.start()
        self._write([protocol.BANNER])
        reason = "end of input"
        try:
            while not self._stop.is_set():
                try:
                    raw = self._read_line()
                except ValueError:
                    self._reply("E", f"request line longer than {self._max_line} bytes")
                    continue
                if raw is None:
                    break
                try:
                    if not self.handle_line(raw.decode(_ENCODING, _ERRORS)):
                        reason = "QUIT"
                        break
                except Exception:  # noqa: BLE001 - a bad line must never end the process
                    log.error("unexpected error handling a line:\n%s", traceback.format_exc())
                    self._reply("E", "internal error")
        except _Stop:
            reason = "SIGTERM"
        except KeyboardInterrupt:
            reason = "SIGINT"
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.close(reason)
        return 0

    def close(self, reason: str = "closed", grace_s: float = 2.0) -> None:
        """Stop taking work; give running requests ``grace_s`` to finish."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = len(self._pending)
        log.info("stopping (%s) with %d request(s) pending", reason, pending)
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    break
            time.sleep(0.05)


def _raise_stop(signum: int, frame: Optional[FrameType]) -> None:
    raise _Stop()
