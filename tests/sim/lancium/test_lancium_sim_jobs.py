"""Lancium simulator: create, update, submit, list, show, terminate and delete jobs."""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence

import pytest

from podgahp_sim.lancium import LanciumSim

from lancium_api import BLANK, ApiClient, env, pilot_job
from polling import wait_until

JOB_KEYS = {
    "id", "name", "status", "notes", "account", "created_at", "updated_at", "submitted_at",
    "completed_at", "qos", "image", "command_line", "expected_run_time", "max_run_time",
    "callback_url", "error_string", "resources", "input_files", "output_files", "environment",
}
RESOURCE_KEYS = {
    "node_exclusive", "core_count", "gpu_count", "memory", "gpu", "scratch", "mpi", "tasks",
    "tasks_per_node", "mpi_version",
}
RESULT_KEYS = {"cost", "memory_used", "execution_time", "exit_code"}
# Out-of-range values are accepted on create and refused at submit, so the echo of such a job
# can break the description's ranges.
RANGES = ("minimum", "maximum", "multipleOf")
# The description's multipleOf: 2 on core_count contradicts its own text: odd requests "will be
# rounded up as necessary".
ODD = ("multipleOf",)


# -- create ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, data, headers",
    [
        ({"job": {"name": "a"}}, None, None),
        ({"name": "a"}, None, None),
        ({}, None, None),
        (BLANK, None, None),
        (BLANK, b"", {"Content-Type": "application/json"}),
    ],
    ids=["wrapped", "bare-fields", "empty-object", "no-body", "empty-body-json-type"],
)
def test_create_accepts_every_documented_body(api: ApiClient, body: Any, data: Optional[bytes],
                                              headers: Optional[Dict[str, str]]) -> None:
    resp = api.call("POST", "/jobs", body, data=data, headers=headers)
    assert resp.status_code == 201
    job = resp.json()["job"]
    assert set(job) == JOB_KEYS  # every field, results only once the job has ended
    assert set(job["resources"]) == RESOURCE_KEYS
    assert isinstance(job["id"], int) and job["status"] == "created"
    assert job["name"] == ("a" if body not in (BLANK, {}) else None)
    assert job["submitted_at"] is None and job["completed_at"] is None
    assert job["created_at"] == job["updated_at"]
    assert job["input_files"] == job["output_files"] == job["environment"] == []


def test_create_keeps_every_field(api: ApiClient) -> None:
    fields = pilot_job(
        notes="n", account="acct", expected_run_time=60, callback_url="http://x/cb",
        output_files=[{"name": "result.tar", "destination": None}],
        environment=[{"variable": "A", "value": "1"}],
    )
    fields["resources"].update(scratch=10, node_exclusive=False)
    job = api.create({"job": fields})
    for key, value in fields.items():
        if key == "resources":
            assert {k: job["resources"][k] for k in value} == value
        else:
            assert job[key] == value, key
    assert api.show(job["id"]) == job


def test_ids_are_unique_and_names_are_not(api: ApiClient) -> None:
    ids = [api.create({"name": "test job 1"})["id"] for _ in range(3)]
    assert len(set(ids)) == 3
    listed = api.call("GET", "/jobs").json()["jobs"]
    assert [j["id"] for j in listed] == ids
    assert all(j == {"id": j["id"], "name": "test job 1", "status": "created"} for j in listed)


def test_list_shows_every_job_without_paging(api: ApiClient) -> None:
    for i in range(120):
        api.call("POST", "/jobs", {"name": "job-%d" % i})
    api.create({})
    jobs = api.call("GET", "/jobs").json()["jobs"]
    assert len(jobs) == 121
    assert jobs[-1]["name"] == ""  # the list schema's name is a non-nullable string


@pytest.mark.parametrize(
    "body, schema_valid, field",
    [
        ({"job": {"colour": "red"}}, False, "colour"),
        ({"job": {"name": 5}}, False, "name"),
        ({"job": {"max_run_time": "600"}}, False, "max_run_time"),
        ({"job": {"max_run_time": True}}, False, "max_run_time"),
        ({"job": {"resources": {"core_count": "2"}}}, False, "core_count"),
        # ``resources`` has no additionalProperties: false, but an unknown resource is surely a
        # client bug; the simulator refuses it like unknown job fields.
        ({"job": {"resources": {"cpus": 2}}}, True, "cpus"),
        ({"job": {"resources": 4}}, False, "resources"),
        ({"job": {"core_count": 2}}, False, "core_count"),
        ({"job": {"qos": "urgent"}}, False, "qos"),
        ({"job": {"environment": [{"variable": "A"}]}}, False, "environment"),
        ({"job": {"environment": {"A": "1"}}}, False, "environment"),
        ({"job": {"output_files": [{"name": 3}]}}, False, "output_files"),
        ({"job": "pilot"}, False, "job"),
        ([1, 2], False, "job"),
        # A bare unknown key is a valid ``job`` wrapper for the description (no
        # additionalProperties there), but the service sees job fields and refuses it.
        ({"colour": "red"}, True, "colour"),
    ],
    ids=[
        "unknown-key", "name-int", "run-time-string", "run-time-bool", "cores-string",
        "unknown-resource", "resources-not-object", "top-level-core_count", "qos-unknown",
        "env-missing-value", "env-not-list", "output-name-int", "job-not-object", "body-array",
        "bare-unknown-key",
    ],
)
def test_create_refuses_unknown_keys_and_wrong_types(api: ApiClient, sim: LanciumSim, body: Any,
                                                     schema_valid: bool, field: str) -> None:
    resp = api.call("POST", "/jobs", body, request_valid=schema_valid)
    assert resp.status_code == 400
    errors = resp.json()["errors"]
    assert field in errors and all(isinstance(m, str) for m in errors[field])
    assert sim.jobs() == {}


def test_create_refuses_invalid_json(api: ApiClient) -> None:
    resp = api.call("POST", "/jobs", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status_code == 400
    assert isinstance(resp.json()["errors"], dict)


@pytest.mark.parametrize(
    "cores, memory, expected",
    [
        (2, 4, (2, 4)),
        (48, 96, (48, 96)),
        (3, 4, (4, 8)),
        (1, 1, (2, 4)),
        (2, 16, (8, 16)),
        (4, 6, (4, 8)),
        (6, 4, (6, 12)),
        (2, 5, (4, 8)),
        (64, 128, (64, 128)),
        (5, None, (6, None)),
        (None, 5, (None, 8)),
        (None, None, (None, None)),
    ],
    ids=[
        "exact-minimum", "exact-48", "odd-cores", "one-one", "memory-bound", "memory-not-multiple-of-4",
        "cores-bound", "odd-memory", "largest-fitting", "cores-only", "memory-only", "neither",
    ],
)
def test_cpu_memory_round_up(api: ApiClient, cores: Optional[int], memory: Optional[int],
                             expected: Sequence[Optional[int]]) -> None:
    api.skip = ODD
    resources = {k: v for k, v in (("core_count", cores), ("memory", memory)) if v is not None}
    job = api.create({"job": {"resources": resources}})
    assert (job["resources"]["core_count"], job["resources"]["memory"]) == tuple(expected)
    assert api.show(job["id"])["resources"] == job["resources"]


def test_round_up_can_be_switched_off(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.round_up = False
    api.skip = RANGES
    job = api.create({"job": {"resources": {"core_count": 3, "memory": 4}}})
    assert (job["resources"]["core_count"], job["resources"]["memory"]) == (3, 4)


# -- update ---------------------------------------------------------------------------------------


def test_update_merges_fields(api: ApiClient) -> None:
    job = api.create({"job": pilot_job()})
    resp = api.call("PUT", "/jobs/%d" % job["id"], {"job": {"name": "renamed", "resources": {"memory": 16}}})
    assert resp.status_code == 200
    updated = resp.json()["job"]
    assert updated["name"] == "renamed"
    assert updated["command_line"] == job["command_line"]
    assert (updated["resources"]["core_count"], updated["resources"]["memory"]) == (8, 16)
    resp = api.call("PUT", "/jobs/%d" % job["id"], {"notes": "bare fields"})
    assert resp.json()["job"]["notes"] == "bare fields"
    assert api.show(job["id"])["notes"] == "bare fields"


def test_update_refuses_bad_fields(api: ApiClient) -> None:
    job = api.create({})
    resp = api.call("PUT", "/jobs/%d" % job["id"], {"job": {"image": ["a"]}}, request_valid=False)
    assert resp.status_code == 400 and "image" in resp.json()["errors"]


def test_update_unknown_job_is_404(api: ApiClient) -> None:
    resp = api.call("PUT", "/jobs/999999", {"job": {"name": "x"}})
    assert resp.status_code == 404 and resp.json()["errors"]


def test_update_after_submit_is_409(api: ApiClient) -> None:
    job = api.create({"job": pilot_job()})
    assert api.submit(job["id"]).status_code == 202
    resp = api.call("PUT", "/jobs/%d" % job["id"], {"job": {"name": "late"}})
    assert resp.status_code == 409
    assert api.show(job["id"])["name"] == "pilot-1"


# -- submit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"name": None}, "name"),
        ({"name": ""}, "name"),
        ({"qos": None}, "qos"),
        ({"image": None}, "image"),
        ({"command_line": None}, "command_line"),
        ({"max_run_time": None}, "max_run_time"),
        ({"max_run_time": 599}, "max_run_time"),
        ({"max_run_time": 2592001}, "max_run_time"),
        ({"core_count": None}, "core_count"),
        ({"memory": None}, "memory"),
        ({"core_count": 0}, "core_count"),
        ({"core_count": 74}, "core_count"),
        ({"core_count": 72}, "memory"),  # rounds memory up to 144 GB
        ({"memory": 130}, "memory"),
        ({"gpu": "z80", "gpu_count": 1}, "gpu"),
        ({"gpu": "k80"}, "gpu_count"),
        ({"gpu": "k80", "gpu_count": 9}, "gpu_count"),
        ({"scratch": 2000}, "scratch"),
        ({"environment": env(run_seconds="soon")}, "environment"),
        ({"environment": env(exit_code="1.5")}, "environment"),
    ],
    ids=[
        "no-name", "empty-name", "no-qos", "no-image", "no-command", "no-run-time", "run-time-599",
        "run-time-over-30-days", "no-cores", "no-memory", "zero-cores", "74-cores", "72-cores-144-GB",
        "130-GB", "unknown-gpu", "gpu-without-count", "9-gpus", "scratch-too-big", "bad-run-seconds",
        "bad-exit-code",
    ],
)
def test_submit_refuses_incomplete_or_out_of_range_jobs(api: ApiClient, overrides: Dict[str, Any],
                                                        field: str) -> None:
    api.skip = RANGES
    job = api.create({"job": pilot_job(**overrides)})
    resp = api.submit(job["id"])
    assert resp.status_code == 400
    assert field in resp.json()["errors"], resp.json()
    assert api.show(job["id"])["status"] == "created"


def test_submit_refuses_odd_cores_when_not_rounded(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.round_up = False
    api.skip = RANGES
    job = api.create({"job": pilot_job(core_count=3, memory=6)})
    resp = api.submit(job["id"])
    assert resp.status_code == 400 and "core_count" in resp.json()["errors"]


def test_submit_reports_every_problem_at_once(api: ApiClient) -> None:
    job = api.create({})
    errors = api.submit(job["id"]).json()["errors"]
    assert set(errors) == {"name", "qos", "image", "command_line", "max_run_time", "core_count", "memory"}


@pytest.mark.parametrize("body, data", [(BLANK, None), ({}, None), (BLANK, b"")], ids=["none", "empty-object", "empty-json"])
def test_submit_is_202_with_empty_object(api: ApiClient, sim: LanciumSim, body: Any, data: Optional[bytes]) -> None:
    sim.settings.submit_seconds = 5
    job = api.create({"job": pilot_job()})
    resp = api.call("POST", "/jobs/%d/submit" % job["id"], body, data=data,
                    headers={"Content-Type": "application/json"})
    assert resp.status_code == 202 and resp.json() == {}
    shown = api.show(job["id"])
    assert shown["status"] == "submitted"  # right after submit, as lancium-compute-api shows
    assert shown["submitted_at"] is not None


def test_submit_twice_is_409(api: ApiClient) -> None:
    job = api.create({"job": pilot_job()})
    assert api.submit(job["id"]).status_code == 202
    assert api.submit(job["id"]).status_code == 409


def test_submit_unknown_job_is_404(api: ApiClient) -> None:
    assert api.submit(424242).status_code == 404


def test_submit_without_billing_is_402(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.billing_ok = False
    job = api.create({"job": pilot_job()})
    assert api.submit(job["id"]).status_code == 402
    assert api.show(job["id"])["status"] == "created"


# -- running --------------------------------------------------------------------------------------

ORDER = ["submitted", "queued", "ready", "running", "finished", "error"]


def _in_order(seen: List[str]) -> bool:
    return [ORDER.index(s) for s in seen] == sorted(ORDER.index(s) for s in seen)


def test_job_runs_to_finished(api: ApiClient, sim: LanciumSim) -> None:
    job = api.create({"job": pilot_job(environment=env(run_seconds=0.2))})
    api.submit(job["id"])
    done, seen = api.wait(job["id"], ["finished", "error"])
    assert done["status"] == "finished" and _in_order(seen) and "running" in seen, seen
    assert set(done) == JOB_KEYS | RESULT_KEYS
    assert done["exit_code"] == 0 and done["error_string"] is None
    assert isinstance(done["execution_time"], int) and isinstance(done["memory_used"], int)
    assert isinstance(done["cost"], str) and float(done["cost"]) >= 0
    assert done["submitted_at"] <= done["completed_at"]
    assert {"id": job["id"], "name": "pilot-1", "status": "finished"} in api.call("GET", "/jobs").json()["jobs"]


@pytest.mark.parametrize(
    "variables, status, exit_code, error_string",
    [
        ({"exit_code": 7}, "finished", 7, None),
        ({"error": "pilot crashed"}, "error", None, "pilot crashed"),
        ({"error": "segfault", "exit_code": 139}, "error", 139, "segfault"),
    ],
    ids=["finished-exit-7", "error", "error-with-exit-code"],
)
def test_job_outcome_from_environment(api: ApiClient, variables: Dict[str, Any], status: str,
                                      exit_code: Optional[int], error_string: Optional[str]) -> None:
    job = api.create({"job": pilot_job(environment=env(run_seconds=0.05, **variables))})
    api.submit(job["id"])
    done, _ = api.wait(job["id"], ["finished", "error"])
    assert done["status"] == status
    assert done.get("exit_code") == exit_code
    assert done["error_string"] == error_string


def test_jobs_beyond_capacity_stay_queued(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.total_cores = 4
    first = api.create({"job": pilot_job(core_count=4)})
    second = api.create({"job": pilot_job(core_count=2, environment=env(run_seconds=0.05))})
    sim.advance(first["id"], "running")  # holds its 4 cores until told otherwise
    api.submit(second["id"])
    api.wait(second["id"], ["queued"])
    time.sleep(0.15)
    assert api.show(second["id"])["status"] == "queued"
    sim.advance(first["id"], "finished")
    api.wait(second["id"], ["finished"])


def test_never_start_from_environment_and_driver(api: ApiClient, sim: LanciumSim) -> None:
    a = api.create({"job": pilot_job(environment=env(never_start=1))})
    b = api.create({"job": pilot_job()})
    api.submit(a["id"])
    api.submit(b["id"])
    sim.never_start(b["id"])
    time.sleep(0.3)
    assert [api.show(j["id"])["status"] for j in (a, b)] == ["queued", "queued"]
    sim.never_start(b["id"], False)
    api.wait(b["id"], ["finished"])


def test_advance_forces_states_and_results(api: ApiClient, sim: LanciumSim) -> None:
    job = api.create({"job": pilot_job()})
    sim.advance(job["id"], "running")
    time.sleep(0.3)  # held: the clock leaves it running past run_seconds
    assert api.show(job["id"])["status"] == "running"
    sim.advance(job["id"], "finished", exit_code=5, cost="1.25", execution_time=3600, memory_used=2048)
    shown = api.show(job["id"])
    assert (shown["status"], shown["exit_code"], shown["cost"], shown["execution_time"], shown["memory_used"]) == (
        "finished", 5, "1.25", 3600, 2048)
    other = api.create({"job": pilot_job()})
    sim.advance(other["id"], "error", error_string="node lost")
    assert api.show(other["id"])["error_string"] == "node lost"
    with pytest.raises(ValueError):
        sim.advance(other["id"], "delete pending")


def test_advance_without_hold_lets_the_clock_continue(api: ApiClient, sim: LanciumSim) -> None:
    job = api.create({"job": pilot_job()})
    sim.advance(job["id"], "running", hold=False)
    api.wait(job["id"], ["finished"])


# -- terminate ------------------------------------------------------------------------------------


def _job_in(api: ApiClient, sim: LanciumSim, status: str) -> int:
    job_id: int = api.create({"job": pilot_job(environment=env(run_seconds=60))})["id"]
    if status == "created":
        return job_id
    if status in ("ready", "finished", "error"):
        sim.advance(job_id, status)
        return job_id
    if status == "submitted":
        sim.settings.submit_seconds = 60
    if status == "queued":
        sim.never_start(job_id)
    api.submit(job_id)
    if status == "delete pending":
        sim.settings.delete_seconds = 60  # it stays while the test looks at it, however busy the machine
        api.call("DELETE", "/jobs/%d" % job_id)
    api.wait(job_id, [status])
    return job_id


@pytest.mark.parametrize("status", ["submitted", "queued", "ready", "running"])
def test_terminate_active_job(api: ApiClient, sim: LanciumSim, status: str) -> None:
    job_id = _job_in(api, sim, status)
    resp = api.call("POST", "/jobs/%d/terminate" % job_id)
    assert resp.status_code == 202 and resp.json() == {}
    done, _ = api.wait(job_id, ["error", "finished"])
    assert done["status"] == "error" and done["error_string"] == "terminated by user"
    assert "exit_code" not in done and done["completed_at"] is not None
    assert api.call("GET", "/jobs/%d/output/stdout.txt" % job_id).status_code == 404  # no outputs
    with sim.lock:
        assert sim.state.cores_in_use() == 0


def test_terminate_outcome_is_configurable(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.terminate_state = "finished"
    job_id = _job_in(api, sim, "running")
    api.call("POST", "/jobs/%d/terminate" % job_id)
    done, _ = api.wait(job_id, ["error", "finished"])
    assert done["status"] == "finished"
    assert api.call("GET", "/jobs/%d/output/stdout.txt" % job_id).status_code == 404


@pytest.mark.parametrize("status", ["created", "finished", "error", "delete pending"])
def test_terminate_inactive_job_is_409(api: ApiClient, sim: LanciumSim, status: str) -> None:
    job_id = _job_in(api, sim, status)
    assert api.call("POST", "/jobs/%d/terminate" % job_id).status_code == 409
    assert api.show(job_id)["status"] == status


def test_terminate_unknown_job_is_404(api: ApiClient) -> None:
    assert api.call("POST", "/jobs/31337/terminate").status_code == 404


# -- delete ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["created", "queued", "running", "finished", "error"])
def test_delete_then_vanish(api: ApiClient, sim: LanciumSim, status: str) -> None:
    job_id = _job_in(api, sim, status)
    sim.settings.delete_seconds = 1.0
    resp = api.call("DELETE", "/jobs/%d" % job_id)
    assert resp.status_code == 202 and resp.json() == {}
    assert api.show(job_id)["status"] == "delete pending"
    assert {"id": job_id, "name": "pilot-1", "status": "delete pending"} in api.call("GET", "/jobs").json()["jobs"]
    for method, path in [("PUT", ""), ("POST", "/submit")]:
        body = {"job": {"name": "x"}} if method == "PUT" else BLANK
        assert api.call(method, "/jobs/%d%s" % (job_id, path), body).status_code == 409
    assert api.call("DELETE", "/jobs/%d" % job_id).status_code == 202  # again: still accepted
    with sim.lock:
        assert sim.state.cores_in_use() == 0
    wait_until(lambda: api.call("GET", "/jobs/%d" % job_id).status_code, f"job {job_id} gone", timeout=3,
               done=lambda code: code == 404)
    assert job_id not in [j["id"] for j in api.call("GET", "/jobs").json()["jobs"]]
    assert api.call("DELETE", "/jobs/%d" % job_id).status_code == 404


def test_show_and_delete_unknown_job_are_404(api: ApiClient) -> None:
    for method in ("GET", "DELETE"):
        resp = api.call(method, "/jobs/5")
        assert resp.status_code == 404 and isinstance(resp.json()["errors"], list)
