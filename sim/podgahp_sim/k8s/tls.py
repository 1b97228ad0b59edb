"""The simulated cluster's certificate authority: server certificate, client certificates, TLS context.

A real API server speaks HTTPS with a cluster CA and authenticates clients by bearer token or by a
client certificate signed by that CA (user name = subject CN, groups = subject O).  :class:`ClusterCa`
makes such a CA with ``trustme`` (test-grade certificates, generated in memory, never written unless a
kubeconfig or a service-account directory asks for them).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import importlib
from types import ModuleType

trustme: Optional[ModuleType]
try:
    trustme = importlib.import_module("trustme")
except ImportError:  # pragma: no cover - exercised only on an installation without the simulator extra
    trustme = None


class TlsUnavailable(RuntimeError):
    """The simulator was asked for HTTPS but ``trustme`` is not installed."""


@dataclass(frozen=True)
class ClientCert:
    """A client certificate (PEM) and its key (PEM) for one user."""

    cert_pem: bytes
    key_pem: bytes


class ClusterCa:
    """A CA, a server certificate for ``hosts`` and a server-side ``SSLContext`` that asks for (but does
    not require) a client certificate, verifying any it gets against the CA."""

    def __init__(self, hosts: Tuple[str, ...] = ("127.0.0.1", "localhost")) -> None:
        if trustme is None:
            raise TlsUnavailable("the simulated API server needs the 'trustme' package for HTTPS "
                                 "(pip install trustme; podgahp-sim requires it), or run it with plain HTTP")
        self._ca: Any = trustme.CA(organization_name="podgahp simulated cluster")
        self._server = self._ca.issue_cert(*hosts, common_name="kube-apiserver")
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._server.configure_cert(self.context)
        self._ca.configure_trust(self.context)
        self.context.verify_mode = ssl.CERT_OPTIONAL

    @property
    def ca_pem(self) -> bytes:
        return bytes(self._ca.cert_pem.bytes())

    def client_cert(self, user: str, groups: Tuple[str, ...] = ()) -> ClientCert:
        """A certificate the server maps to ``user`` (CN) in ``groups`` (O, first group only)."""
        leaf = self._ca.issue_cert(common_name=user, organization_name=groups[0] if groups else None)
        return ClientCert(b"".join(blob.bytes() for blob in leaf.cert_chain_pems), leaf.private_key_pem.bytes())


def peer_user(cert: Optional[dict]) -> Optional[str]:  # type: ignore[type-arg]
    """The user a verified client certificate names (its subject CN), or ``None``."""
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
