"""A fault-injecting HTTPS proxy in front of the real API server, for the tests that inject 5xx
answers and latency (marked ``fault_proxy``) to run on the real engine too.

It forwards each request as it came (its bearer token with it) and streams back the server's answer
(watches included), but for the next requests that match a fault: those get the injected status with
the Status body a real API server sends (and ``Retry-After``), or wait the injected delay first. Its
log of requests is KubeSim's (:class:`RequestRecord`), so ``fail_next``, ``delay_next`` and
``requests`` read the same on both engines. It serves a certificate of the control plane's CA on
127.0.0.1, so the kubeconfig of the real engine only changes its server.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional

from podgahp_sim.k8s.http import Fault, RequestRecord, fault_body, take_fault
from podgahp_sim.kube.pki import KeyPair

#: Headers of the server's answer the proxy sets itself (every answer closes its connection).
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class FaultProxy:
    """Start with :meth:`start`, stop with :meth:`stop`."""

    def __init__(self, upstream: str, ca_pem: bytes, serving: KeyPair) -> None:
        target = urllib.parse.urlsplit(upstream)
        self.upstream = (str(target.hostname), int(target.port or 443))
        self.client_context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
        self.server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_context.load_cert_chain(str(serving.cert), str(serving.key))
        self.faults: List[Fault] = []
        self.log: List[RequestRecord] = []
        self.lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return "https://127.0.0.1:%d" % self._server.server_address[1]

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # a stream is sent chunked; every answer closes its connection

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (ConnectionError, ssl.SSLError):
                    self.close_connection = True

            def do_GET(self) -> None:
                proxy._forward(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = self.server_context.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-proxy",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ faults and the request log

    def fail_next(self, count: int = 1, status: int = 500, method: str = ".*", path: str = ".*",
                  retry_after: Optional[int] = None, delay: float = 0.0) -> Fault:
        """As ``KubeSim.fail_next``: the next ``count`` requests matching get ``status``."""
        fault = Fault(re.compile(method), re.compile(path), status, count, None, retry_after, delay)
        with self.lock:
            self.faults.append(fault)
        return fault

    def delay_next(self, seconds: float, count: int = 1, method: str = ".*", path: str = ".*") -> Fault:
        """As ``KubeSim.delay_next``: the next matching requests wait ``seconds`` before they are forwarded."""
        return self.fail_next(count, 0, method, path, delay=seconds)

    def requests(self, method: Optional[str] = None, path: Optional[str] = None) -> List[RequestRecord]:
        pattern = re.compile(path) if path is not None else None
        with self.lock:
            return [r for r in self.log if (method is None or r.method == method)
                    and (pattern is None or pattern.search(r.path))]

    def _take(self, method: str, path: str) -> Optional[Fault]:
        with self.lock:
            return take_fault(self.faults, method, path)

    # ------------------------------------------------------------------ forwarding

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in handler.headers.items() if k.lower() != "authorization"}
        fault = self._take(handler.command, url.path)
        if fault is not None and fault.delay:
            time.sleep(fault.delay)
        if fault is not None and fault.status:
            self._record(handler.command, url.path, query, fault.status, headers)
            answer = fault_body(fault.status, fault.retry_after)
            data = json.dumps(answer).encode()
            handler.send_response(fault.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.send_header("Connection", "close")
            if fault.retry_after is not None:
                handler.send_header("Retry-After", str(fault.retry_after))
            handler.end_headers()
            handler.wfile.write(data)
            handler.close_connection = True
            return
        upstream = http.client.HTTPSConnection(*self.upstream, context=self.client_context, timeout=None)
        try:
            sent = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
            upstream.request(handler.command, handler.path, body=body or None, headers=sent)
            answer = upstream.getresponse()
            self._record(handler.command, url.path, query, answer.status, headers)
            handler.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in _HOP_BY_HOP:
                    handler.send_header(name, value)
            length = answer.getheader("Content-Length")
            # a stream (a watch) goes on chunked, as the server sent it: clients read a chunk as it comes
            handler.send_header("Content-Length" if length is not None else "Transfer-Encoding",
                                length if length is not None else "chunked")
            handler.send_header("Connection", "close")
            handler.end_headers()
            while True:
                data = answer.read1(65536)
                if length is None:
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                elif data:
                    handler.wfile.write(data)
                handler.wfile.flush()
                if not data:
                    break
        except (ConnectionError, ssl.SSLError):
            pass  # the client went away (a watch it closed): so does the upstream connection
        finally:
            upstream.close()
            handler.close_connection = True

    def _record(self, method: str, path: str, query: Dict[str, str], status: int, headers: Dict[str, str]) -> None:
        with self.lock:
            self.log.append(RequestRecord(method, path, query, status, headers))
