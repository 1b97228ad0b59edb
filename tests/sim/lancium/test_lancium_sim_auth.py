"""Lancium simulator: API-key-for-token exchange, token checks, expiry and common headers."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Callable, Dict

import pytest
import requests

from podgahp_sim.lancium import LanciumSim

from lancium_api import ApiClient


def _claims(token: str) -> Dict[str, Any]:
    payload = token.split(".")[1]
    claims: Dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def test_key_exchange_returns_token_in_header(api: ApiClient, sim: LanciumSim) -> None:
    before = time.time()
    resp = api.call("POST", "/access_tokens", auth="key")
    assert resp.status_code == 201
    assert resp.content == b""
    scheme, token = resp.headers["Authorization"].split(" ", 1)
    assert scheme == "Bearer"
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT"}
    claims = _claims(token)
    assert isinstance(claims["exp"], int)
    assert before + 3600 - 2 <= claims["exp"] <= time.time() + 3600


def test_key_exchange_without_content_type_or_body(sim: LanciumSim) -> None:
    # lancium-compute-api sends neither Content-Type nor a body.
    with requests.Session() as s:
        resp = s.post(sim.url + "/access_tokens", headers={"Authorization": "Bearer " + sim.api_key})
    assert resp.status_code == 201
    assert resp.headers["Authorization"].startswith("Bearer ")


def test_frequent_token_requests_are_tolerated(api: ApiClient) -> None:
    tokens = {api.login() for _ in range(20)}
    assert len(tokens) == 20
    assert api.call("GET", "/jobs").status_code == 200


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-key", "Basic c2ltOnNpbQ==", "Bearer ", "<token>"],
    ids=["missing", "wrong-key", "basic-scheme", "empty-bearer", "access-token-as-key"],
)
def test_bad_api_key_is_401(api: ApiClient, sim: LanciumSim, authorization: str) -> None:
    if authorization == "<token>":
        authorization = "Bearer " + sim.mint_token()
    headers = {"Authorization": authorization} if authorization else {}
    resp = api.call("POST", "/access_tokens", auth="none", headers=headers)
    assert resp.status_code == 401
    assert resp.json() == {"errors": ["Invalid API key"]}
    assert "Authorization" not in resp.headers


def _forged(sim: LanciumSim) -> str:
    head, payload, sig = sim.mint_token().split(".")
    claims = _claims(sim.mint_token())
    claims["exp"] += 86400
    raw = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return "%s.%s.%s" % (head, raw, sig)


BAD_TOKENS: Dict[str, Callable[[LanciumSim], str]] = {
    "missing": lambda sim: "",
    "api-key-instead-of-token": lambda sim: "Bearer " + sim.api_key,
    "garbage": lambda sim: "Bearer not.a.jwt",
    "forged-signature": lambda sim: "Bearer " + _forged(sim),
    "expired": lambda sim: "Bearer " + sim.mint_token(lifetime=-1),
    "other-simulator": lambda sim: "Bearer " + LanciumSim().mint_token(),
}


@pytest.mark.parametrize("kind", list(BAD_TOKENS), ids=list(BAD_TOKENS))
@pytest.mark.parametrize("method, path", [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/resources/gpus")],
                         ids=["list", "create", "gpus"])
def test_every_route_requires_a_valid_access_token(api: ApiClient, sim: LanciumSim, kind: str,
                                                   method: str, path: str) -> None:
    value = BAD_TOKENS[kind](sim)
    resp = api.call(method, path, auth="none", headers={"Authorization": value} if value else {})
    assert resp.status_code == 401
    assert isinstance(resp.json()["errors"], list)
    assert sim.jobs() == {}


def test_token_expires_and_a_new_one_works(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.token_lifetime = 1.0
    token = api.login()
    assert api.call("GET", "/jobs").status_code == 200
    time.sleep(max(0.0, _claims(token)["exp"] - time.time()) + 0.05)
    assert api.call("GET", "/jobs").status_code == 401
    api.login()
    assert api.call("GET", "/jobs").status_code == 200


def test_revoked_tokens_are_refused(api: ApiClient, sim: LanciumSim) -> None:
    api.login()
    sim.revoke_tokens()
    assert api.call("GET", "/jobs").status_code == 401
    api.login()
    assert api.call("GET", "/jobs").status_code == 200


@pytest.mark.parametrize(
    "method, path, auth",
    [
        ("POST", "/access_tokens", "key"),
        ("POST", "/access_tokens", "none"),
        ("GET", "/jobs", "token"),
        ("GET", "/jobs", "none"),
        ("GET", "/jobs/4242", "token"),
        ("GET", "/resources", "token"),
    ],
    ids=["token-201", "token-401", "list-200", "list-401", "show-404", "resources-200"],
)
def test_version_headers_on_every_response(api: ApiClient, method: str, path: str, auth: str) -> None:
    # ApiClient checks both headers on every response; this table names the status classes.
    resp = api.call(method, path, auth=auth)
    assert resp.headers["X-Current-API-Version"] == "1.5.0"
    assert resp.headers["X-Deprecated-API-Used"] == "false"


@pytest.mark.parametrize("path", ["/api/v1/nothing", "/api/v2/jobs", "/jobs", "/api/v1/jobs/abc"],
                         ids=["unknown-route", "other-version", "outside-base", "non-integer-id"])
def test_unknown_paths_are_404_with_headers(sim: LanciumSim, path: str) -> None:
    url = sim.url[: -len("/api/v1")] + path
    with requests.Session() as s:
        resp = s.get(url, headers={"Authorization": "Bearer " + sim.mint_token()})
    assert resp.status_code == 404
    assert isinstance(resp.json()["errors"], list)
    assert resp.headers["X-Current-API-Version"] == "1.5.0"


def test_every_key_of_the_account_sees_and_changes_every_job(sim: LanciumSim, api: ApiClient) -> None:
    """Lancium has one identity per account: a second user's own key reaches the first user's jobs."""
    job = api.create({"name": "alice's"})
    other = sim.new_api_key("mallory")
    assert other != sim.api_key
    with requests.Session() as s:
        token = s.post(sim.url + "/access_tokens", headers={"Authorization": "Bearer " + other})
        assert token.status_code == 201
        headers = {"Authorization": token.headers["Authorization"]}
        assert [j["id"] for j in s.get(sim.url + "/jobs", headers=headers).json()["jobs"]] == [job["id"]]
        assert s.delete(f"{sim.url}/jobs/{job['id']}", headers=headers).status_code == 202
        refused = s.post(sim.url + "/access_tokens", headers={"Authorization": "Bearer " + other + "x"})
        assert refused.status_code == 401
