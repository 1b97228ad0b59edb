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
import re
import secrets
import signal
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Callable, Dict, List, NamedTuple, Optional, Pattern, Sequence, Tuple, Union, cast
from urllib.parse import unquote, urlsplit

from .fields import (
    API_VERSION,
    DEFAULTS_CATALOGUE,
    ENV_ERROR,
    ENV_EXIT_CODE,
    ENV_MEMORY_USED,
    ENV_NEVER_START,
    ENV_QUEUE_SECONDS,
    ENV_RUN_SECONDS,
    ENV_STDERR,
    ENV_STDOUT,
    GPU_CATALOGUE,
    LIMITS_CATALOGUE,
    MPI_CATALOGUE,
    QOS_CATALOGUE,
    QOS_LEVELS,
    RESOURCE_CATALOGUE,
    STATUSES,
    ApiError,
    InputFileJSON,
    JobJSON,
    LanciumSimSettings,
    iso,
)
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

BASE_PATH = "/api/v1"


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
# Driver records
# --------------------------------------------------------------------------------------------


class LoggedRequest(NamedTuple):
    """One request as the simulator saw it; ``path`` is relative to ``/api/v1``."""

    method: str
    path: str
    status: int


@dataclass
class Fault:
    """Answer the next ``count`` requests matching ``method`` and ``path`` (a glob) abnormally.

    ``status`` None with a ``delay`` only slows the request down; otherwise the request is
    answered with ``status`` and ``{"errors": [message]}`` (plus ``Retry-After`` when set)
    without touching any state.
    """

    status: Optional[int]
    method: Optional[str] = None
    path: Optional[str] = None
    count: int = 1
    delay: float = 0.0
    message: str = "injected fault"
    retry_after: Optional[int] = None
    lost_answer: bool = False
    """Serve the request first, then answer ``status`` instead (0: close the connection unanswered)."""

    def matches(self, method: str, path: str) -> bool:
        return (
            self.count > 0
            and (self.method is None or self.method.upper() == method)
            and (self.path is None or fnmatch.fnmatchcase(path, self.path))
        )


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


@dataclass
class _Reply:
    status: int
    body: Union[object, bytes, None] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------

_Handler = Callable[["_RequestHandler", Tuple[str, ...], Optional[bytes]], _Reply]

ROUTES: List[Tuple[str, Pattern[str], str]] = [
    # (method, path below /api/v1, operationId of the description; it reuses ``show_gpus`` for
    # ``/resources/qos``, which is served here as ``show_qos``)
    (m, re.compile(p + r"\Z"), name)
    for m, p, name in [
        ("POST", r"/access_tokens", "create_access_token"),
        ("GET", r"/jobs", "show_jobs"),
        ("POST", r"/jobs", "create_job"),
        ("GET", r"/jobs/(\d+)", "show_job"),
        ("PUT", r"/jobs/(\d+)", "update_job"),
        ("DELETE", r"/jobs/(\d+)", "delete_job"),
        ("POST", r"/jobs/(\d+)/submit", "submit_job"),
        ("POST", r"/jobs/(\d+)/terminate", "terminate_job"),
        ("POST", r"/jobs/(\d+)/data", "create_input_file"),
        ("GET", r"/jobs/(\d+)/data/(\d+)", "get_input_file"),
        ("PATCH", r"/jobs/(\d+)/data/(\d+)", "upload_input_file"),
        ("DELETE", r"/jobs/(\d+)/data/(\d+)", "delete_input_file"),
        ("POST", r"/jobs/(\d+)/data/(\d+)/reupload", "reupload_input_data"),
        ("GET", r"/jobs/(\d+)/output/(.+)", "download_job_output"),
        ("GET", r"/resources", "show_resources"),
        ("GET", r"/resources/gpus", "show_gpus"),
        ("GET", r"/resources/qos", "show_qos"),
        ("GET", r"/resources/mpi", "show_mpi"),
        ("GET", r"/resources/defaults", "show_defaults"),
        ("GET", r"/resources/limits", "show_limits"),
    ]
]

_CATALOGUES: Dict[str, Tuple[str, object]] = {
    "show_resources": ("resources", RESOURCE_CATALOGUE),
    "show_gpus": ("gpus", GPU_CATALOGUE),
    "show_qos": ("qos", QOS_CATALOGUE),
    "show_mpi": ("mpi_versions", MPI_CATALOGUE),
    "show_defaults": ("defaults", DEFAULTS_CATALOGUE),
    "show_limits": ("limits", LIMITS_CATALOGUE),
}


class _SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    #: A real service's listen backlog: the standard library's 5 drops the connections of a client
    #: opening many at once, which then wait a second for their SYN to be sent again.
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: Tuple[str, int], sim: LanciumSim) -> None:
        self.sim = sim
        super().__init__(address, _RequestHandler)

    def handle_error(self, request: object, client_address: object) -> None:
        # The stdlib prints to stderr; a client that gave up (timeout tests) is routine.
        if isinstance(sys.exc_info()[1], ConnectionError):
            logger.debug("lancium sim: client %s went away", client_address)
        else:
            logger.exception("lancium sim: error while serving %s", client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nginx/1.17.0"  # what real responses carried
    sys_version = ""
    timeout = 30

    @property
    def sim(self) -> LanciumSim:
        return cast(_SimHTTPServer, self.server).sim

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, delayed ACKs cost ~40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    # -- plumbing ------------------------------------------------------------------------------

    def _read_body(self) -> Optional[bytes]:
        """The request body; None if the request had neither Content-Length nor chunked coding."""
        length = self.headers.get("Content-Length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                self.close_connection = True
                return None
            return self.rfile.read(n) if n > 0 else b""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self._chunked = True
            parts = []
            while True:
                size_line = self.rfile.readline(1024)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(parts)
        return None

    def _handle(self, method: str) -> None:
        started = time.monotonic()
        self._chunked = False
        path = unquote(urlsplit(self.path).path)
        rel = path[len(BASE_PATH):] if path.startswith(BASE_PATH + "/") else path
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            body = None
        reply, lost_as = self._fault(method, rel)
        chaos = self.sim._draw_chaos() if reply is None and lost_as is None else None
        if chaos is not None and chaos[0]:
            lost_as = chaos[1]
        elif chaos is not None:
            reply = self._chaos_reply(chaos[1])
        if reply is None:
            try:
                reply = self._route(method, rel, path.startswith(BASE_PATH + "/"), body)
            except ApiError as e:
                reply = _Reply(e.status, {"errors": e.errors})
            except Exception:  # the request boundary: never kill the server thread
                logger.exception("lancium sim failed on %s %s", method, path)
                reply = _Reply(500, {"errors": ["Internal server error"]})
            if lost_as is not None:
                reply = self._chaos_reply(lost_as)
        self.sim._log(LoggedRequest(method, rel, reply.status))
        if reply.status == 0:
            self.close_connection = True  # no answer at all: the client sees the connection close
            return
        self._send(reply, method, time.monotonic() - started)

    @staticmethod
    def _chaos_reply(status: int) -> _Reply:
        if status == 0:
            return _Reply(0)
        if status == 429:
            return _Reply(429, {"errors": ["Rate limit exceeded"]}, {"Retry-After": "1"})
        if status in (502, 504):  # from the proxy in front of the service: not JSON
            text = "Bad Gateway" if status == 502 else "Gateway Time-out"
            return _Reply(status, ("<html><head><title>%d %s</title></head><body><center><h1>%d %s</h1>"
                                   "</center><hr><center>nginx</center></body></html>"
                                   % (status, text, status, text)).encode())
        return _Reply(status, {"errors": ["Internal server error"]})

    def _fault(self, method: str, rel: str) -> Tuple[Optional[_Reply], Optional[int]]:
        """(the reply of an injected fault, or the status a served request is answered with instead)."""
        fault = self.sim._take_fault(method, rel)
        if fault is None:
            return None, None
        if fault.delay > 0:
            time.sleep(fault.delay)
        if fault.status is None:
            return None, None
        if fault.lost_answer:
            return None, fault.status
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        return _Reply(fault.status, {"errors": [fault.message]}, headers), None

    def _send(self, reply: _Reply, method: str, elapsed: float) -> None:
        if isinstance(reply.body, bytes):
            payload = reply.body
            content_type = "application/octet-stream"
        elif reply.body is None or reply.status == 204:
            payload = b""
            content_type = ""
        else:
            payload = json.dumps(reply.body).encode("utf-8")
            content_type = "application/json; charset=utf-8"
        self.send_response(reply.status)
        if content_type:
            self.send_header("Content-Type", content_type)
        if reply.status != 204:
            self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Current-API-Version", API_VERSION)
        self.send_header("X-Deprecated-API-Used", "false")
        self.send_header("X-Request-Id", str(uuid.uuid4()))
        self.send_header("X-Runtime", "%.6f" % elapsed)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if method != "HEAD" and reply.status != 204:
            self.wfile.write(payload)

    def _bearer(self) -> Optional[str]:
        value = self.headers.get("Authorization", "")
        scheme, _, credentials = value.partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return None
        return credentials.strip()

    def _route(self, method: str, rel: str, under_base: bool, body: Optional[bytes]) -> _Reply:
        if not under_base:
            raise ApiError(404, ["No route matches %s %s" % (method, self.path)])
        for route_method, pattern, name in ROUTES:
            m = pattern.match(rel)
            if m and (route_method == method or (method == "HEAD" and route_method == "GET")):
                if name != "create_access_token":
                    self.sim._check_access_token(self._bearer())
                handler = cast(_Handler, getattr(_RequestHandler, "_op_" + name, None) or _RequestHandler._op_catalogue)
                self._operation = name
                return handler(self, m.groups(), body)
        raise ApiError(404, ["No route matches %s %s" % (method, rel)])

    # -- operations ----------------------------------------------------------------------------

    def _json(self, body: Optional[bytes]) -> object:
        if not body or not body.strip():
            return None
        try:
            return json.loads(body)
        except ValueError:
            # Keyed like ``invalid_job`` so create/update answer their declared 400 shape.
            raise ApiError(400, {"body": ["is not valid JSON"]}) from None

    def _op_create_access_token(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        token = self.sim._exchange_key(self._bearer())
        return _Reply(201, None, {"Authorization": "Bearer " + token})

    def _op_show_jobs(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            return _Reply(200, {"jobs": self.sim.state.list_jobs()})

    def _op_create_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        data = self._json(body)
        with self.sim.lock:
            return _Reply(201, {"job": self.sim.state.create_job(data, time.time())})

    def _op_show_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            return _Reply(200, {"job": self.sim.state.show_job(int(args[0]))})

    def _op_update_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        data = self._json(body)
        with self.sim.lock:
            return _Reply(200, {"job": self.sim.state.update_job(int(args[0]), data, time.time())})

    def _op_delete_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            self.sim.state.delete_job(int(args[0]), time.time())
        return _Reply(202, {})

    def _op_submit_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            self.sim.state.submit_job(int(args[0]), time.time())
        return _Reply(202, {})

    def _op_terminate_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            self.sim.state.terminate_job(int(args[0]), time.time())
        return _Reply(202, {})

    def _op_create_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        data = self._json(body)
        with self.sim.lock:
            return _Reply(201, {"input_file": self.sim.state.create_input(int(args[0]), data)})

    def _op_get_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            return _Reply(200, {"input_file": self.sim.state.show_input(int(args[0]), int(args[1]))})

    def _op_upload_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        if body is None or self._chunked:
            # Without Content-Length the chunk boundaries are unknown; answer and drop the line.
            self.close_connection = True
            body = None
        with self.sim.lock:
            result = self.sim.state.upload_chunk(
                int(args[0]), int(args[1]), self.headers.get("Upload-Offset"), body,
                self.headers.get("Upload-Checksum"),
            )
        return _Reply(201 if result["upload_complete"] else 202, result)

    def _op_delete_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            self.sim.state.delete_input(int(args[0]), int(args[1]))
        return _Reply(202, {})

    def _op_reupload_input_data(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            return _Reply(202, {"input_file": self.sim.state.reupload_input(int(args[0]), int(args[1]))})

    def _op_download_job_output(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        with self.sim.lock:
            out = self.sim.state.output(int(args[0]), args[1])
        if out.progress is not None:
            return _Reply(202, {"progress": out.progress})
        size = len(out.content)
        if size == 0:
            return _Reply(204, None)
        headers = {
            "X-File-Size": str(size),
            "X-Last-Modified": iso(out.created),
            "x-Date-Created": iso(out.created),
        }
        wanted = _parse_range(self.headers.get("Range"), size)
        if wanted is None:
            return _Reply(200, out.content, headers)
        if wanted == (-1, -1):
            return _Reply(416, {"errors": ["Range not satisfiable"]}, {"Content-Range": "bytes */%d" % size})
        start, end = wanted
        headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
        return _Reply(206, out.content[start:end + 1], headers)

    def _op_catalogue(self, args: Tuple[str, ...], body: Optional[bytes]) -> _Reply:
        key, items = _CATALOGUES[self._operation]
        return _Reply(200, {key: items})


def _parse_range(header: Optional[str], size: int) -> Optional[Tuple[int, int]]:
    """Inclusive byte range of a single-range ``Range`` header; None = whole file; (-1, -1) = 416."""
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header)
    if not m or m.group(1) == m.group(2) == "":
        return None  # unsupported forms (several ranges, other units) are ignored, per RFC 9110
    if m.group(1) == "":
        length = int(m.group(2))
        return (max(size - length, 0), size - 1) if length > 0 else (-1, -1)
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size or end < start:
        return (-1, -1)
    return start, min(end, size - 1)


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
        self._server: Optional[_SimHTTPServer] = None
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
        self._server = _SimHTTPServer(self._address, self)
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
