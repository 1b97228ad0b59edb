"""The kubelet's HTTPS endpoint of a simulated node: ``GET /containerLogs/{namespace}/{pod}/{container}``
(``tailLines``, ``limitBytes``, ``follow``), through which the API server's ``pods/log`` reaches the
node (so ``kubectl logs`` and podgahp's own log read go through the API server), and ``/healthz``.

Served on 127.0.0.1 with a certificate of its own; a client certificate is asked for and, when a CA
is given (the API server's ``--kubelet-client-certificate`` is signed by it), required.
Owns the HTTP side only: what a container printed comes from a ``LogSource``.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, Optional, Tuple

import trustme

log = logging.getLogger(__name__)

LogSource = Callable[[str, str, str], "Optional[Tuple[List[str], bool] | str]"]
"""(namespace, pod, container) -> (the lines printed so far, whether the container has ended); the
reason a container that never started waits (``ContainerCreating``, ``ImagePullBackOff``...); or None
when the node has no such container."""


class KubeletServer:
    """The endpoint, on its own thread; :attr:`port` once started."""

    def __init__(self, logs: LogSource, client_ca_pem: Optional[bytes] = None, host: str = "127.0.0.1") -> None:
        self.logs = logs
        ca = trustme.CA(organization_name="podgahp simulated node")
        cert = ca.issue_cert(host, "localhost", common_name="podgahp-sim-kubelet")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        cert.configure_cert(context)
        if client_ca_pem:
            context.load_verify_locations(cadata=client_ca_pem.decode("ascii"))
            context.verify_mode = ssl.CERT_REQUIRED
        self.ca_pem = ca.cert_pem.bytes()
        server = self
        self._stopping = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("kubelet api: " + format, *args)

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> "KubeletServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="sim-node-kubelet-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            _reply(request, 200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            _reply(request, 404, b"404 page not found\n")
            return
        found = self.logs(parts[1], parts[2], parts[3])
        if found is None:
            _reply(request, 404, ("container %s of pod %s/%s not found on this node\n"
                                  % (parts[3], parts[1], parts[2])).encode())
            return
        if isinstance(found, str):
            # as the kubelet's validateContainerLogStatus: the API server passes it on as a BadRequest
            _reply(request, 400, ('container "%s" in pod "%s" is waiting to start: %s'
                                  % (parts[3], parts[2], found)).encode())
            return
        lines, ended = found
        tail = _int(query.get("tailLines"))
        limit = _int(query.get("limitBytes"))
        selected = lines if tail is None or tail < 0 else (lines[len(lines) - tail:] if tail else [])
        text = "".join(line + "\n" for line in selected).encode()
        if limit is not None and limit > 0:
            text = text[:limit]
        if query.get("follow") not in ("true", "1", "True") or ended:
            _reply(request, 200, text)
            return
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        sent = len(lines)
        try:
            _chunk(request, text)
            while not self._stopping.is_set():
                again = self.logs(parts[1], parts[2], parts[3])
                if again is None or isinstance(again, str):
                    break
                more, ended = again
                if len(more) > sent:
                    _chunk(request, "".join(line + "\n" for line in more[sent:]).encode())
                    sent = len(more)
                elif ended:
                    break
                else:
                    time.sleep(0.2)
            request.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client went away


def _chunk(request: BaseHTTPRequestHandler, data: bytes) -> None:
    if data:
        request.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        request.wfile.flush()


def _reply(request: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    request.send_response(status)
    request.send_header("Content-Type", "text/plain")
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def _int(value: Optional[str]) -> Optional[int]:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
