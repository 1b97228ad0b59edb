"""What a submit does when its sandbox already has pods: the one rule that keeps a pilot from running
twice, as a table with a tested row each."""

from __future__ import annotations

from typing import Any, Dict, Tuple

from gahp.backends.k8s.spec import ANN_REPORTED
from gahp.backends.k8s.view import Pod, record_of

JsonObj = Dict[str, Any]


def is_live(pod: Pod) -> bool:
    """Not finished and not being deleted: a pod a repeated submit must not duplicate."""
    view = record_of(pod)
    return not view.deleting and view.phase in ("Pending", "Running", "Unknown")


#: What a submit does when its sandbox already has pods, by the newest one (one row each, tested):
#: a re-submit after a GAHP crash, a timed-out submit or a lost API answer must find the pilot it
#: already started, running or finished-but-unreported, so that a pilot never runs twice; only a
#: pod whose outcome was reported (then held and released) or that is being deleted (cancelled)
#: makes way for a new generation.
RESUBMIT_RULES: Tuple[Tuple[str, str], ...] = (
    ("live", "reuse"),
    ("finished, not reported", "reuse"),
    ("finished and reported", "new generation"),
    ("being deleted", "new generation"),
)


def resubmit_case(pod: Pod) -> str:
    """The row of :data:`RESUBMIT_RULES` that ``pod`` (the newest of its sandbox) falls in."""
    view = record_of(pod)
    if view.deleting:
        return "being deleted"
    if view.finished:
        return "finished and reported" if view.annotation(ANN_REPORTED) else "finished, not reported"
    return "live"
