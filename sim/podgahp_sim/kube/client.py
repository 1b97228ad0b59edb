"""The few REST calls a node agent makes to a Kubernetes API server, from a kubeconfig: JSON in and out,
over HTTPS with the kubeconfig's CA and its client certificate or bearer token; watches read line by line.

Owns the connection details; knows no Kubernetes semantics beyond the wire (``Status`` bodies become
:class:`ApiError`).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional

import yaml

JsonObj = Dict[str, Any]


class ApiError(RuntimeError):
    """An answer that is not 2xx: its status and the ``Status`` body's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__("%d %s: %s" % (status, reason, message[:256]))
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Kubeconfig:
    """What a client needs of a kubeconfig's current context."""

    server: str
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    token: str
    namespace: str


def read_kubeconfig(path: str) -> Kubeconfig:
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    name = doc.get("current-context")
    contexts = {c["name"]: c.get("context") or {} for c in doc.get("contexts") or []}
    context = contexts.get(name) or next(iter(contexts.values()), {})
    cluster = next((c.get("cluster") or {} for c in doc.get("clusters") or [] if c["name"] == context.get("cluster")),
                   {})
    user = next((u.get("user") or {} for u in doc.get("users") or [] if u["name"] == context.get("user")), {})
    base = os.path.dirname(os.path.abspath(path))

    def data(entry: Mapping[str, Any], key: str) -> bytes:
        if entry.get(key + "-data"):
            return base64.b64decode(str(entry[key + "-data"]))
        if entry.get(key):
            with open(os.path.join(base, str(entry[key])), "rb") as f:
                return f.read()
        return b""
    return Kubeconfig(str(cluster.get("server", "")), data(cluster, "certificate-authority"),
                      data(user, "client-certificate"), data(user, "client-key"), str(user.get("token") or ""),
                      str(context.get("namespace") or "default"))


def opener(context: Optional[ssl.SSLContext] = None) -> urllib.request.OpenerDirector:
    """urllib's opener for the control plane, with no proxy: the servers are on 127.0.0.1, and
    ``urlopen`` would read the proxies from the environment at every request, which races a change of
    the environment in another thread (``os.environ`` iterated while pytest sets
    ``PYTEST_CURRENT_TEST``: a KeyError that ended a node's heartbeat thread)."""
    handlers: List[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


class Client:
    """Requests to the API server of a kubeconfig."""

    def __init__(self, kubeconfig: Kubeconfig) -> None:
        self.config = kubeconfig
        self.context = ssl.create_default_context(cadata=kubeconfig.ca_pem.decode("ascii")) \
            if kubeconfig.ca_pem else ssl.create_default_context()
        if kubeconfig.cert_pem:
            # ssl loads a certificate only from files: written for the load, removed at once
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
                for path, blob in ((cert, kubeconfig.cert_pem), (key, kubeconfig.key_pem)):
                    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                        f.write(blob)
                self.context.load_cert_chain(cert, key)
        self._opener = opener(self.context)

    def _request(self, method: str, path: str, body: Optional[JsonObj] = None, query: Optional[Mapping[str, str]] = None,
                 content_type: str = "application/json", timeout: float = 30.0) -> Any:
        url = self.config.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json", "User-Agent": "podgahp-sim-node"}
        if self.config.token:
            headers["Authorization"] = "Bearer " + self.config.token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            return self._opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                status = json.loads(text)
                reason, message = str(status.get("reason", "")), str(status.get("message", text))
            except ValueError:
                reason, message = str(e.reason), text
            raise ApiError(e.code, reason, message) from None

    def call(self, method: str, path: str, body: Optional[JsonObj] = None, query: Optional[Mapping[str, str]] = None,
             content_type: str = "application/json") -> JsonObj:
        with self._request(method, path, body, query, content_type) as response:
            text = response.read()
        return dict(json.loads(text)) if text else {}

    def get(self, path: str, query: Optional[Mapping[str, str]] = None) -> JsonObj:
        return self.call("GET", path, query=query)

    def text(self, path: str, query: Optional[Mapping[str, str]] = None) -> str:
        """A GET whose answer is text (a pod's log)."""
        with self._request("GET", path, query=query) as response:
            return bytes(response.read()).decode(errors="replace")

    def watch(self, path: str, query: Mapping[str, str], timeout: float) -> Iterator[JsonObj]:
        """The events of a watch (``timeoutSeconds`` = ``timeout``) until the server ends it."""
        query = dict(query, watch="true", timeoutSeconds=str(int(timeout)))
        with self._request("GET", path, query=query, timeout=timeout + 30) as response:
            for line in response:
                if line.strip():
                    yield dict(json.loads(line))
