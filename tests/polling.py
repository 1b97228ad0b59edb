"""The one way tests wait: poll a probe until its value is the awaited one, within a deadline.

``wait_until(probe, what)`` calls ``probe`` until ``done(value)`` (by default: the value is truthy) and
returns that value; on timeout the test fails naming what it waited for and the last value seen.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T], what: str, timeout: float = 10.0, interval: float = 0.02,
               done: Callable[[T], object] = bool) -> T:
    """Call ``probe`` every ``interval`` seconds until ``done`` holds for its value; return the value."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout:g} s: {what} (last seen: {value!r})")
        time.sleep(interval)
