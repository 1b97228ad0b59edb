"""The shape of every backend's state table: what a row says, and the answer a row gives.

A backend reduces its remote record to a key of its table (:class:`Classified`: the key, and the
message, exit code or signal that go with it) and keeps one :class:`Rule` per key, in one mapping
with a tested row each (``STATE_TABLE`` in the backend's ``state`` module). :func:`answer` turns a
row and what the record says of the job into the :class:`~gahp.core.jobstate.JobState` a backend's
*observe* gives the agent (:mod:`gahp.agent`), the same way for every backend: a held row holds with its
hold from the registry (:mod:`gahp.rules.holds`), a completed row carries the exit status. Knows nothing of
any service.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping, Optional

from gahp.rules.holds import Hold
from gahp.core.jobstate import JobState, Phase


@dataclass(frozen=True)
class Rule:
    """One row of a state table: the phase reported, and for a held row its hold."""

    phase: Phase
    hold: Optional[Hold] = None
    """The hold (:mod:`gahp.rules.holds`) of a held row; a row has one exactly when it is held."""
    reason: str = ""
    """The start of ``HoldReason`` (held) or ``ExitReason`` (completed)."""

    def __post_init__(self) -> None:
        if (self.phase is Phase.HELD) != (self.hold is not None):
            raise ValueError(f"a state table row is held exactly when it has a hold: {self}")


@dataclass(frozen=True)
class Classified:
    """A remote record as its backend reads it: the key of its row, and what goes with it."""

    key: str
    message: str = ""
    """What the service says of the job (a hold's or an exit's reason, after the row's)."""
    exit_code: Optional[int] = None
    exit_signal: Optional[int] = None
    """The signal that ended the job, when one did (then there is no exit code)."""


def _joined(*parts: str) -> str:
    return ": ".join(p for p in parts if p)


def answer(table: Mapping[str, Rule], classified: Classified, details: JobState, subject: str) -> JobState:
    """The state ``classified``'s row of ``table`` gives a job of which the record says ``details`` (its
    batch id, node, resources, run time). ``subject`` names the remote job in a hold reason (``pod
    ns/name``): ``<row's reason>: <subject>: <message>``; an exit reason is ``<row's reason>: <message>``."""
    rule = table[classified.key]
    if rule.hold is not None:
        return rule.hold.of(details, _joined(rule.reason, subject, classified.message))
    if rule.phase is Phase.COMPLETED:
        reason = _joined(rule.reason, classified.message) or None
        if classified.exit_signal is not None:
            return dataclasses.replace(details, phase=Phase.COMPLETED, exit_signal=classified.exit_signal,
                                       exit_code=None, exit_reason=reason)
        return dataclasses.replace(details, phase=Phase.COMPLETED, exit_code=classified.exit_code or 0,
                                   exit_signal=None, exit_reason=reason)
    return dataclasses.replace(details, phase=rule.phase)
