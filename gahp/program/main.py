"""Wiring of one GAHP process: configuration, logging, the backend, the protocol server.

Nothing here may end the process early: a configuration error or a backend that cannot be built
still gives a running GAHP whose every request reports that error (a GAHP that exits aborts the
gridmanager, which would hide the reason from the admin).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable, NoReturn, Optional, Union

from gahp import __version__
from gahp.core import logs
from gahp.backends import backend_class
from gahp.agent import Agent
from gahp.program.commands import Commands
from gahp.core.config import Knobs, ServerSettings
from gahp.core.errors import ConfigError, GahpError
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState
from gahp.rules.provenance import ProvenanceSettings, RouteCheck
from gahp.core.schedd import QueryProcess
from gahp.program.server import Server

log = logging.getLogger(__name__)


class UnusableBackend:
    """Stands in for the agent of a backend that could not be built; every request reports why."""

    def __init__(self, backend: str, reason: str) -> None:
        self._message = f"podgahp {backend} backend is not usable: {reason}"

    def _fail(self) -> NoReturn:
        raise ConfigError(self._message)

    def ping(self) -> None:
        self._fail()

    def submit(self, job: PilotJob) -> str:
        self._fail()

    def status(self, job_id: str) -> JobState:
        self._fail()

    def status_now(self, job_id: str) -> Optional[JobState]:
        return None

    def cancel(self, job_id: str) -> None:
        self._fail()

    def refresh_proxy(self, job_id: str, proxy_path: str) -> None:
        self._fail()

    def start(self) -> None:
        """Nothing to begin."""

    def close(self) -> None:
        """Nothing to stop."""


GahpVerbs = Union[Agent, UnusableBackend]


def build_backend(name: str, knobs: Knobs) -> GahpVerbs:
    """The agent of the named backend built from ``knobs``, or an :class:`UnusableBackend` saying why not."""
    try:
        return Agent(backend_class(name).from_knobs(knobs))
    except GahpError as e:
        reason = str(e)
    except Exception as e:  # noqa: BLE001 - e.g. a client library that fails to import
        log.exception("cannot build the %s backend", name)
        reason = f"{type(e).__name__}: {e}"
    log.error("%s", reason)
    return UnusableBackend(name, reason)


def run_gahp(backend_name: str, knobs: Optional[Knobs] = None) -> int:
    """Serve the GAHP protocol on stdin/stdout with the named backend until EOF/SIGTERM/QUIT."""
    # Stdout belongs to the protocol: keep a private handle on it and send any stray print to stderr.
    protocol_fd = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    knobs = knobs or Knobs()
    try:
        settings = ServerSettings.from_knobs(knobs, backend_name)
        settings_error = None
    except GahpError as e:
        settings = ServerSettings.from_knobs(Knobs({}), backend_name)
        settings_error = str(e)
    where = logs.setup(settings)
    log.info("podgahp %s starting: backend %s, log %s, CONDOR_CONFIG=%s", __version__, backend_name,
             where, os.environ.get("CONDOR_CONFIG", "(unset)"))
    backend: GahpVerbs
    if settings_error:
        log.error("%s", settings_error)
        backend = UnusableBackend(backend_name, settings_error)
    else:
        backend = build_backend(backend_name, knobs)
    # The route check's queries are made by a process of their own: the bindings hold the GIL while
    # they wait for the schedd (gahp.core.schedd), which would stop this whole process meanwhile.
    queries = QueryProcess()
    try:
        admit: Optional[Callable[[PilotJob], None]] = RouteCheck(ProvenanceSettings.from_knobs(knobs),
                                                                 backend_name, query=queries.query,
                                                                 start_time=queries.start_time).check
    except GahpError as e:
        log.error("%s", e)
        backend, admit = UnusableBackend(backend_name, str(e)), None
    commands = Commands(backend, admit)
    server = Server(commands.handlers(), sys.stdin.buffer, protocol_fd, quick=commands.quick(),
                    workers=settings.workers, request_timeout_s=settings.request_timeout_s,
                    max_line_bytes=settings.max_line_bytes, max_pending=settings.max_pending,
                    max_pending_bytes=settings.max_pending_bytes)
    backend.start()
    try:
        return server.serve()
    finally:
        try:
            backend.close()
        except Exception:  # noqa: BLE001
            log.exception("error closing the backend")
        queries.close()
        log.info("podgahp exiting")
        logging.shutdown()
