"""Simulated Lancium Compute REST API (``https://portal.lancium.com/api/v1``, API 1.5.0).

The Lancium service cannot be reached from our test machines (and its PaaS offering was reportedly
ended in 2023), so this module serves the published OpenAPI description over plain HTTP for the
``lancium`` backend and its tests: a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 under the base
path ``/api/v1``, a background clock moving jobs through their states, and an in-process driver
(:class:`LanciumSim`) for inspection and fault injection.

Owns: the wire behaviour -- routes, the two-step token exchange (``POST /access_tokens`` with the
API key, HS256 JWT access tokens with ``exp``), the ``X-Current-API-Version`` /
``X-Deprecated-API-Used`` headers, status codes and ``{"errors": ...}`` bodies, downloads with
``Range``, the request log and injected faults.  Job state lives in
:mod:`podgahp_sim.lancium.model`, wire shapes, settings and validation in :mod:`podgahp_sim.lancium.fields`.

Must not know: anything of ``gahp.backends`` (never imported; clients meet the simulator only over
HTTP), HTCondor, or Kubernetes.

Per-job behaviour, set through the job's ``environment`` entries (checked at submit, 400 if
malformed):

``PODGAHP_SIM_RUN_SECONDS``    seconds the job runs (default: settings ``run_seconds``)
``PODGAHP_SIM_QUEUE_SECONDS``  minimum seconds in ``queued`` (default: ``queue_seconds``)
``PODGAHP_SIM_EXIT_CODE``      ``exit_code`` of the job (default 0 when it finishes)
``PODGAHP_SIM_ERROR``          end in state ``error`` with this ``error_string``
``PODGAHP_SIM_STDOUT``         content of ``stdout.txt`` (default names the ``command_line``)
``PODGAHP_SIM_STDERR``         content of ``stderr.txt`` (default empty, so it answers 204)
``PODGAHP_SIM_NEVER_START``    any value but ``0``: the job stays ``queued`` forever
``PODGAHP_SIM_MEMORY_USED``    ``memory_used`` reported when the job ends

Sim-wide knobs are the fields of :class:`LanciumSimSettings` (token lifetime, tick, queue/run/
delete seconds, total cores, number of 202 answers before an output is ready, terminate outcome,
CPU:memory round-up, billing).

Driver (:class:`LanciumSim`): ``url``, ``api_key``, ``new_api_key()``, ``settings``; ``jobs()``, ``job()``,
``input_files()``, ``input_bytes()``, ``outputs()``; ``inject()`` / ``clear_faults()``;
``never_start()``; ``advance()``; ``wait_for()``; ``request_log`` / ``count()`` / ``clear_log()``;
``mint_token()`` / ``revoke_tokens()``.  :func:`serve` runs one stand-alone until interrupted.

Sim choices where the published description is silent or contradicts itself:

* ``terminate`` acts on the next tick; the job ends in ``error`` with ``error_string``
  "terminated by user" (configurable) and without outputs.  ``ready`` lasts one tick while the
  job's cores are held.  Jobs ending in ``error`` through ``PODGAHP_SIM_ERROR`` keep outputs.
* ``cost``, ``memory_used`` (MB), ``execution_time`` and ``exit_code`` are not nullable in the
  schema and "only available for jobs with a status of finished or error": they are absent
  until then (``exit_code`` also after terminate).  All other fields are always present.
* Create/update check types and unknown keys (also inside ``resources``) and the ``qos`` enum;
  presence and ranges are checked at submit, so a created job may show out-of-range values.
* ``chunks_received`` ranges are ``[start, end)``, 0-based.  An input file's ``size`` is
  write-only and never returned.
* The job attribute is returned as ``output_files`` (as real responses had); the description's
  misspelling ``output_fies`` is accepted in requests too.  The job list shows a job without a
  name as ``""`` (the list schema's ``name`` is not nullable).
* Malformed requests to operations that declare no 400 (input-file fields, a missing
  ``Upload-Offset``, a chunk past the declared size) still answer 400 with an ``errors`` body.
* One account: every API key (``new_api_key()`` makes more, as each user of an account makes their
  own on the portal) sees and may change every job of the account.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import json
import logging
import os
import random
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple, Union, cast

from .fields import (
    API_VERSION,
    ENV_ERROR,
    ENV_EXIT_CODE,
    ENV_MEMORY_USED,
    ENV_NEVER_START,
    ENV_QUEUE_SECONDS,
    ENV_RUN_SECONDS,
    ENV_STDERR,
    ENV_STDOUT,
    QOS_LEVELS,
    STATUSES,
    ApiError,
    InputFileJSON,
    JobJSON,
    LanciumSimSettings,
)
from .http import BASE_PATH, ROUTES, Fault, LoggedRequest, Server, make_server
from .model import LanciumState

__all__ = [
    "API_VERSION",
    "BASE_PATH",
    "ENV_ERROR",
    "ENV_EXIT_CODE",
    "ENV_MEMORY_USED",
    "ENV_NEVER_START",
    "ENV_QUEUE_SECONDS",
    "ENV_RUN_SECONDS",
    "ENV_STDERR",
    "ENV_STDOUT",
    "QOS_LEVELS",
    "STATUSES",
    "Chaos",
    "Fault",
    "JobJSON",
    "LanciumSim",
    "LanciumSimSettings",
    "LoggedRequest",
    "ROUTES",
    "serve",
]

logger = logging.getLogger(__name__)



# --------------------------------------------------------------------------------------------
# JSON Web Tokens (HS256), enough for clients that decode ``exp`` without verifying
# --------------------------------------------------------------------------------------------


def _b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_jwt(secret: bytes, claims: Dict[str, object]) -> str:
    """Encode and sign ``claims`` as an HS256 JWT (RFC 7519)."""
    header = _b64encode(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64encode(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = "%s.%s" % (header, payload)
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return "%s.%s" % (signing_input, _b64encode(signature))


def read_jwt(secret: bytes, token: str) -> Optional[Dict[str, object]]:
    """Claims of a JWT signed with ``secret``, or None if malformed or forged."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        expected = hmac.new(secret, ("%s.%s" % (parts[0], parts[1])).encode("ascii"), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _b64decode(parts[2])):
            return None
        claims = json.loads(_b64decode(parts[1]))
    except (ValueError, UnicodeError):
        return None
    return cast(Dict[str, object], claims) if isinstance(claims, dict) else None


# --------------------------------------------------------------------------------------------
# Random faults
# --------------------------------------------------------------------------------------------


#: Answers a random fault gives before the request is served: the server did nothing.
CHAOS_BEFORE: Tuple[int, ...] = (500, 502, 503, 504, 429, 0)
#: Answers a random fault gives after the request was served (a lost answer): the work is done.
CHAOS_AFTER: Tuple[int, ...] = (500, 502, 504, 0)


@dataclass(frozen=True)
class Chaos:
    """Random faults on a share of all requests, as a flaky network or load balancer gives them.

    Each request is hit with probability ``rate``; a hit is a *lost answer* (the request is served,
    then answered 500/502/504 or the connection is closed without an answer) with probability
    ``lost_answers``, else it fails before anything happens (500/502/503/504, 429 with
    ``Retry-After: 1``, or the connection closed). 0 in the tables stands for a closed
    connection. The draw is seeded, so a run can be repeated.
    """

    rate: float
    seed: int = 0
    lost_answers: float = 0.3


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


class LanciumSim:
    """A simulated Lancium Compute service with an in-process driver.

    Use as a context manager (or :meth:`start` / :meth:`stop`); it binds 127.0.0.1 port 0 unless
    told otherwise.  ``url`` is the base URL including ``/api/v1``; ``api_key`` the key to
    exchange for access tokens.  ``settings`` may be modified while running; changes apply to
    the next tick or request.
    """

    def __init__(
        self, settings: Optional[LanciumSimSettings] = None, *, api_key: Optional[str] = None,
        host: str = "127.0.0.1", port: int = 0,
    ) -> None:
        self.lock = threading.RLock()
        self.state = LanciumState(settings if settings is not None else LanciumSimSettings())
        self._secret = secrets.token_bytes(32)
        self._next_jti = 1
        self._revoked_through = 0
        self.api_key = api_key if api_key is not None else self._make_key("sim-user")
        self._api_keys: List[str] = [self.api_key]
        self._address = (host, port)
        self._faults: List[Fault] = []
        self._chaos: Optional[Chaos] = None
        self._chaos_random = random.Random(0)
        self._log_entries: List[LoggedRequest] = []
        self._server: Optional[Server] = None
        self._threads: List[threading.Thread] = []
        self._stop = threading.Event()

    @property
    def settings(self) -> LanciumSimSettings:
        """The live knobs; change fields (or assign a new object) at any time."""
        return self.state.settings

    @settings.setter
    def settings(self, value: LanciumSimSettings) -> None:
        with self.lock:
            self.state.settings = value

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> LanciumSim:
        if self._server is not None:
            raise RuntimeError("simulator already started")
        self._stop.clear()
        self._server = make_server(self._address, self)
        self._threads = [
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                             name="lancium-sim-http", daemon=True),
            threading.Thread(target=self._run_clock, name="lancium-sim-clock", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        logger.info("lancium sim listening on %s", self.url)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stop.set()
        server.shutdown()
        server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def __enter__(self) -> LanciumSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123/api/v1``."""
        if self._server is None:
            raise RuntimeError("simulator not started")
        host, port = self._server.server_address[:2]
        return "http://%s:%d%s" % (cast(str, host), port, BASE_PATH)

    def _run_clock(self) -> None:
        while not self._stop.wait(self.settings.tick):
            with self.lock:
                self.state.tick(time.time())

    # -- tokens --------------------------------------------------------------------------------

    def mint_token(self, lifetime: Optional[float] = None) -> str:
        """A fresh access token, as ``POST /access_tokens`` would return (without ``Bearer``)."""
        with self.lock:
            now = time.time()
            jti = self._next_jti
            self._next_jti += 1
            life = self.settings.token_lifetime if lifetime is None else lifetime
        # Integer NumericDate (what common JWT clients expect), never later than promised.
        return make_jwt(self._secret, {
            "sub": "sim-user", "typ": "access", "jti": jti, "iat": int(now), "exp": int(now + life),
        })

    def revoke_tokens(self) -> None:
        """Make every access token handed out so far invalid (next call answers 401)."""
        with self.lock:
            self._revoked_through = self._next_jti - 1

    def _make_key(self, subject: str) -> str:
        return make_jwt(self._secret, {"sub": subject, "typ": "api_key", "iat": int(time.time()),
                                       "exp": int(time.time()) + 365 * 86400})

    def new_api_key(self, subject: str) -> str:
        """Another API key to the same account (its jobs are the same jobs), for ``subject``."""
        key = self._make_key(subject)
        with self.lock:
            self._api_keys.append(key)
        return key

    def _exchange_key(self, credentials: Optional[str]) -> str:
        with self.lock:
            keys = list(self._api_keys)
        if credentials is None or not any(hmac.compare_digest(credentials.encode(), k.encode()) for k in keys):
            raise ApiError(401, ["Invalid API key"])
        return self.mint_token()

    def _check_access_token(self, credentials: Optional[str]) -> None:
        if credentials is None:
            raise ApiError(401, ["Missing access token"])
        claims = read_jwt(self._secret, credentials)
        if claims is None or claims.get("typ") != "access":
            raise ApiError(401, ["Invalid access token"])
        exp = claims.get("exp")
        jti = claims.get("jti")
        if not isinstance(exp, (int, float)) or time.time() >= exp:
            raise ApiError(401, ["Access token expired"])
        with self.lock:
            if not isinstance(jti, int) or jti <= self._revoked_through:
                raise ApiError(401, ["Access token revoked"])

    # -- faults and log ------------------------------------------------------------------------

    def inject(
        self, status: Optional[int] = None, *, method: Optional[str] = None, path: Optional[str] = None,
        count: int = 1, delay: float = 0.0, message: Optional[str] = None,
        retry_after: Optional[int] = None, lost_answer: bool = False,
    ) -> Fault:
        """Answer the next ``count`` requests matching ``method`` / ``path`` glob with ``status``.

        ``path`` is relative to ``/api/v1`` (``"/jobs/*/submit"``).  ``status`` None plus
        ``delay`` slows matching requests down.  Faults apply before authentication.  With
        ``lost_answer`` the request is served first and then answered ``status`` (0: the
        connection is closed unanswered), as when a proxy times out after the service acted.
        """
        fault = Fault(
            status=status, method=method, path=path, count=count, delay=delay,
            message=message or "injected fault (%s)" % (status if status is not None else "delay"),
            retry_after=retry_after, lost_answer=lost_answer,
        )
        with self.lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self._faults = []
            self._chaos = None

    def chaos(self, rate: float, *, seed: int = 0, lost_answers: float = 0.3) -> None:
        """Fail a share ``rate`` of all later requests at random (see :class:`Chaos`); 0 stops it."""
        with self.lock:
            self._chaos = Chaos(rate, seed, lost_answers) if rate > 0 else None
            self._chaos_random = random.Random(seed)

    def _draw_chaos(self) -> Optional[Tuple[bool, int]]:
        """(lost answer?, answer; 0 = close) for one request; None when it is not hit."""
        with self.lock:
            chaos = self._chaos
            if chaos is None or self._chaos_random.random() >= chaos.rate:
                return None
            if self._chaos_random.random() < chaos.lost_answers:
                return True, self._chaos_random.choice(CHAOS_AFTER)
            return False, self._chaos_random.choice(CHAOS_BEFORE)

    def _take_fault(self, method: str, path: str) -> Optional[Fault]:
        with self.lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.count -= 1
                    if fault.count <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def _log(self, entry: LoggedRequest) -> None:
        with self.lock:
            self._log_entries.append(entry)

    @property
    def request_log(self) -> List[LoggedRequest]:
        """Every request so far, in order (a copy)."""
        with self.lock:
            return list(self._log_entries)

    def count(self, method: Optional[str] = None, path: Optional[str] = None,
              status: Optional[int] = None) -> int:
        """Number of logged requests matching ``method``, ``path`` glob and ``status``."""
        return sum(
            1 for r in self.request_log
            if (method is None or r.method == method.upper())
            and (path is None or fnmatch.fnmatchcase(r.path, path))
            and (status is None or r.status == status)
        )

    def clear_log(self) -> None:
        with self.lock:
            self._log_entries = []

    # -- state ---------------------------------------------------------------------------------

    def jobs(self) -> Dict[int, JobJSON]:
        """All jobs by id, as ``GET /jobs/{id}`` would show them (copies)."""
        with self.lock:
            return {job_id: self.state.show_job(job_id) for job_id in self.state.jobs}

    def job(self, job_id: int) -> JobJSON:
        """One job (a copy); KeyError if it does not exist (or has vanished)."""
        with self.lock:
            if job_id not in self.state.jobs:
                raise KeyError(job_id)
            return self.state.show_job(job_id)

    def input_files(self, job_id: int) -> List[InputFileJSON]:
        with self.lock:
            return [self.state.show_input(job_id, i) for i in self.state.jobs[job_id].inputs]

    def input_bytes(self, job_id: int, data_id: int) -> bytes:
        """Bytes received so far for an input file (zeros where nothing arrived)."""
        with self.lock:
            return bytes(self.state.jobs[job_id].inputs[data_id].content)

    def outputs(self, job_id: int) -> Dict[str, bytes]:
        """Output files of a finished job by name (empty before it ends, or when terminated)."""
        with self.lock:
            return dict(self.state.jobs[job_id].outputs)

    def never_start(self, job_id: int, flag: bool = True) -> None:
        """Keep the job ``queued`` forever (or release it again)."""
        with self.lock:
            self.state.jobs[job_id].never_start = flag

    def advance(
        self, job_id: int, status: str, *, exit_code: Optional[int] = None,
        error_string: Optional[str] = None, cost: Optional[str] = None,
        execution_time: Optional[int] = None, memory_used: Optional[int] = None,
        hold: bool = True,
    ) -> JobJSON:
        """Force a job into ``status`` (``submitted`` .. ``finished`` / ``error``).

        Finishing fills ``completed_at``, ``exit_code`` (default 0 for finished),
        ``execution_time``, ``cost``, ``memory_used`` and the outputs; ``error`` sets
        ``error_string`` (default "failed").  With ``hold`` (default) the clock no longer moves
        the job, except for terminate and delete.
        """
        with self.lock:
            return self.state.advance(
                job_id, status, time.time(), exit_code=exit_code, error_string=error_string,
                cost=cost, execution_time=execution_time, memory_used=memory_used, hold=hold,
            )

    def wait_for(self, job_id: int, statuses: Union[str, Sequence[str]],
                 timeout: float = 10.0) -> Optional[JobJSON]:
        """Poll the state (not over HTTP) until the job reaches one of ``statuses``.

        ``"gone"`` among ``statuses`` matches a job that has vanished (returns None).  Raises
        TimeoutError naming the last status.
        """
        wanted = (statuses,) if isinstance(statuses, str) else tuple(statuses)
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                job = self.state.jobs.get(job_id)
                status = job.status if job is not None else "gone"
                if status in wanted:
                    return self.state.show_job(job_id) if job is not None else None
            if time.monotonic() > deadline:
                raise TimeoutError("job %d is %s, not %s after %.1f s" % (job_id, status, wanted, timeout))
            time.sleep(min(0.02, self.settings.tick))


# --------------------------------------------------------------------------------------------
# Stand-alone server (``podgahp sim lancium --port N``)
# --------------------------------------------------------------------------------------------


def serve(
    port: int, key_file: str, *, host: str = "127.0.0.1", settings: Optional[LanciumSimSettings] = None,
    api_key: Optional[str] = None, url_file: Optional[str] = None,
    stop: Optional[threading.Event] = None, out: Optional[IO[str]] = None,
) -> None:
    """Run a simulator until interrupted (or ``stop`` is set).

    Writes the API key to ``key_file`` (mode 0600, one line) and, if given, the base URL to
    ``url_file``, then prints one line ``lancium sim: url=<base url> key_file=<path>`` to ``out``
    (default stdout).  ``port`` 0 picks a free port; read the URL from the printed line or
    ``url_file``.
    """
    sim = LanciumSim(settings, api_key=api_key, host=host, port=port)
    with sim:
        _write_private(key_file, sim.api_key + "\n")
        if url_file is not None:
            _write_private(url_file, sim.url + "\n")
        stream = out if out is not None else sys.stdout
        stream.write("lancium sim: url=%s key_file=%s\n" % (sim.url, key_file))
        stream.flush()
        event = stop if stop is not None else threading.Event()
        # Handlers for both signals, set explicitly: a parent started in the background (nohup,
        # `make test &`) may have left SIGINT ignored, and SIGTERM is what service managers send.
        handlers: Dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                handlers[signum] = signal.signal(signum, lambda *_: event.set())
        try:
            while not event.wait(0.5):
                pass
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)


def _write_private(path: str, text: str) -> None:
    tmp = "%s.tmp%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
