"""Fixtures and helpers shared by the ``test_k8s_*`` fidelity tests of the simulated API server.

Everything goes through the official ``kubernetes`` client built from a kubeconfig the simulator
writes (``new_client_from_config(persist_config=False)``), so the installed client version (30.x
or 37.x) deserialises, and so validates, every response.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
import kubernetes
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from podgahp_sim.k8s import KubeSim, SimConfig
from factories import made_then_ended

FAST = SimConfig(tick_seconds=0.03, run_seconds=0.3, container_create_seconds=0.05, image_backoff_seconds=0.3,
                 crash_backoff_seconds=0.2, sigterm_exit_seconds=0.2, gc_seconds=0.1, bookmark_seconds=0.3)
CLIENT_MAJOR = int(kubernetes.__version__.split(".")[0])
NS = "default"


def fast(**changes: Any) -> SimConfig:
    return dataclasses.replace(FAST, **changes)


@pytest.fixture
def make_sim(tmp_path: Path) -> Iterator[Callable[..., KubeSim]]:
    """Start a simulator with ``fast(**changes)``; every one started is stopped afterwards."""
    yield from made_then_ended(lambda **changes: KubeSim(fast(**changes)).start(), KubeSim.stop)


#: The two ways a tick visits pods (``podgahp_sim.k8s.agenda``): every pod (a small cluster), or only
#: the pods that changed, are due or wait for a node (a large one). Behaviour must not differ.
PASSES: Dict[str, Dict[str, Any]] = {"every-pod": {}, "changes-only": {"full_sync_below_pods": 0}}


@pytest.fixture(name="make_sim", params=sorted(PASSES))
def make_sim_both_passes(request: pytest.FixtureRequest) -> Iterator[Callable[..., KubeSim]]:
    """:func:`make_sim` once per way of visiting pods (a module imports this in its place)."""
    passes = PASSES[request.param]
    yield from made_then_ended(lambda **changes: KubeSim(fast(**{**passes, **changes})).start(), KubeSim.stop)


@pytest.fixture
def sim(engine: str, request: pytest.FixtureRequest, make_sim: Callable[..., KubeSim]) -> KubeSim:
    """A simulator with the fast clocks, or on the real engine the real control plane's ``default``
    namespace (emptied for the test), whose reads are KubeSim's (tests/engines.py)."""
    if engine == "real":
        real: KubeSim = request.getfixturevalue("real_default_engine")
        return real
    return make_sim()


@pytest.fixture
def api_client_for(tmp_path: Path) -> Iterator[Callable[..., client.ApiClient]]:
    clients: List[client.ApiClient] = []

    def make(server: KubeSim, token: Optional[str] = None, namespace: str = NS) -> client.ApiClient:
        path = str(tmp_path / ("kubeconfig-%d" % len(clients)))
        server.write_kubeconfig(path, namespace=namespace, token=token)
        api_client = config.new_client_from_config(config_file=path, persist_config=False)
        clients.append(api_client)
        return api_client

    yield make
    for api_client in clients:
        api_client.close()


@pytest.fixture
def core(sim: KubeSim, api_client_for: Callable[..., client.ApiClient]) -> client.CoreV1Api:
    return client.CoreV1Api(api_client_for(sim))


def pod_body(name: Optional[str] = "p1", image: str = "htcondor/execute:lts", env: Optional[Dict[str, str]] = None,
             labels: Optional[Dict[str, str]] = None, resources: Optional[Dict[str, Any]] = None,
             restart: Optional[str] = "Never", **spec: Any) -> Dict[str, Any]:
    meta: Dict[str, Any] = {"name": name} if name else {"generateName": "pilot-"}
    if labels:
        meta["labels"] = labels
    container: Dict[str, Any] = {"name": "pilot", "image": image, "command": ["/usr/sbin/condor_master"],
                                 "args": ["-f"]}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if resources is not None:
        container["resources"] = resources
    body_spec: Dict[str, Any] = {"containers": [container]}
    if restart:
        body_spec["restartPolicy"] = restart
    body_spec.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body_spec}


def status_of(error: ApiException) -> Dict[str, Any]:
    body = json.loads(error.body)
    assert isinstance(body, dict)
    return body


def expect_error(call: Callable[..., Any], *args: Any, **kwargs: Any) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def roundtrip(api_client: client.ApiClient, data: Any, klass: str) -> Any:
    """Deserialise raw JSON the way the client does for responses (validating required fields)."""
    return api_client._ApiClient__deserialize(data, klass)  # noqa: SLF001 - same path as responses


def raw(sim: KubeSim, method: str, path: str, body: Optional[bytes] = None, token: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None, timeout: float = 5.0) -> urllib3.BaseHTTPResponse:
    """A plain HTTP request (for what the typed client cannot send: bad JSON, raw watch flags)."""
    all_headers = {"Authorization": "Bearer %s" % (sim.token if token is None else token)}
    all_headers.update(headers or {})
    http = urllib3.PoolManager(ssl_context=sim.client_context())
    return http.request(method, sim.url + path, body=body, headers=all_headers, timeout=timeout,
                        preload_content=True, retries=False)


def phase(pod: Optional[Dict[str, Any]]) -> str:
    return str(((pod or {}).get("status") or {}).get("phase", ""))


def kubectl_version(kubectl: str) -> Tuple[int, int]:
    """(major, minor) of a kubectl; kubectl >= 1.27 validates through the server (OpenAPI v3), older
    ones need OpenAPI v2 protobuf, which the simulator does not serve."""
    import re
    import subprocess

    out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True,
                         timeout=30).stdout
    minor = re.search(r'"minor":\s*"(\d+)', out)
    return (1, int(minor.group(1)) if minor else 0)
