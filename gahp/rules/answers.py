"""What the GAHP has answered for each job: the rules every backend's status obeys, kept once here.

* **Never back.** A job reported running is never reported idle again (an HTCondor-CE removes a
  pilot that goes back to idle), and no answer moves to a lower rank (idle < running < the end).
* **Final answers.** Once a job was reported completed, held or removed, every later status gets
  that same answer: a status result the gridmanager lost and asks again must not change.
* **Bounded.** The memory holds the last ``max_jobs`` jobs asked about (least recently used go
  first) and per-job locks come from a fixed pool, so a GAHP that runs for weeks does not grow with
  the jobs that have left.
* **Once per change.** An answer a backend derived from one record of the job (a pod as the watch
  copy holds it) is kept with that record: while the record is the same object, :meth:`Reports.again`
  hands out the same answer, so a poll of an unchanged job costs a lookup, and the answer's status ad
  (built once per :class:`~gahp.core.jobstate.JobState` object) is built once per change, not per poll.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import zlib
from typing import Dict, Mapping, Optional, Tuple, Union

from gahp.core.jobstate import JobState, Phase

#: Order of phases: an answer never moves to a lower rank; rank 2 is the end.
RANK: Mapping[Phase, int] = {Phase.IDLE: 0, Phase.RUNNING: 1, Phase.COMPLETED: 2, Phase.HELD: 2,
                             Phase.REMOVED: 2}

_STRIPES = 256

log = logging.getLogger(__name__)


def _detail(state: JobState) -> str:
    if state.phase is Phase.HELD:
        return f" ({state.hold_reason})"
    if state.phase is Phase.COMPLETED:
        how = f"signal {state.exit_signal}" if state.exit_signal is not None else f"exit code {state.exit_code}"
        return f" ({how}{', node ' + state.worker_node if state.worker_node else ''})"
    if state.phase is Phase.RUNNING and state.worker_node:
        return f" (node {state.worker_node})"
    return ""


class Reports:
    """The last answer per job id; see the module docstring. Thread-safe. A final answer is kept
    whole; of the others the phase (what "never back" needs), or the answer with the record it was
    derived from (:meth:`again`)."""

    def __init__(self, max_jobs: int = 200_000) -> None:
        self._max = max_jobs
        self._lock = threading.Lock()
        self._last: Dict[str, Union[Phase, JobState, Tuple[JobState, object]]] = {}
        """Job id -> final answer, or (answer, the record it came from), or phase of the last answer;
        least recently asked first."""
        self._locks = [threading.Lock() for _ in range(_STRIPES)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._last)

    def lock(self, job_id: str) -> threading.Lock:
        """A lock serialising the work on one job (shared by a few jobs: the pool is fixed)."""
        return self._locks[zlib.crc32(job_id.encode("utf-8", "surrogateescape")) % _STRIPES]

    def final(self, job_id: str) -> Optional[JobState]:
        """The job's final answer, if it had one."""
        with self._lock:
            last = self._last.get(job_id)
        return last if isinstance(last, JobState) else None

    def again(self, job_id: str, source: object) -> Optional[JobState]:
        """The job's final answer; else the last answer if it was derived from this very ``source``
        object (:meth:`answer`'s), unchanged since; else None."""
        with self._lock:
            last = self._last.get(job_id)
            if type(last) is tuple:
                if last[1] is not source or source is None:
                    return None
                del self._last[job_id]  # now the most recently asked
                self._last[job_id] = last
                return last[0]
        return last if isinstance(last, JobState) else None

    def answer(self, job_id: str, state: JobState, started: bool = False,
               source: Optional[object] = None) -> JobState:
        """The answer to give for ``state`` (``started``: the job is known to have run), remembered.
        ``source``: the backend's record ``state`` was derived from, if the same record always gives
        the same state (no clock in it): :meth:`again` then answers for it. An answer equal to the
        last one is the last one (the same object)."""
        with self._lock:
            entry = self._last.pop(job_id, None)
            if isinstance(entry, JobState):  # final
                self._last[job_id] = entry
                return entry
            previous = entry[0] if isinstance(entry, tuple) else None
            old = previous.phase if previous is not None else entry if isinstance(entry, Phase) else None
            if state.phase is Phase.IDLE and (started or old is Phase.RUNNING):
                state = dataclasses.replace(state, phase=Phase.RUNNING)
            if old is not None and RANK[state.phase] < RANK[old]:
                state = dataclasses.replace(state, phase=old)
            if old is not state.phase:
                # One line per change of state, not per poll (a poll that changes nothing logs nothing).
                log.info("[%s] %s%s%s", job_id, f"{old.value} -> " if old is not None else "",
                         state.phase.value, _detail(state))
            elif previous is not None and previous == state:
                state = previous
            if RANK[state.phase] == 2:
                self._last[job_id] = state
            else:
                self._last[job_id] = (state, source) if source is not None else state.phase
            while len(self._last) > self._max:
                del self._last[next(iter(self._last))]
            return state

    def forget(self, job_id: str) -> None:
        """Drop what was answered (a cancel, or a new submit of the same job id)."""
        with self._lock:
            self._last.pop(job_id, None)
