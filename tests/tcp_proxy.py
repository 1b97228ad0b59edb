"""A TCP forwarder on 127.0.0.1 in front of a loopback server, for tests that take a client away from
a real API server and bring it back: :meth:`CutProxy.cut` closes every connection through it and
closes each new one as it comes, until :meth:`CutProxy.restore`. TLS passes through untouched (the
server's certificate names 127.0.0.1, whatever the port)."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import List, Optional, Tuple


class CutProxy:
    def __init__(self, target: Tuple[str, int]) -> None:
        assert target[0] == "127.0.0.1", "loopback only"
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: List[socket.socket] = []
        self._cut = False
        self._closed = False
        self.refused = 0
        """How many connections came while cut (each closed at once)."""
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        return "https://127.0.0.1:%d" % self.port

    def start(self) -> "CutProxy":
        self._thread = threading.Thread(target=self._accept, name="cut-proxy", daemon=True)
        self._thread.start()
        return self

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._open = self._open, []
        for s in sockets:
            _close(s)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        _close(self._listener)
        if self._thread is not None:
            self._thread.join(10)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._cut or self._closed
                if refuse:
                    self.refused += 1
            if refuse:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
