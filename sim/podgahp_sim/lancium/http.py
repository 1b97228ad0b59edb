"""The Lancium simulator's REST routes (``/api/v1``, API 1.5.0) on the simulators' shared HTTP core
(:mod:`podgahp_sim.http`): each route answers as the real service does, from the model
(:mod:`.model`) the simulator (:mod:`.sim`) holds, with the faults and chaos the driver set injected
before or after it; every request goes into the driver's log.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import (Any, Callable, ContextManager, Dict, List, NamedTuple, Optional, Pattern, Protocol, Tuple, Union,
                    cast)
from urllib.parse import unquote, urlsplit

from .. import http as core
from .fields import (API_VERSION, DEFAULTS_CATALOGUE, GPU_CATALOGUE, LIMITS_CATALOGUE, MPI_CATALOGUE, QOS_CATALOGUE,
                     RESOURCE_CATALOGUE, ApiError, iso)

from .model import LanciumState

logger = logging.getLogger(__name__)

BASE_PATH = "/api/v1"


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


@dataclass
class Reply:
    status: int
    body: Union[object, bytes, None] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# HTTP layer
# --------------------------------------------------------------------------------------------

_Route = Callable[["Handler", Tuple[str, ...], Optional[bytes]], Reply]

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


class Service(Protocol):
    """What the routes need of the simulator (:class:`~podgahp_sim.lancium.sim.LanciumSim` is one): its
    lock and model, its tokens, and the driver's faults, chaos and request log."""

    @property
    def lock(self) -> ContextManager[Any]:
        ...

    @property
    def state(self) -> LanciumState:
        ...

    def _draw_chaos(self) -> Optional[Tuple[bool, int]]:
        ...

    def _take_fault(self, method: str, path: str) -> Optional[Fault]:
        ...

    def _log(self, entry: LoggedRequest) -> None:
        ...

    def _exchange_key(self, credentials: Optional[str]) -> str:
        ...

    def _check_access_token(self, credentials: Optional[str]) -> None:
        ...


class Server(core.Server):
    """The core server bound to one simulator."""

    def __init__(self, address: Tuple[str, int], sim: Service) -> None:
        self.sim = sim
        super().__init__(address, Handler)


def make_server(address: Tuple[str, int], sim: Service) -> Server:
    return Server(address, sim)


class Handler(core.Handler):
    """Lancium's routes on the simulators' HTTP core, answering as the real service's front does."""

    server_version = "nginx/1.17.0"  # what real responses carried
    timeout = 30

    @property
    def sim(self) -> Service:
        return cast(Server, self.server).sim

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

    def _handle(self, method: str) -> None:
        started = time.monotonic()
        self._chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        path = unquote(urlsplit(self.path).path)
        rel = path[len(BASE_PATH):] if path.startswith(BASE_PATH + "/") else path
        try:
            body = self.read_body()
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
                reply = Reply(e.status, {"errors": e.errors})
            except Exception:  # the request boundary: never kill the server thread
                logger.exception("lancium sim failed on %s %s", method, path)
                reply = Reply(500, {"errors": ["Internal server error"]})
            if lost_as is not None:
                reply = self._chaos_reply(lost_as)
        self.sim._log(LoggedRequest(method, rel, reply.status))
        if reply.status == 0:
            self.close_connection = True  # no answer at all: the client sees the connection close
            return
        self._send(reply, method, time.monotonic() - started)

    @staticmethod
    def _chaos_reply(status: int) -> Reply:
        if status == 0:
            return Reply(0)
        if status == 429:
            return Reply(429, {"errors": ["Rate limit exceeded"]}, {"Retry-After": "1"})
        if status in (502, 504):  # from the proxy in front of the service: not JSON
            text = "Bad Gateway" if status == 502 else "Gateway Time-out"
            return Reply(status, ("<html><head><title>%d %s</title></head><body><center><h1>%d %s</h1>"
                                   "</center><hr><center>nginx</center></body></html>"
                                   % (status, text, status, text)).encode())
        return Reply(status, {"errors": ["Internal server error"]})

    def _fault(self, method: str, rel: str) -> Tuple[Optional[Reply], Optional[int]]:
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
        return Reply(fault.status, {"errors": [fault.message]}, headers), None

    def _send(self, reply: Reply, method: str, elapsed: float) -> None:
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

    def _route(self, method: str, rel: str, under_base: bool, body: Optional[bytes]) -> Reply:
        if not under_base:
            raise ApiError(404, ["No route matches %s %s" % (method, self.path)])
        for route_method, pattern, name in ROUTES:
            m = pattern.match(rel)
            if m and (route_method == method or (method == "HEAD" and route_method == "GET")):
                if name != "create_access_token":
                    self.sim._check_access_token(self._bearer())
                handler = cast(_Route, getattr(Handler, "_op_" + name, None) or Handler._op_catalogue)
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

    def _op_create_access_token(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        token = self.sim._exchange_key(self._bearer())
        return Reply(201, None, {"Authorization": "Bearer " + token})

    def _op_show_jobs(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            return Reply(200, {"jobs": self.sim.state.list_jobs()})

    def _op_create_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        data = self._json(body)
        with self.sim.lock:
            return Reply(201, {"job": self.sim.state.create_job(data, time.time())})

    def _op_show_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            return Reply(200, {"job": self.sim.state.show_job(int(args[0]))})

    def _op_update_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        data = self._json(body)
        with self.sim.lock:
            return Reply(200, {"job": self.sim.state.update_job(int(args[0]), data, time.time())})

    def _op_delete_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            self.sim.state.delete_job(int(args[0]), time.time())
        return Reply(202, {})

    def _op_submit_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            self.sim.state.submit_job(int(args[0]), time.time())
        return Reply(202, {})

    def _op_terminate_job(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            self.sim.state.terminate_job(int(args[0]), time.time())
        return Reply(202, {})

    def _op_create_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        data = self._json(body)
        with self.sim.lock:
            return Reply(201, {"input_file": self.sim.state.create_input(int(args[0]), data)})

    def _op_get_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            return Reply(200, {"input_file": self.sim.state.show_input(int(args[0]), int(args[1]))})

    def _op_upload_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        if body is None or self._chunked:
            # Without Content-Length the chunk boundaries are unknown; answer and drop the line.
            self.close_connection = True
            body = None
        with self.sim.lock:
            result = self.sim.state.upload_chunk(
                int(args[0]), int(args[1]), self.headers.get("Upload-Offset"), body,
                self.headers.get("Upload-Checksum"),
            )
        return Reply(201 if result["upload_complete"] else 202, result)

    def _op_delete_input_file(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            self.sim.state.delete_input(int(args[0]), int(args[1]))
        return Reply(202, {})

    def _op_reupload_input_data(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            return Reply(202, {"input_file": self.sim.state.reupload_input(int(args[0]), int(args[1]))})

    def _op_download_job_output(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        with self.sim.lock:
            out = self.sim.state.output(int(args[0]), args[1])
        if out.progress is not None:
            return Reply(202, {"progress": out.progress})
        size = len(out.content)
        if size == 0:
            return Reply(204, None)
        headers = {
            "X-File-Size": str(size),
            "X-Last-Modified": iso(out.created),
            "x-Date-Created": iso(out.created),
        }
        wanted = _parse_range(self.headers.get("Range"), size)
        if wanted is None:
            return Reply(200, out.content, headers)
        if wanted == (-1, -1):
            return Reply(416, {"errors": ["Range not satisfiable"]}, {"Content-Range": "bytes */%d" % size})
        start, end = wanted
        headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
        return Reply(206, out.content[start:end + 1], headers)

    def _op_catalogue(self, args: Tuple[str, ...], body: Optional[bytes]) -> Reply:
        key, items = _CATALOGUES[self._operation]
        return Reply(200, {key: items})


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


