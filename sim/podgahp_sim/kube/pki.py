"""The certificates and keys of a real control plane on loopback, made with ``trustme`` and
``cryptography`` (no openssl): one cluster CA, the API server's serving certificate, a client
certificate per identity (user = subject CN, group = subject O, as kube-apiserver reads them), and
the service-account signing key pair.

Owns the files in a control plane's ``pki`` directory and the kubeconfigs that carry them; knows
nothing of the processes that read them.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional

import trustme
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

#: Identities a control plane's parts authenticate as (CN, O).
ADMIN = ("kubernetes-admin", "system:masters")
CONTROLLER_MANAGER = ("system:kube-controller-manager", None)
SCHEDULER = ("system:kube-scheduler", None)
KUBELET_CLIENT = ("kube-apiserver-kubelet-client", "system:masters")


@dataclass(frozen=True)
class KeyPair:
    """A certificate (PEM, with its chain) and its private key (PEM), written as ``<name>.crt``/``.key``."""

    cert: Path
    key: Path


def node_identity(name: str) -> "tuple[str, str]":
    """The identity the Node authorizer knows a node by."""
    return ("system:node:" + name, "system:nodes")


class Pki:
    """The CA and everything it signs, under ``directory`` (mode 0700)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._ca = trustme.CA(organization_name="podgahp control plane")
        self.ca_cert = directory / "ca.crt"
        self.ca_cert.write_bytes(self._ca.cert_pem.bytes())
        self.ca_pem = self._ca.cert_pem.bytes()

    def serving(self, name: str, *hosts: str) -> KeyPair:
        """A serving certificate for ``hosts`` (names or addresses)."""
        leaf = self._ca.issue_cert(*hosts, common_name=name)
        return self._write(name, leaf)

    def client(self, user: str, group: Optional[str] = None) -> KeyPair:
        return self._write(user.replace(":", "-"), self._client_leaf(user, group))

    def _client_leaf(self, user: str, group: Optional[str]) -> Any:
        # A name in the subjectAltName too: trustme marks that extension critical, and Go's x509
        # refuses a critical one that is empty ("unhandled critical extension").
        alt = re.sub(r"[^a-z0-9-]+", "-", user.lower()).strip("-") + ".client.podgahp"
        return self._ca.issue_cert(alt, common_name=user, organization_name=group)

    def _write(self, name: str, leaf: Any) -> KeyPair:
        pair = KeyPair(self.directory / (name + ".crt"), self.directory / (name + ".key"))
        pair.cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        _write_private(pair.key, leaf.private_key_pem.bytes())
        return pair

    def service_account_keys(self) -> KeyPair:
        """The RSA key pair service-account tokens are signed (``sa.key``) and checked (``sa.pub``) with."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pair = KeyPair(self.directory / "sa.pub", self.directory / "sa.key")
        pair.cert.write_bytes(key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        _write_private(pair.key, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
        return pair

    def kubeconfig(self, path: Path, server: str, user: str, group: Optional[str] = None,
                   namespace: str = "default", context: str = "podgahp-control-plane") -> Path:
        """A kubeconfig (mode 0600) for ``server`` with a client certificate of ``user`` embedded."""
        leaf = self._client_leaf(user, group)
        cert = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
        write_kubeconfig(path, server, self.ca_pem, {
            "client-certificate-data": _b64(cert),
            "client-key-data": _b64(leaf.private_key_pem.bytes())}, namespace=namespace, context=context)
        return path


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: Dict[str, str], namespace: str = "default",
                     context: str = "podgahp-control-plane") -> None:
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": context, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": namespace}}],
        "current-context": context,
    }
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f, default_flow_style=False)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
