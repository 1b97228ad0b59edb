"""The interface every backend implements, and nothing else.

A backend turns the five things the gridmanager asks of a batch system into calls to one remote
service. It knows nothing about the BLAHP wire format: it takes a :class:`~gahp.job.PilotJob`,
returns job ids and :class:`~gahp.jobstate.JobState` values, and raises :mod:`gahp.errors` classes.

Every method may be called from several worker threads at once, and from a process that has never
seen the job before (the gridmanager restarts GAHPs freely), so a job id alone must be enough to act.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Optional

from gahp.config import Knobs
from gahp.job import PilotJob
from gahp.jobstate import JobState


class Backend(abc.ABC):
    """One remote service that runs pilots."""

    #: The batch type this backend serves (``GridResource = "batch <name>"``).
    name: ClassVar[str]

    @classmethod
    @abc.abstractmethod
    def from_knobs(cls, knobs: Knobs) -> Backend:
        """Build the backend from HTCondor configuration; raises :class:`~gahp.errors.ConfigError`."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Check that the service answers and this identity may run pilots there.

        Raises a :class:`~gahp.errors.GahpError` whose message tells an admin what to fix.
        """

    @abc.abstractmethod
    def submit(self, job: PilotJob) -> str:
        """Start the pilot and return its job id: printable, no spaces, self-describing.

        Idempotent per ``job.sandbox_id``: while a live remote job exists for the sandbox, return
        its id instead of starting another. Raises :class:`~gahp.errors.InvalidJob` or
        :class:`~gahp.errors.BackendError` for permanent refusals, :class:`~gahp.errors.TransientError`
        when the service could not be reached.
        """

    @abc.abstractmethod
    def status(self, job_id: str) -> JobState:
        """The pilot's current state; a job that vanished without an outcome is ``Phase.REMOVED``.

        Outputs (``Out``/``Err``) are in place before a ``Phase.COMPLETED`` state is returned.
        Raises :class:`~gahp.errors.TransientError` only when the state cannot be known right now.
        """

    def status_now(self, job_id: str) -> Optional[JobState]:
        """The pilot's state if it can be known at once, from memory, without I/O or waiting; None
        when :meth:`status` must be asked (on a worker thread). The server answers a status from here
        on its reading thread, so this must never block."""
        return None

    @abc.abstractmethod
    def cancel(self, job_id: str) -> None:
        """Stop and delete the pilot. Idempotent: unknown, finished or already deleted is success."""

    @abc.abstractmethod
    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        """Replace the pilot's X.509 proxy with the file at ``proxy_path``."""

    def start(self) -> None:
        """Begin, in the background, what makes the first requests fast (connections, caches).
        Called once when the GAHP starts serving; must not block, and must not fail: a problem
        found here is the first request's to report."""

    def close(self) -> None:
        """Stop background work (watches, caches). Called once when the GAHP exits."""
