"""The ``BLAH_*`` commands: each request's arguments turned into backend calls and result fields.

Owns what a request means: parsing the submit ad into a :class:`~gahp.core.job.PilotJob`, calling the
GAHP's verbs (:class:`Verbs`: the agent, :class:`gahp.agent.Agent`, around the backend), and rendering success as result fields (``0 NULL <jobid>``, ``0 NULL <code> <ad>``).
Failures are raised as :mod:`gahp.core.errors` and rendered by the server. Knows nothing about the wire
format's escaping or about any particular backend.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Protocol

from gahp.core import logs
from gahp.program import protocol
from gahp.core.errors import GahpError
from gahp.core.job import PilotJob, parse_submit_ad
from gahp.core.jobstate import JobState

log = logging.getLogger(__name__)

OK = ["0", protocol.NULL]


class Verbs(Protocol):
    """What the commands ask of the GAHP, whatever its backend."""

    def ping(self) -> None: ...

    def submit(self, job: PilotJob) -> str: ...

    def status(self, job_id: str) -> JobState: ...

    def status_now(self, job_id: str) -> Optional[JobState]: ...

    def cancel(self, job_id: str) -> None: ...

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None: ...


class Commands:
    """The handlers of one GAHP process, bound to its verbs."""

    def __init__(self, backend: Verbs, admit: Optional[Callable[[PilotJob], None]] = None) -> None:
        self.backend = backend
        self.admit = admit
        """Raises when a job may not be submitted at all (:class:`gahp.rules.provenance.RouteCheck`)."""

    def handlers(self) -> Dict[str, Callable[[List[str]], List[str]]]:
        return {
            "BLAH_PING": self.ping,
            "BLAH_JOB_SUBMIT": self.submit,
            "BLAH_JOB_STATUS": self.status,
            "BLAH_JOB_CANCEL": self.cancel,
            "BLAH_JOB_REFRESH_PROXY": self.refresh_proxy,
        }

    def ping(self, args: List[str]) -> List[str]:
        if args and args[0].upper() != protocol.NULL:
            log.debug("ping for batch type %s", args[0])
        self.backend.ping()
        return list(OK)

    def submit(self, args: List[str]) -> List[str]:
        job = parse_submit_ad(args[0])
        logs.set_job(job.sandbox_id)
        if self.admit is not None:
            self.admit(job)
        log.debug("submitting sandbox %s", job.sandbox_id)
        job_id = self.backend.submit(job)
        if not job_id or any(c.isspace() for c in job_id) or job_id.upper() == protocol.NULL:
            raise GahpError(f"backend returned an unusable job id {job_id!r}")
        logs.set_job(job_id)
        # One line per submit at the default level: what was asked for, and what it became.
        log.info("sandbox %s is %s: %s (%d cpus, %s MiB, queue %s)", job.sandbox_id, job_id, job.executable,
                 job.cpus, job.memory_mb, job.queue or "default")
        return [*OK, job_id]

    def quick(self) -> Dict[str, Callable[[List[str]], Optional[List[str]]]]:
        """Handlers that answer at once when they can (None: run the normal handler on a worker)."""
        return {"BLAH_JOB_STATUS": self.status_now}

    def status_now(self, args: List[str]) -> Optional[List[str]]:
        state = self.backend.status_now(args[0])
        return None if state is None else [*OK, str(state.blahp_status), state.status_ad()]

    def status(self, args: List[str]) -> List[str]:
        logs.set_job(args[0])
        state = self.backend.status(args[0])
        log.debug("state %s", state)
        return [*OK, str(state.blahp_status), state.status_ad()]

    def cancel(self, args: List[str]) -> List[str]:
        logs.set_job(args[0])
        self.backend.cancel(args[0])
        return list(OK)

    def refresh_proxy(self, args: List[str]) -> List[str]:
        logs.set_job(args[0])
        self.backend.refresh_proxy(args[0], args[1])
        return list(OK)
