"""The one reconnect loop of a long-lived stream (gahp.core.retry.reconnected): a session that ends is followed
by the next at once; one that fails waits the back-off for that many failures in a row, after its
reader heard of the failure; a success starts the count again; nothing ends the loop but ``stop``."""

from __future__ import annotations

import threading
from typing import Callable, List, Optional

from gahp.core.errors import TransientError
from gahp.core.retry import Backoff, reconnected


class Waits(threading.Event):
    """A stop event whose waits are recorded, not waited; set after ``limit`` of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.waits: List[Optional[float]] = []

    def wait(self, timeout: Optional[float] = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.limit:
            self.set()
        return self.is_set()


def _sessions(outcomes: List[Optional[Exception]], log: List[str]) -> Callable[[], None]:
    def session() -> None:
        outcome = outcomes.pop(0) if outcomes else TransientError("down")
        log.append(type(outcome).__name__ if outcome else "ended")
        if outcome is not None:
            raise outcome

    return session


def test_failures_wait_the_back_off_in_a_row_and_an_ended_session_reconnects_at_once() -> None:
    stop = Waits(limit=4)
    sessions: List[str] = []
    failed: List[str] = []
    reconnected(_sessions([TransientError("refused"), TransientError("reset"), None, None, ValueError("bug"),
                           TransientError("refused")], sessions), what="watch", backoff=Backoff(1.0, 8.0, jitter=0),
                stop=stop, failed=lambda e: failed.append(str(e)))
    assert sessions == ["TransientError", "TransientError", "ended", "ended", "ValueError", "TransientError"]
    # 1 and 2 s after two failures; the ended sessions reset the count (no wait); a bug waits at least 1 s
    assert stop.waits == [1.0, 2.0, 1.0, 2.0]
    assert failed == ["refused", "reset", "bug", "refused"]


def test_the_wait_is_capped() -> None:
    stop = Waits(limit=6)
    reconnected(_sessions([], []), what="watch", backoff=Backoff(1.0, 4.0, jitter=0), stop=stop)
    assert stop.waits == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


def test_stop_ends_the_loop_before_a_session_and_after_a_failure_without_a_report() -> None:
    stop = Waits(limit=1)
    stop.set()
    sessions: List[str] = []
    reconnected(_sessions([], sessions), what="watch", backoff=Backoff(1.0, 4.0), stop=stop)
    assert sessions == []

    stop = Waits(limit=10)
    failed: List[Exception] = []

    def closed_while_reading() -> None:
        stop.set()  # close() during the stream: the read fails
        raise TransientError("connection closed")

    reconnected(closed_while_reading, what="watch", backoff=Backoff(1.0, 4.0), stop=stop, failed=failed.append)
    assert failed == [] and stop.waits == []
