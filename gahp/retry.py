"""The one back-off rule of every retry in podgahp (API calls, watches, submits, background cancels).

The wait after failed attempt *n* doubles from ``first_s``, is capped at ``max_s``, is replaced by a
``Retry-After`` the service sent (capped too), and gets up to ``jitter`` of itself added at random so
that many GAHPs retrying together do not hit the service in step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Backoff:
    first_s: float
    """Wait after the first failure."""
    max_s: float
    """Longest wait (also caps ``Retry-After``)."""
    jitter: float = 0.1
    """Random share added to each wait (0.1: up to 10 % more)."""

    def delay(self, attempt: int, retry_after: Optional[float] = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...)."""
        base = self.first_s * 2.0 ** max(attempt - 1, 0) if retry_after is None else max(retry_after, 0.0)
        wait = min(base, self.max_s)
        return float(wait * (1 + self.jitter * random.random()))
