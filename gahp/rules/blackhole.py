"""Black-hole protection per queue: when a queue's pilots keep failing fast, stop sending it pilots.

A bad image, a crash-looping node or a full quota can fail every pilot of a queue in seconds; the
gridmanager keeps submitting, so without this each pilot of a factory's pressure is one more failure.
A backend tells the :class:`Guard` each pilot's outcome (:meth:`Guard.outcome`, a failure with its
cause, or a success) and asks it before creating anything (:meth:`Guard.check`). When, within the
last ``PODGAHP_BLACKHOLE_WINDOW_SECONDS``, at least ``PODGAHP_BLACKHOLE_FAILURES`` pilots failed and
they are at least ``PODGAHP_BLACKHOLE_FAILURE_RATE`` of the outcomes, the queue is closed for a
back-off that starts at ``PODGAHP_BLACKHOLE_BACKOFF_SECONDS`` and doubles each time it closes again
without a success in between (at most ``PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS``). Submits to a closed
queue fail at once with a reason naming the queue, the cause and when it opens again; after the
back-off the queue takes pilots again, and a pilot that succeeds ends the doubling.

The state is kept in a file per (CE, user, backend) in the user's own state directory
(:mod:`gahp.core.statedir`, in ``PODGAHP_STATE_DIR``, by default where the GAHP logs, ``$(USER_LOG)`` on a
CE), written atomically on each change and read at start, so a GAHP restarted by the gridmanager keeps
the queue closed. No other user can create a name there; a file that is not the user's own anyway, or
is a symbolic link, is not read.
The rule is the GAHP's, not a backend's: backends only say what failed.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from gahp.core.config import Knobs
from gahp.core.errors import BackendError
from gahp.rules.figures import write_shared
from gahp.core.jobstate import JobState, Phase

log = logging.getLogger(__name__)

#: Outcomes remembered per queue (the window is also bounded by time).
MAX_OUTCOMES = 200
#: Seconds between two writes of the state file for outcomes that change no queue's state.
SAVE_EVERY_S = 1.0
#: Queues remembered (a queue name comes from the configuration, so this is generous).
MAX_QUEUES = 256


@dataclass(frozen=True)
class GuardSettings:
    enabled: bool
    window_s: float
    failures: int
    failure_rate: float
    backoff_s: float
    backoff_max_s: float
    fast_s: float
    """A pilot that ends with a failure within this many seconds of starting counts as failed."""
    state_dir: str

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> GuardSettings:
        # Where the GAHP writes its log: on a CE, $(USER_LOG), writable by the job owners.
        default_dir = knobs.raw("USER_LOG") or knobs.raw("LOG") or tempfile.gettempdir()
        return cls(
            enabled=knobs.boolean("PODGAHP_BLACKHOLE_ENABLED", True),
            window_s=knobs.number("PODGAHP_BLACKHOLE_WINDOW_SECONDS", 600.0, minimum=1),
            failures=knobs.integer("PODGAHP_BLACKHOLE_FAILURES", 10, minimum=1),
            failure_rate=knobs.number("PODGAHP_BLACKHOLE_FAILURE_RATE", 0.8, minimum=0, maximum=1),
            backoff_s=knobs.number("PODGAHP_BLACKHOLE_BACKOFF_SECONDS", 300.0, minimum=1),
            backoff_max_s=knobs.number("PODGAHP_BLACKHOLE_BACKOFF_MAX_SECONDS", 3600.0, minimum=1),
            fast_s=knobs.number("PODGAHP_BLACKHOLE_FAST_SECONDS", 300.0, minimum=0),
            state_dir=knobs.string("PODGAHP_STATE_DIR", default_dir),
        )


@dataclass
class QueueRecord:
    """What the guard knows of one queue."""

    outcomes: Deque[Tuple[float, bool, str]] = field(default_factory=lambda: deque(maxlen=MAX_OUTCOMES))
    """(time, failed, cause) of recent pilots, oldest first."""
    closed_until: float = 0.0
    level: int = 0
    """Times the queue closed since its last success (the back-off doubles with each)."""
    cause: str = ""
    """Why it closed last."""
    closed_count: int = 0

    def to_json(self) -> Dict[str, Any]:
        return {"outcomes": [list(o) for o in self.outcomes], "closed_until": self.closed_until,
                "level": self.level, "cause": self.cause, "closed_count": self.closed_count}

    @classmethod
    def from_json(cls, data: Any) -> QueueRecord:
        """The record a state file holds, read as untrusted: what is not of its type and bounds is left out."""
        record = cls()
        if not isinstance(data, dict):
            return record
        record.outcomes.extend((float(item[0]), item[1], item[2][:500]) for item in data.get("outcomes") or []
                               if _is_outcome(item))
        value = data.get("closed_until")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            record.closed_until = float(value)
        for name in ("level", "closed_count"):
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 64:
                setattr(record, name, value)
        cause = data.get("cause")
        record.cause = cause[:500] if isinstance(cause, str) else ""
        return record


def _is_outcome(item: Any) -> bool:
    """An outcome as a state file holds it: [time, failed, cause]."""
    return (isinstance(item, list) and len(item) == 3 and isinstance(item[0], (int, float))
            and isinstance(item[1], bool) and isinstance(item[2], str))


@dataclass(frozen=True)
class QueueHealth:
    """A queue's black-hole state, for BLAH_PING, logs and the health figures."""

    queue: str
    closed: bool
    closed_until: float
    failures: int
    outcomes: int
    cause: str
    closed_count: int


def verdict(state: JobState, fast_s: float, held_cause: str = "") -> Optional[Tuple[bool, str]]:
    """How a pilot ended, for the guard: (failed, cause) for a final state, None otherwise. Held is a
    failure; a non-zero exit or a signal is one when it came within ``fast_s`` of the start."""
    if state.phase is Phase.HELD:
        return True, held_cause or state.hold_reason or "held"
    if state.phase is not Phase.COMPLETED:
        return None
    failed = bool(state.exit_signal) or bool(state.exit_code)
    fast = state.wall_clock_s is None or state.wall_clock_s < fast_s
    how = f"signal {state.exit_signal}" if state.exit_signal else f"exit code {state.exit_code}"
    return failed and fast, f"pilot ended with {how} after {state.wall_clock_s or 0:.0f} s"


class Guard:
    """Per-queue failure accounting and back-off for one GAHP (thread-safe)."""

    def __init__(self, settings: GuardSettings, scope: str, clock: Callable[[], float] = time.time,
                 directory: Optional[str] = None) -> None:
        """``directory``: where the state file is kept (the user's own state directory); default the
        shared ``PODGAHP_STATE_DIR`` itself."""
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._queues: Dict[str, QueueRecord] = {}
        self._saved_at = float("-inf")
        self.path = os.path.join(directory or settings.state_dir, f"PodgahpBlackholes.{scope}.json")
        if settings.enabled:
            self._load()

    # -- questions ------------------------------------------------------------------------

    def check(self, queue: str) -> None:
        """Raise :class:`BackendError` when ``queue`` is closed (nothing may be created for it)."""
        if not self.settings.enabled:
            return
        now = self._clock()
        with self._lock:
            record = self._queues.get(queue)
            if record is None or record.closed_until <= now:
                return
            until, cause, level = record.closed_until, record.cause, record.level
        raise BackendError(
            f"queue {queue} is closed as a black hole: its pilots kept failing ({cause}); no pods are "
            f"created for it until {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(until))} "
            f"({int(until - now)} s more, back-off #{level}); release the job later "
            "(PODGAHP_BLACKHOLE_* knobs)")

    def health(self) -> List[QueueHealth]:
        now = self._clock()
        with self._lock:
            return [QueueHealth(name, r.closed_until > now, r.closed_until,
                                sum(1 for t, failed, _ in r.outcomes if failed and t > now - self.settings.window_s),
                                sum(1 for t, _, _ in r.outcomes if t > now - self.settings.window_s),
                                r.cause, r.closed_count)
                    for name, r in sorted(self._queues.items())]

    # -- what backends report -------------------------------------------------------------

    def outcome(self, queue: str, failed: bool, cause: str = "") -> None:
        """One pilot's outcome (a failure with a short cause, or a success)."""
        if not self.settings.enabled:
            return
        now = self._clock()
        with self._lock:
            record = self._queues.get(queue)
            if record is None:
                if len(self._queues) >= MAX_QUEUES:
                    return
                record = self._queues[queue] = QueueRecord()
            record.outcomes.append((now, failed, " ".join(cause.split())[:300]))
            level = record.level
            if not failed:
                if record.level:
                    log.info("queue %s: a pilot succeeded; its back-off starts again from the first step", queue)
                record.level = 0
            elif record.closed_until <= now and self._trips(record, now):
                backoff = min(self.settings.backoff_s * 2 ** record.level, self.settings.backoff_max_s)
                record.closed_until = now + backoff
                record.level += 1
                record.closed_count += 1
                record.cause = record.outcomes[-1][2] or "pilots failed"
                # The failures that closed it do not count again once it opens.
                record.outcomes.clear()
                log.warning("queue %s closed as a black hole for %.0f s (back-off #%d): %s", queue, backoff,
                            record.level, record.cause)
            # A queue closing or starting its back-off again is saved at once; the outcomes in between
            # at most once a second (the file holds them all: writing it per pilot cost more than the
            # rest of the pilot's end).
            if record.level != level or now - self._saved_at >= SAVE_EVERY_S:
                self._save()
                self._saved_at = now

    def _trips(self, record: QueueRecord, now: float) -> bool:
        recent = [failed for t, failed, _ in record.outcomes if t > now - self.settings.window_s]
        failures = sum(recent)
        return failures >= self.settings.failures and failures >= self.settings.failure_rate * len(recent)

    # -- the state file -------------------------------------------------------------------

    def _load(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            return
        except OSError as e:
            log.warning("black-hole state %s cannot be read (%s); starting afresh", self.path, e)
            return
        try:
            with os.fdopen(fd, "rb") as f:
                if os.fstat(f.fileno()).st_uid != os.getuid():
                    log.warning("black-hole state %s is not this user's; ignored", self.path)
                    return
                data = json.loads(f.read(1 << 20))
        except (OSError, ValueError) as e:
            log.warning("black-hole state %s cannot be read (%s); starting afresh", self.path, e)
            return
        queues = data.get("queues") if isinstance(data, dict) else None
        for name, record in list(queues.items() if isinstance(queues, dict) else [])[:MAX_QUEUES]:
            if isinstance(name, str):
                self._queues[name[:200]] = QueueRecord.from_json(record)
        closed = [n for n, r in self._queues.items() if r.closed_until > self._clock()]
        if closed:
            log.warning("queues still closed as black holes after a restart: %s", ", ".join(sorted(closed)))

    def _save(self) -> None:
        """Write the state (called with the lock held); a failure is logged, the guard goes on in memory.
        Readable by all: ``podgahp reap`` publishes it (queue names and causes, never secrets)."""
        write_shared(self.path, json.dumps({"queues": {name: r.to_json() for name, r in self._queues.items()}}))
