"""The HTTP core every simulator serves on: a threaded server and a request handler base that behave as
a real service's front does where a client can tell, so the product is measured against the service
and not against the standard library's defaults.

* The listen backlog is the system's maximum (the standard library's 5 drops the connections of a
  client opening dozens at once, which then wait a second for their SYN to be sent again).
* ``TCP_NODELAY`` on every connection (a reply's last segment would otherwise wait for the client's
  delayed ACK, about 40 ms a request).
* HTTPS when given a TLS context, the handshake on the connection's own thread (a slow or broken
  client cannot stall the accept loop).
* Open connections are tracked, so that stopping a simulator also cuts keep-alive and streaming
  sockets; a client that goes away is logged briefly, never a traceback on stderr.
* Request bodies are read as sent (``Content-Length`` or chunked), bounded.

Each simulator's ``http`` module subclasses :class:`Handler` with its routes.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Set, Tuple

log = logging.getLogger(__name__)


class Server(ThreadingHTTPServer):
    """A threaded server that tracks its open connections (see the module docstring)."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address: Tuple[str, int], handler: Any, tls: Optional[ssl.SSLContext] = None) -> None:
        super().__init__(address, handler)
        self.connections: Set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.tls = tls

    def get_request(self) -> Tuple[socket.socket, Any]:
        conn, address = super().get_request()
        if self.tls is not None:
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away or failed the TLS handshake is the client's business, as on a real
        # service: a line, not a traceback on stderr.
        log.info("connection from %s failed", client_address, exc_info=log.isEnabledFor(logging.DEBUG))

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            open_now = list(self.connections)
            self.connections.clear()
        for conn in open_now:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Handler(BaseHTTPRequestHandler):
    """The request handler base: HTTP/1.1 keep-alive, ``TCP_NODELAY``, quiet logs, bounded bodies."""

    protocol_version = "HTTP/1.1"
    server_version = "podgahp-sim"
    sys_version = ""
    #: Largest body kept; the rest of a longer one is read and dropped (the connection stays usable).
    max_body_bytes = 64 * 1024 * 1024

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s %s", self.address_string(), format % args)

    def read_body(self) -> Optional[bytes]:
        """The request body, up to one byte past :attr:`max_body_bytes`; None when the request has
        neither ``Content-Length`` nor chunked coding. ValueError for a length or chunk size that is
        not a number (the caller closes the connection)."""
        length = self.headers.get("Content-Length")
        if length is not None:
            return self._read_length(int(length))
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts, size_kept = [], 0
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunk = self.rfile.read(size)
                if size_kept <= self.max_body_bytes:
                    parts.append(chunk)
                    size_kept += len(chunk)
                self.rfile.readline(1024)
            return b"".join(parts)[:self.max_body_bytes + 1]
        return None

    def _read_length(self, length: int) -> bytes:
        if length <= 0:
            return b""
        keep = min(length, self.max_body_bytes + 1)
        body = self.rfile.read(keep)
        left = length - keep
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            left -= len(chunk)
        return body

    def peer_closed(self) -> bool:
        """Whether the client went away (a stream polls this between events)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            if isinstance(self.connection, ssl.SSLSocket):
                # TLS cannot peek: a streaming client sends nothing more, so what is readable is its
                # close_notify or the end of the connection.
                previous = self.connection.gettimeout()
                self.connection.settimeout(0.5)
                try:
                    return bool(self.connection.recv(1) == b"")
                finally:
                    self.connection.settimeout(previous)
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except (OSError, ValueError):
            return True
