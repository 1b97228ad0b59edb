"""The simulated API server speaks TLS and authenticates as a real one does: HTTPS with its own CA,
bearer tokens and client certificates, plain HTTP only when asked for.

On the simulator alone: these are its own listener's (its CA, certificates, sockets, plain-HTTP
mode); kubectl over HTTPS, by token and client certificate, is tested on both engines in test_kubectl.py."""

from __future__ import annotations

import base64
import http.client
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
import trustme
import yaml
from kubernetes import client, config

from podgahp_sim.k8s import KubeSim, SimConfig

pytestmark = pytest.mark.simulator_only("the simulator's own TLS listener")


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(SimConfig(namespaces=("default", "pilots"))) as running:
        yield running


def load(path: str) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return dict(yaml.safe_load(f))


def core_for(kubeconfig: str) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig, persist_config=False))


def get(url: str, context: ssl.SSLContext, token: str = "") -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=context,
                                    timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_https_by_default_with_the_ca_in_the_kubeconfig(sim: KubeSim, tmp_path: Path) -> None:
    path = sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace="pilots")
    doc = load(path)
    cluster = doc["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert base64.b64decode(cluster["certificate-authority-data"]) == sim.ca_pem
    assert "insecure-skip-tls-verify" not in cluster
    api = core_for(path)
    assert api.api_client.configuration.verify_ssl is True
    assert api.list_namespaced_pod("pilots").items == []
    api.api_client.close()


def test_a_client_that_does_not_trust_the_ca_is_refused(sim: KubeSim) -> None:
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(sim.url + "/version", ssl.create_default_context(), token=str(sim.token))
    other = ssl.create_default_context()
    trustme.CA().configure_trust(other)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(sim.url + "/version", other, token=str(sim.token))


def test_the_server_certificate_names_localhost_too(sim: KubeSim) -> None:
    context = sim.client_context()
    assert context is not None and context.check_hostname
    url = sim.url.replace("127.0.0.1", "localhost")
    assert get(url + "/api/v1/namespaces", context, token=str(sim.token)) == 200


def test_token_and_missing_credentials(sim: KubeSim) -> None:
    context = sim.client_context()
    assert context is not None
    assert get(sim.url + "/api/v1/namespaces", context, token=str(sim.token)) == 200
    assert get(sim.url + "/api/v1/namespaces", context, token="wrong") == 401
    assert get(sim.url + "/api/v1/namespaces", context) == 401


def test_client_certificate_authenticates(sim: KubeSim, tmp_path: Path) -> None:
    path = sim.write_kubeconfig(str(tmp_path / "kubeconfig"), client_cert=True)
    user = load(path)["users"][0]["user"]
    assert "token" not in user and user["client-certificate-data"] and user["client-key-data"]
    api = core_for(path)
    assert [n.metadata.name for n in api.list_namespace().items] == ["default", "kube-node-lease", "kube-public",
                                                                     "kube-system", "pilots"]
    api.api_client.close()
    assert sim.requests("GET", "/api/v1/namespaces$")[-1].status == 200


def test_client_certificate_of_another_ca_is_not_accepted(sim: KubeSim, tmp_path: Path) -> None:
    stranger = trustme.CA().issue_cert(common_name="podgahp")
    context = sim.client_context()
    assert context is not None
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in stranger.cert_chain_pems))
    key.write_bytes(stranger.private_key_pem.bytes())
    context.load_cert_chain(str(cert), str(key))
    try:
        status = get(sim.url + "/api/v1/namespaces", context)
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        status = 0  # refused in the handshake, as kube-apiserver does
    assert status in (0, 401)


def test_plain_http_only_when_asked(tmp_path: Path) -> None:
    with KubeSim(SimConfig(), tls=False) as sim:
        assert sim.url.startswith("http://")
        assert sim.client_context() is None
        path = sim.write_kubeconfig(str(tmp_path / "kubeconfig"))
        assert "certificate-authority-data" not in load(path)["clusters"][0]["cluster"]
        api = core_for(path)
        assert api.list_namespaced_pod("default").items == []
        api.api_client.close()


def test_service_account_directory(sim: KubeSim, tmp_path: Path) -> None:
    env = sim.write_service_account(str(tmp_path / "sa"), namespace="pilots")
    assert (tmp_path / "sa" / "token").read_text() == sim.token
    assert (tmp_path / "sa" / "namespace").read_text() == "pilots"
    assert (tmp_path / "sa" / "ca.crt").read_bytes() == sim.ca_pem
    assert env == {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(sim.port)}


def test_connections_as_a_real_api_server_keeps_them(sim: KubeSim) -> None:
    """Replies leave without waiting for the client's delayed ACK (TCP_NODELAY, as Go sets it), and
    the listen backlog takes a client opening dozens of connections at once (the standard
    library's 5 drops the rest, which retry a second later)."""
    context = sim.client_context()
    assert context is not None
    kept = http.client.HTTPSConnection("127.0.0.1", sim.port, context=context, timeout=5)
    try:
        kept.request("GET", "/version", headers={"Authorization": f"Bearer {sim.token}"})
        assert kept.getresponse().read() and kept.sock is not None
        server = sim._server
        assert server is not None
        with server.connections_lock:
            accepted = list(server.connections)
        assert len(accepted) == 1
        assert accepted[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert server.request_queue_size >= 128
    finally:
        kept.close()
