"""The small Lancium HTTP client: key file, token exchange and refresh, retries, error translation."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import List, Type

import pytest

from gahp.backends.lancium.api import LanciumClient
from gahp.backends.lancium.settings import ClientSettings
from gahp.backends.lancium.credentials import jwt_expiry, read_api_key
from gahp.backends.http import MESSAGE_MAX as BODY_LIMIT
from gahp.core.errors import (AuthError, BackendError, Conflict, GahpError, Invalid, InvalidJob, Missing, NotFound, Refused,
                         TransientError, Unauthorized, Unavailable)
from podgahp_sim.lancium import LanciumSim

from lancium_helpers import make_pilot


class Sleeps:
    """Records the back-off delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: List[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def client_for(sim: LanciumSim, key_file: Path, sleeps: Sleeps, **fields: object) -> LanciumClient:
    values: dict = dict(base_url=sim.url, api_key_file=str(key_file), timeout_s=5.0, retries=3,
                        backoff_s=0.5, backoff_max_s=4.0, token_margin_s=0.0)
    values.update(fields)
    return LanciumClient(ClientSettings(**values), sleep=sleeps)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(sim: LanciumSim, key_file: Path, sleeps: Sleeps):  # type: ignore[no-untyped-def]
    c = client_for(sim, key_file, sleeps)
    yield c
    c.close()


# --------------------------------------------------------------------------------------------
# Key file


def _write(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize(
    "text, mode, expected",
    [
        ("the-key\n", 0o600, "the-key"),
        ("  the-key  ", 0o400, "the-key"),
        ("# Lancium\nLANCIUM_API_KEY=the-key\n", 0o600, "the-key"),
        ("LANCIUM_API_KEY='the-key'\n", 0o600, "the-key"),
    ],
    ids=["plain", "blanks-read-only", "lcli-style", "quoted"],
)
def test_key_file_forms(tmp_path: Path, text: str, mode: int, expected: str) -> None:
    assert read_api_key(str(_write(tmp_path / "key", text, mode))) == expected


@pytest.mark.parametrize(
    "text, mode, message",
    [
        ("the-key", 0o644, r"accessible by group or others \(mode 0644\).*chmod 600"),
        ("the-key", 0o640, r"accessible by group or others"),
        ("the-key", 0o602, r"accessible by group or others"),
        ("", 0o600, "holds no key"),
        ("two words", 0o600, "holds no key"),
    ],
    ids=["world-readable", "group-readable", "world-writable", "empty", "not-a-key"],
)
def test_bad_key_files_are_refused(tmp_path: Path, text: str, mode: int, message: str) -> None:
    path = _write(tmp_path / "key", text, mode)
    with pytest.raises(AuthError, match=message) as info:
        read_api_key(str(path))
    assert "PODGAHP_LANCIUM_API_KEY_FILE" in str(info.value) and str(path) in str(info.value)
    assert "the-key" not in str(info.value)


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(AuthError, match=r"PODGAHP_LANCIUM_API_KEY_FILE = .*/nope: cannot open .*mode 0600"):
        read_api_key(str(tmp_path / "nope"))


def test_missing_key_file_fails_ping_and_submit_clearly(sim: LanciumSim, tmp_path: Path) -> None:
    from gahp.agent import Agent
    from gahp.backends.lancium.backend import LanciumBackend
    from gahp.core.config import Knobs

    backend = Agent(LanciumBackend.from_knobs(Knobs({
        "PODGAHP_LANCIUM_BASE_URL": sim.url,
        "PODGAHP_LANCIUM_API_KEY_FILE": str(tmp_path / "missing.key"),
    })))
    try:
        for call in (backend.ping, lambda: backend.submit(make_pilot(tmp_path))):
            with pytest.raises(AuthError, match="cannot open the Lancium API key file"):
                call()
    finally:
        backend.close()
    assert sim.request_log == []


# --------------------------------------------------------------------------------------------
# Tokens


def _jwt(claims: object) -> str:
    def enc(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join([enc(b'{"alg":"none"}'), enc(json.dumps(claims).encode()), enc(b"sig")])


@pytest.mark.parametrize(
    "token, expected",
    [
        (_jwt({"exp": 1700000000}), 1700000000.0),
        (_jwt({"exp": 1700000000.5, "sub": "x"}), 1700000000.5),
        (_jwt({"sub": "x"}), None),
        (_jwt({"exp": "soon"}), None),
        (_jwt([1, 2]), None),
        ("not-a-jwt", None),
        ("a.!!!.c", None),
    ],
    ids=["int-exp", "float-exp", "no-exp", "string-exp", "not-an-object", "one-part", "bad-base64"],
)
def test_jwt_expiry(token: str, expected: object) -> None:
    assert jwt_expiry(token) == expected


def test_token_is_reused_until_the_refresh_margin(sim: LanciumSim, key_file: Path, sleeps: Sleeps) -> None:
    sim.settings.token_lifetime = 3.0  # exp = int(now + 3): between 2 and 3 s from now
    client = client_for(sim, key_file, sleeps, token_margin_s=1.5)
    try:
        client.list_jobs()
        client.list_jobs()
        assert sim.count("POST", "/access_tokens") == 1
        time.sleep(1.6)  # now less than the margin is left: fetched again before it expires
        client.list_jobs()
        assert sim.count("POST", "/access_tokens") == 2
        assert sim.count("GET", "/jobs", 401) == 0
    finally:
        client.close()


def test_revoked_token_is_replaced_once(client: LanciumClient, sim: LanciumSim) -> None:
    client.list_jobs()
    sim.revoke_tokens()
    assert client.list_jobs() == []
    assert sim.count("GET", "/jobs", 401) == 1
    assert sim.count("POST", "/access_tokens", 201) == 2


def test_persistent_401_is_an_auth_error(client: LanciumClient, sim: LanciumSim) -> None:
    sim.inject(401, method="GET", path="/jobs", count=5)
    with pytest.raises(Unauthorized, match="credentials refused"):
        client.list_jobs()
    assert sim.count("GET", "/jobs") == 2  # one fresh token, one more attempt, no loop


def test_wrong_key_is_refused_without_showing_it(sim: LanciumSim, tmp_path: Path, sleeps: Sleeps,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    key = _write(tmp_path / "key", "wrong-but-secret-key\n", 0o600)
    caplog.set_level(logging.DEBUG)
    client = client_for(sim, key, sleeps)
    try:
        with pytest.raises(AuthError, match=r"refused the API key in .*key \(HTTP 401: Invalid API key\)") as info:
            client.check_credentials()
    finally:
        client.close()
    assert "wrong-but-secret-key" not in str(info.value)
    assert "wrong-but-secret-key" not in caplog.text


def test_tokens_never_logged(client: LanciumClient, sim: LanciumSim, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sim.inject(500, method="GET", path="/jobs", count=1)
    client.list_jobs()
    sim.revoke_tokens()
    client.list_jobs()
    assert sim.api_key not in caplog.text
    assert "Bearer" not in caplog.text and "eyJ" not in caplog.text


# --------------------------------------------------------------------------------------------
# Retries and errors


def jittered(delays: List[float], expected: List[float]) -> bool:
    """The delays are the expected back-off plus at most the 10 % jitter of gahp.core.retry."""
    return len(delays) == len(expected) and all(e <= d <= e * 1.1 for d, e in zip(delays, expected))


def test_5xx_and_429_are_retried_with_back_off(client: LanciumClient, sim: LanciumSim, sleeps: Sleeps) -> None:
    sim.inject(500, method="GET", path="/jobs", count=1)
    sim.inject(429, method="GET", path="/jobs", count=1, retry_after=30)
    sim.inject(502, method="GET", path="/jobs", count=1)
    assert client.list_jobs() == []
    assert sim.count("GET", "/jobs") == 4
    assert jittered(sleeps.delays, [0.5, 4.0, 2.0])  # doubled; Retry-After capped at the maximum


def test_retries_are_bounded(client: LanciumClient, sim: LanciumSim, sleeps: Sleeps) -> None:
    sim.inject(500, method="GET", path="/jobs", count=10)
    with pytest.raises(Unavailable, match="HTTP 500"):
        client.list_jobs()
    assert sim.count("GET", "/jobs") == 4 and len(sleeps.delays) == 3


def test_creating_a_job_is_not_repeated_after_a_500(client: LanciumClient, sim: LanciumSim) -> None:
    sim.inject(500, method="POST", path="/jobs", count=1)
    with pytest.raises(TransientError):
        client.create_job({"name": "x"})
    assert sim.count("POST", "/jobs") == 1
    sim.inject(503, method="POST", path="/jobs", count=1)  # 503: the server did nothing
    assert client.create_job({"name": "x"})["status"] == "created"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_service_is_transient(key_file: Path, sleeps: Sleeps) -> None:
    client = LanciumClient(ClientSettings(base_url=f"http://127.0.0.1:{_closed_port()}/api/v1",
                                          api_key_file=str(key_file), retries=2, backoff_s=0.1),
                           sleep=sleeps)
    try:
        with pytest.raises(TransientError, match="the Lancium API at http://127.0.0.1:[0-9]+/api/v1 cannot be reached"):
            client.list_jobs()
    finally:
        client.close()
    assert jittered(sleeps.delays, [0.1, 0.2])


def test_slow_answer_times_out(sim: LanciumSim, key_file: Path, sleeps: Sleeps) -> None:
    client = client_for(sim, key_file, sleeps, timeout_s=0.2, retries=0)
    try:
        client.check_credentials()
        sim.inject(None, method="GET", path="/jobs", delay=0.6)
        with pytest.raises(TransientError, match="ReadTimeout"):
            client.list_jobs()
    finally:
        client.close()


@pytest.mark.parametrize(
    "status, error_class, base_class",
    [
        (400, Invalid, InvalidJob),
        (402, Refused, BackendError),
        (403, Unauthorized, AuthError),
        (404, Missing, NotFound),
        (409, Conflict, BackendError),
        (418, Refused, BackendError),
        (422, Invalid, InvalidJob),
        (500, Unavailable, TransientError),
        (503, Unavailable, TransientError),
    ],
    ids=["400", "402", "403", "404", "409", "418", "422", "500", "503"],
)
def test_http_errors_are_translated(sim: LanciumSim, key_file: Path, sleeps: Sleeps, status: int,
                                    error_class: Type[GahpError], base_class: Type[GahpError]) -> None:
    client = client_for(sim, key_file, sleeps, retries=0)
    try:
        sim.inject(status, method="GET", path="/jobs/7", message="x" * 5000)
        with pytest.raises(error_class) as info:
            client.show_job(7)
    finally:
        client.close()
    assert isinstance(info.value, base_class)
    assert str(info.value).startswith("show job (GET /jobs/7): the Lancium API at http")
    assert f"answered HTTP {status}: xxx" in str(info.value) and info.value.status == status  # type: ignore[attr-defined]
    assert len(info.value.body) <= BODY_LIMIT  # type: ignore[attr-defined]
    assert len(str(info.value)) < BODY_LIMIT + 300


def test_validation_errors_name_the_attributes(client: LanciumClient, sim: LanciumSim) -> None:
    job = client.create_job({"name": "x"})
    with pytest.raises(InvalidJob, match=r"HTTP 400.*image: must be present.*qos: must be present"):
        client.submit_job(job["id"])


def test_upload_in_checked_chunks(client: LanciumClient, sim: LanciumSim) -> None:
    job = client.create_job({"name": "x"})
    content = bytes(range(256)) * 20
    data_id = client.create_input(job["id"], "data.bin", size=len(content))
    client.upload(job["id"], data_id, "data.bin", content, chunk_bytes=1000)
    assert sim.input_bytes(job["id"], data_id) == content
    assert sim.count("PATCH", f"/jobs/{job['id']}/data/*") == 6
    assert client.input_complete(job["id"], data_id)
    empty = client.create_input(job["id"], "empty", size=0)
    client.upload(job["id"], empty, "empty", b"", chunk_bytes=1000)
    assert sim.input_files(job["id"])[1]["upload_complete"]


def test_chunk_answer_lost_then_409_is_complete(client: LanciumClient, sim: LanciumSim) -> None:
    job = client.create_job({"name": "x"})
    data_id = client.create_input(job["id"], "data.bin", size=10)
    sim.chaos(1.0, lost_answers=1.0, seed=3)  # every request is served, then its answer is lost
    with pytest.raises(TransientError):
        client.upload(job["id"], data_id, "data.bin", b"0123456789", chunk_bytes=1000)
    sim.chaos(0)
    assert client.input_complete(job["id"], data_id)
    sim.clear_log()
    client.upload(job["id"], data_id, "data.bin", b"0123456789", chunk_bytes=1000)  # the retry: 409
    assert [r.status for r in sim.request_log] == [409, 200]
