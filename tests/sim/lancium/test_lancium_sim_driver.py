"""Lancium simulator: fault injection, request log, catalogues, concurrency and ``serve()``."""

from __future__ import annotations

import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import requests

from podgahp_sim.lancium import QOS_LEVELS, LanciumSim, LanciumSimSettings, LoggedRequest, serve

from lancium_api import ApiClient, pilot_job
from polling import wait_until


# -- faults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, method, path",
    [
        (402, "POST", "/jobs/*/submit"),
        (503, "POST", "/jobs/*/submit"),
        (500, "POST", "/jobs/*/submit"),
        (429, "POST", "/jobs/*/submit"),
        (401, None, "/jobs/*/submit"),
    ],
    ids=["402-billing", "503-qos", "500", "429", "401"],
)
def test_injected_submit_fault_leaves_the_job_created(api: ApiClient, sim: LanciumSim, status: int,
                                                      method: Optional[str], path: str) -> None:
    job_id = api.create({"job": pilot_job()})["id"]
    sim.inject(status, method=method, path=path, retry_after=2 if status in (429, 503) else None)
    resp = api.call("POST", "/jobs/%d/submit" % job_id, injected=True)
    assert resp.status_code == status
    assert isinstance(resp.json()["errors"], list)
    if status in (429, 503):
        assert resp.headers["Retry-After"] == "2"
    assert api.show(job_id)["status"] == "created"
    assert api.submit(job_id).status_code == 202  # the fault was used up


def _raw(sim: LanciumSim, method: str, path: str, token: str) -> int:
    """Status of one request sent on a fresh connection; 0 when the connection closed unanswered."""
    try:
        with requests.Session() as http:
            return http.request(method, sim.url + path, json={"job": pilot_job()},
                                headers={"Authorization": "Bearer %s" % token}, timeout=10).status_code
    except requests.ConnectionError:
        return 0


def test_chaos_before_changes_nothing_lost_answer_acts(api: ApiClient, sim: LanciumSim) -> None:
    token = api.login()
    sim.chaos(1.0, lost_answers=0.0, seed=5)
    before = [_raw(sim, "POST", "/jobs", token) for _ in range(40)]
    sim.chaos(0)
    assert set(before) == {0, 429, 500, 502, 503, 504}  # every kind, seeded
    assert sim.jobs() == {}
    sim.chaos(1.0, lost_answers=1.0, seed=5)
    lost = [_raw(sim, "POST", "/jobs", token) for _ in range(20)]
    sim.chaos(0)
    assert set(lost) == {0, 500, 502, 504}  # never 429/503, which promise nothing was done
    assert len(sim.jobs()) == 20
    assert [r.status for r in sim.request_log[-20:]] == lost


def test_chaos_rate_is_a_share_and_repeats_with_its_seed(api: ApiClient, sim: LanciumSim) -> None:
    token = api.login()
    runs = []
    for _ in range(2):
        sim.chaos(0.2, seed=11)
        runs.append([_raw(sim, "GET", "/jobs", token) for _ in range(300)])
    sim.chaos(0)
    assert runs[0] == runs[1]
    assert 40 <= sum(1 for code in runs[0] if code != 200) <= 80


def test_fault_counts_and_matching(api: ApiClient, sim: LanciumSim) -> None:
    sim.inject(500, method="GET", path="/jobs", count=2)
    assert api.call("POST", "/jobs", {}).status_code == 201  # other method
    assert api.call("GET", "/jobs/1000").status_code == 200  # other path
    codes = [api.call("GET", "/jobs", injected=True).status_code for _ in range(3)]
    assert codes == [500, 500, 200]


def test_fault_on_token_exchange(api: ApiClient, sim: LanciumSim) -> None:
    sim.inject(503, path="/access_tokens")
    assert api.call("POST", "/access_tokens", auth="key", injected=True).status_code == 503
    assert api.call("POST", "/access_tokens", auth="key").status_code == 201


def test_delay_fault_slows_without_failing(api: ApiClient, sim: LanciumSim) -> None:
    sim.inject(None, method="GET", path="/jobs", delay=0.3)
    started = time.monotonic()
    assert api.call("GET", "/jobs").status_code == 200
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    api.call("GET", "/jobs")
    assert time.monotonic() - started < 0.3


def test_clear_faults(api: ApiClient, sim: LanciumSim) -> None:
    sim.inject(500, count=100)
    sim.clear_faults()
    assert api.call("GET", "/jobs").status_code == 200


# -- request log ----------------------------------------------------------------------------------


def test_request_log_counts_requests(api: ApiClient, sim: LanciumSim) -> None:
    job_id = api.create({"job": pilot_job()})["id"]
    api.submit(job_id)
    for _ in range(3):
        api.show(job_id)
    api.call("GET", "/jobs/9999")
    log = sim.request_log
    assert log[0] == LoggedRequest("POST", "/access_tokens", 201)
    assert log[1] == LoggedRequest("POST", "/jobs", 201)
    assert sim.count("GET", "/jobs/%d" % job_id) == 3
    assert sim.count("GET", "/jobs/*") == 4
    assert sim.count(status=404) == 1
    assert sim.count("post") == 3
    sim.clear_log()
    assert sim.request_log == [] and sim.count() == 0


# -- catalogues -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, key",
    [
        ("/resources", "resources"),
        ("/resources/gpus", "gpus"),
        ("/resources/qos", "qos"),
        ("/resources/mpi", "mpi_versions"),
        ("/resources/defaults", "defaults"),
        ("/resources/limits", "limits"),
    ],
    ids=["resources", "gpus", "qos", "mpi", "defaults", "limits"],
)
def test_catalogues(api: ApiClient, path: str, key: str) -> None:
    resp = api.call("GET", path)
    assert resp.status_code == 200
    body = resp.json()
    assert list(body) == [key] and body[key]


def test_catalogues_agree_with_submit_checks(api: ApiClient) -> None:
    assert [q["id"] for q in api.call("GET", "/resources/qos").json()["qos"]] == list(QOS_LEVELS)
    for gpu in api.call("GET", "/resources/gpus").json()["gpus"]:
        job_id = api.create({"job": pilot_job(gpu=gpu["id"], gpu_count=1)})["id"]
        assert api.submit(job_id).status_code == 202, gpu


# -- concurrency ----------------------------------------------------------------------------------


def test_parallel_clients(sim: LanciumSim) -> None:
    def worker(n: int) -> List[int]:
        client = ApiClient(sim)
        try:
            ids = []
            for _ in range(5):
                job_id = client.create({"job": pilot_job(name="p%d" % n)})["id"]
                assert client.submit(job_id).status_code == 202
                ids.append(job_id)
            return ids
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        ids = [i for chunk in pool.map(worker, range(8)) for i in chunk]
    assert len(set(ids)) == 40
    for job_id in ids:
        sim.wait_for(job_id, "finished", timeout=10)


# -- stand-alone server ---------------------------------------------------------------------------


def test_serve_writes_key_and_url_and_stops(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    url_file = tmp_path / "url"
    stop = threading.Event()
    out = io.StringIO()
    thread = threading.Thread(
        target=serve,
        args=(0, str(key_file)),
        kwargs={"url_file": str(url_file), "stop": stop, "out": out,
                "settings": LanciumSimSettings(token_lifetime=60)},
    )
    thread.start()
    try:
        wait_until(url_file.exists, "the simulator writes its URL file", timeout=5)
        url = url_file.read_text().strip()
        key = key_file.read_text().strip()
        assert key_file.stat().st_mode & 0o777 == 0o600
        with requests.Session() as s:
            resp = s.post(url + "/access_tokens", headers={"Authorization": "Bearer " + key})
            assert resp.status_code == 201
            resp = s.get(url + "/jobs", headers={"Authorization": resp.headers["Authorization"]})
            assert resp.status_code == 200 and resp.json() == {"jobs": []}
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert out.getvalue() == "lancium sim: url=%s key_file=%s\n" % (url, key_file)


def test_fixed_api_key_and_restart_guard() -> None:
    sim = LanciumSim(api_key="my-api-key")
    with sim:
        with requests.post(sim.url + "/access_tokens", headers={"Authorization": "Bearer my-api-key"}) as resp:
            assert resp.status_code == 201
        with pytest.raises(RuntimeError):
            sim.start()
    with pytest.raises(RuntimeError):
        sim.url


# -- odd requests still get declared answers ------------------------------------------------------


@pytest.mark.parametrize(
    "method, path, data, headers, status",
    [
        ("POST", "/jobs", b"hello", {"Content-Type": "text/plain"}, 400),
        ("POST", "/jobs", b"null", {"Content-Type": "application/json"}, 201),
        ("PUT", "/jobs/{id}", None, None, 200),
        ("PUT", "/jobs/{id}", b"[]", {"Content-Type": "application/json"}, 400),
        ("POST", "/jobs/{id}/submit", b"{\"force\": true}", {"Content-Type": "application/json"}, 202),
        ("GET", "/jobs/{id}/output/logs/stdout.txt", None, None, 404),
        ("GET", "/jobs/{id}", b"{}", {"Content-Type": "application/json"}, 200),
        ("DELETE", "/jobs/{id}/data/1", None, None, 404),
    ],
    ids=["create-text-body", "create-json-null", "update-no-body", "update-array", "submit-with-body",
         "output-in-subdirectory", "show-with-body", "delete-missing-input"],
)
def test_odd_requests_get_declared_statuses(api: ApiClient, method: str, path: str, data: Optional[bytes],
                                            headers: Optional[Dict[str, str]], status: int) -> None:
    job_id = api.create({"job": pilot_job()})["id"]
    # ``data`` bypasses request validation: some of these bodies break the description on purpose.
    resp = api.call(method, path.format(id=job_id), data=data if data is not None else b"", headers=headers)
    assert resp.status_code == status, resp.text


def test_wait_for_and_settings_replacement(sim: LanciumSim, api: ApiClient) -> None:
    sim.settings = LanciumSimSettings(tick=0.01, submit_seconds=0, queue_seconds=0, run_seconds=0.05,
                                      delete_seconds=0.3)
    job_id = api.create({"job": pilot_job()})["id"]
    api.submit(job_id)
    job = sim.wait_for(job_id, "finished", timeout=3)
    assert job is not None and job["status"] == "finished"
    assert api.call("DELETE", "/jobs/%d" % job_id).status_code == 202
    with pytest.raises(ValueError):
        sim.advance(job_id, "running")  # a deleted job cannot be revived
    assert sim.wait_for(job_id, "gone", timeout=3) is None
    with pytest.raises(TimeoutError):
        sim.wait_for(api.create({})["id"], "running", timeout=0.1)


def test_client_giving_up_is_quiet(sim: LanciumSim, api: ApiClient, capfd: pytest.CaptureFixture[str]) -> None:
    sim.inject(None, method="GET", path="/jobs", delay=0.3)
    with pytest.raises(requests.exceptions.ReadTimeout):
        api.call("GET", "/jobs", timeout=0.05)
    time.sleep(0.4)  # the handler writes its late answer into a closed connection
    assert api.call("GET", "/jobs").status_code == 200
    assert "Traceback" not in capfd.readouterr().err
