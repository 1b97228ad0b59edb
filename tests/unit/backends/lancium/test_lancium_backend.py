"""The Lancium backend against the simulated Lancium service, over HTTP.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from gahp.agent import Agent
from gahp.backends.lancium.cache import Snapshot
from gahp.backends.lancium.identity import job_id_of, key_of_name, parse_job_id, sandbox_key
from gahp.backends.lancium.state import GONE, STATE_TABLE
from gahp.backends.table import Rule
from gahp.backends.lancium.spec import LAUNCHER
from gahp.rules.holds import OUTPUT as HOLD_OUTPUT, REMOTE_ERROR as HOLD_REMOTE_ERROR, RUN_TIME as HOLD_RUN_TIME
from gahp.rules.records import JobRecord
from gahp.core.errors import BackendError, InvalidJob, TransientError
from gahp.core.jobstate import JobState, Phase
from lancium_helpers import BackendFactory, deleted, make_pilot, wait_phase
from podgahp_sim.lancium import STATUSES, LanciumSim
from polling import wait_until

# --------------------------------------------------------------------------------------------
# Submit


def test_submit_describes_the_pilot(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1", "GLIDEIN_X": "y z"},
                       cpus=3, memory_mb=5000, wall_time_s=100)
    job_id = backend.submit(pilot)

    assert job_id.startswith("lancium/") and " " not in job_id
    job = sim.job(parse_job_id(job_id))
    assert key_of_name(job["name"]) == sandbox_key(backend.backend.settings.ce_name, backend.backend.user, pilot.sandbox_id)
    assert job["status"] in ("submitted", "queued")
    assert job["qos"] == "high" and job["image"] == "lancium/ubuntu"
    assert job["command_line"] == f"/bin/sh {LAUNCHER}"
    assert job["max_run_time"] == 600  # BatchRuntime 100 s raised to Lancium's minimum
    assert job["resources"]["core_count"] == 4 and job["resources"]["memory"] == 8
    assert {"variable": "GLIDEIN_X", "value": "y z"} in job["environment"]
    assert pilot.iwd not in job["notes"]  # where outputs go is kept on the CE, never on Lancium
    record = backend.records.get(job_id)
    assert record is not None and (record.stdout, record.iwd, record.name) == (pilot.stdout, pilot.iwd, job["name"])

    files = {f["name"]: f for f in sim.input_files(parse_job_id(job_id))}
    assert set(files) == {LAUNCHER, "glidein_startup.sh", "x509up_u1000", "pilot.token"}
    assert all(f["upload_complete"] for f in files.values())
    content = {name: sim.input_bytes(parse_job_id(job_id), f["id"]) for name, f in files.items()}
    assert content["glidein_startup.sh"] == b"#!/bin/sh\necho pilot\n"
    assert content["pilot.token"] == b"TOKEN"
    launcher = content[LAUNCHER].decode()
    assert "exec ./glidein_startup.sh -v 'a b'" in launcher
    assert 'X509_USER_PROXY="$PWD"/x509up_u1000' in launcher

    state = backend.status(job_id)
    assert state.phase is Phase.IDLE
    assert state.cpus_provisioned == 4 and state.memory_provisioned_mb == 8 * 1024


def test_route_settings_choose_image_and_qos(backend: Agent, sim: LanciumSim,
                                             tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, settings={"lancium_image": "osg/pilot:1", "lancium_qos": "low"},
                       gpus=2, whole_node=True, disk_kb=20 * 1024 * 1024)
    job = sim.job(parse_job_id(backend.submit(pilot)))
    assert (job["image"], job["qos"]) == ("osg/pilot:1", "low")
    assert job["resources"]["gpu_count"] == 2
    assert job["resources"]["node_exclusive"] is True
    assert job["resources"]["scratch"] == 20


def test_submit_is_idempotent_per_sandbox(make_backend: BackendFactory, sim: LanciumSim,
                                          tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"})
    first = make_backend().submit(pilot)
    # Same process again, and a fresh process (a gridmanager restart), concurrently.
    results: List[str] = []
    backends = [make_backend(), make_backend()]
    threads = [threading.Thread(target=lambda b=b: results.append(b.submit(pilot))) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [first, first]
    assert [j["id"] for j in sim.jobs().values()] == [parse_job_id(first)]


def test_resubmit_after_the_job_ended_creates_a_new_job(backend: Agent, sim: LanciumSim,
                                                        tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path)
    first = backend.submit(pilot)
    sim.advance(parse_job_id(first), "error", error_string="node lost")
    second = backend.submit(pilot)
    assert second != first


def test_half_made_job_is_completed_not_made_again(backend: Agent, sim: LanciumSim,
                                                   tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path)
    # Two jobs an earlier GAHP of this user made and recorded, then a job someone else made with the name.
    name = f"podgahp-{sandbox_key(backend.backend.settings.ce_name, backend.backend.user, pilot.sandbox_id)}-0123456789ab"
    older, newer, foreign = (backend.backend.client.create_job({"name": name}) for _ in range(3))
    for made in (older, newer):
        backend.records.put(JobRecord(job_id_of(made["id"]), pilot.sandbox_id, pilot.iwd, pilot.stdout,
                                      pilot.stderr, time.time(), name))
    backend.backend.client.create_input(newer["id"], LAUNCHER, size=3)  # an upload cut short
    job_id = backend.submit(pilot)
    assert parse_job_id(job_id) == newer["id"]
    job = sim.job(newer["id"])
    assert job["status"] != "created" and job["command_line"]
    names = sorted(i["name"] for i in job["input_files"])
    assert len(names) == len(set(names)) and LAUNCHER in names
    assert all(i["upload_complete"] for i in job["input_files"])
    assert sim.count("POST", "/jobs") == 3  # only the three made above
    assert sim.count("DELETE", f"/jobs/{older['id']}", 202) == 1
    assert sim.job(foreign["id"])["status"] == "created"  # not this GAHP's: neither resumed nor deleted
    assert [r for r in sim.request_log if f"/jobs/{foreign['id']}" in r.path] == []


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("POST", "/jobs", 502),
        ("POST", "/jobs", 0),
        ("POST", "/jobs/*/data", 504),
        ("PATCH", "/jobs/*/data/*", 0),
        ("POST", "/jobs/*/submit", 502),
        ("POST", "/jobs/*/submit", 0),
    ],
    ids=["create-502", "create-reset", "input-504", "chunk-reset", "submit-502", "submit-reset"],
)
def test_lost_answer_makes_one_complete_job(backend: Agent, sim: LanciumSim, tmp_path: Path,
                                            method: str, path: str, status: int) -> None:
    sim.inject(status, method=method, path=path, lost_answer=True)
    job_id = backend.submit(make_pilot(tmp_path))
    ours = [j for j in sim.jobs().values() if j["status"] != "delete pending"]
    assert [j["id"] for j in ours] == [parse_job_id(job_id)]
    assert ours[0]["status"] != "created"
    names = [i["name"] for i in ours[0]["input_files"]]
    assert len(names) == len(set(names)) == 4 and all(i["upload_complete"] for i in ours[0]["input_files"])
    # one submit acted; any other was refused as "already submitted"
    assert sim.count("POST", "/jobs/*/submit") - sim.count("POST", "/jobs/*/submit", 409) == 1
    assert sim.count("DELETE") == 0  # nothing made twice, so nothing to undo


def test_job_that_ended_before_the_lost_submit_answer_was_resolved_is_not_made_again(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    """An attempt ends without knowing whether its submit went through (every answer to it was
    lost); by the next attempt the job has already run (a pilot with
    no work ends in seconds). That job is the pilot: no second job is made for the sandbox."""
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="1")
    sim.inject(500, method="POST", path="/jobs/*/submit", count=2, lost_answer=True)
    listed = backend.backend.jobs.get

    def list_after_the_job_ended(not_before: Optional[float] = None) -> Tuple[Snapshot, bool]:
        for lancium_id, job in sim.jobs().items():
            if job["status"] in ("submitted", "queued", "ready", "running"):
                sim.advance(lancium_id, "finished")
        return listed(not_before)

    backend.backend.jobs.get = list_after_the_job_ended  # type: ignore[method-assign]
    job_id = backend.submit(make_pilot(tmp_path))
    assert [j["id"] for j in sim.jobs().values()] == [parse_job_id(job_id)]
    assert sim.count("POST", "/jobs") == 1
    assert sim.job(parse_job_id(job_id))["status"] == "finished"
    assert wait_phase(backend, job_id, (Phase.COMPLETED,), timeout=30).phase is Phase.COMPLETED  # its outputs


def test_nothing_half_made_when_every_attempt_fails(make_backend: BackendFactory, sim: LanciumSim,
                                                    tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="2")
    sim.inject(500, method="POST", path="/jobs/*/submit", count=9)
    with pytest.raises(TransientError, match="HTTP 500"):
        backend.submit(make_pilot(tmp_path))
    assert sim.count("POST", "/jobs") == 1  # created once, resumed by the later attempts
    assert sim.count("DELETE", "/jobs/*", 202) >= 1  # the half-made job, undone
    assert all(deleted(sim, job_id) for job_id in sim.jobs())


@pytest.mark.parametrize(
    "change, message",
    [
        ({"memory_mb": 200 * 1024}, "exceeds the limit of 128 GB"),
        ({"settings": {"lancium_qos": "urgent"}}, "lancium_qos = 'urgent' is not a Lancium QOS"),
        ({"queue": "gpu"}, "Queue (the route's BatchQueue) = 'gpu'"),
        ({"executable": "/nonexistent/pilot"}, "executable /nonexistent/pilot cannot be read"),
        ({"gpus": 9}, "at most 8 GPUs"),
    ],
    ids=["too-much-memory", "bad-qos-setting", "queue-not-a-qos", "missing-executable", "too-many-gpus"],
)
def test_invalid_pilot_is_refused_before_any_call(backend: Agent, sim: LanciumSim,
                                                  tmp_path: Path, change: Dict[str, object],
                                                  message: str) -> None:
    with pytest.raises(InvalidJob, match=message.replace("(", r"\(").replace(")", r"\)")):
        backend.submit(make_pilot(tmp_path, **change))
    assert sim.request_log == []


def test_billing_required_is_admin_actionable(backend: Agent, sim: LanciumSim,
                                              tmp_path: Path) -> None:
    sim.settings.billing_ok = False
    with pytest.raises(BackendError, match="billing required.*administrator"):
        backend.submit(make_pilot(tmp_path))
    assert sim.count("DELETE", "/jobs/*", 202) == 1


def test_qos_not_achievable_after_bounded_retries(make_backend: BackendFactory, sim: LanciumSim,
                                                  tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="2")
    sim.inject(503, method="POST", path="/jobs/*/submit", count=3, message="Requested QOS not achievable")
    with pytest.raises(BackendError, match="QOS.*retry later.*PODGAHP_LANCIUM_QOS"):
        backend.submit(make_pilot(tmp_path))
    assert sim.count("POST", "/jobs/*/submit") == 3
    assert sim.count("DELETE", "/jobs/*", 202) == 1


def test_transient_503_at_submit_is_retried(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    sim.inject(503, method="POST", path="/jobs/*/submit", count=1)
    job_id = backend.submit(make_pilot(tmp_path))
    assert sim.job(parse_job_id(job_id))["status"] != "created"


def test_lancium_validation_error_is_invalid_job(backend: Agent, sim: LanciumSim,
                                                 tmp_path: Path) -> None:
    sim.inject(400, method="POST", path="/jobs/*/submit", message="image: must be a valid image")
    with pytest.raises(InvalidJob, match="HTTP 400.*must be a valid image"):
        backend.submit(make_pilot(tmp_path))


# --------------------------------------------------------------------------------------------
# Status, outputs


def test_pilot_runs_and_completes_with_outputs(backend: Agent, sim: LanciumSim,
                                               tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_STDOUT": "hello out\n", "PODGAHP_SIM_STDERR": "oops\n",
                                      "PODGAHP_SIM_EXIT_CODE": "3", "PODGAHP_SIM_RUN_SECONDS": "0.3",
                                      "PODGAHP_SIM_QUEUE_SECONDS": "0.3"})
    sim.settings.output_prepare_polls = 2  # outputs answer 202 twice before they are ready
    job_id = backend.submit(pilot)
    seen: List[Phase] = []
    while True:
        state = backend.status(job_id)
        if not seen or seen[-1] is not state.phase:
            seen.append(state.phase)
        if state.phase is Phase.COMPLETED:
            break
        assert not os.path.exists(pilot.stdout or "")  # nothing half-written before completion
        time.sleep(0.02)
    assert seen == [Phase.IDLE, Phase.RUNNING, Phase.COMPLETED]
    assert state.exit_code == 3
    assert Path(pilot.stdout or "").read_bytes() == b"hello out\n"
    assert Path(pilot.stderr or "").read_bytes() == b"oops\n"
    ad = state.status_ad()
    for attr in ("JobStatus = 4", "ExitCode = 3", "CpusProvisioned = 2", "MemoryProvisioned = 4096"):
        assert attr in ad
    assert sim.count("GET", "/jobs/*/output/stdout.txt", 202) == 2


def test_empty_stderr_and_shared_out_err(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    out = str(tmp_path / "iwd" / "both.log")
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_STDOUT": "out\n", "PODGAHP_SIM_STDERR": "err\n"},
                       stdout=out, stderr=out)
    job_id = backend.submit(pilot)
    wait_phase(backend, job_id, (Phase.COMPLETED,))
    assert Path(out).read_bytes() == b"out\nerr\n"

    pilot2 = make_pilot(tmp_path, "other_sandbox", stderr=str(tmp_path / "iwd" / "empty.err"))
    wait_phase(backend, backend.submit(pilot2), (Phase.COMPLETED,))
    assert Path(tmp_path / "iwd" / "empty.err").read_bytes() == b""  # 204 -> empty file


def test_outputs_that_never_come_do_not_block_completion_forever(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_OUTPUT_WAIT_SECONDS="0.3")
    sim.settings.output_prepare_polls = 1000
    job_id = backend.submit(make_pilot(tmp_path))
    state = wait_phase(backend, job_id, (Phase.COMPLETED,))
    assert state.exit_code == 0


def test_unwritable_out_holds_with_errno(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    blocker = tmp_path / "iwd" / "not-a-dir"
    pilot = make_pilot(tmp_path, stdout=str(blocker / "pilot.out"))
    blocker.write_text("file")
    state = wait_phase(backend, backend.submit(pilot), (Phase.HELD, Phase.COMPLETED))
    assert state.phase is Phase.HELD
    assert (state.hold_code, state.hold_subcode) == (1001, HOLD_OUTPUT.subcode) and HOLD_OUTPUT.retryable
    assert "its output cannot be written" in (state.hold_reason or "") and "errno 20" in (state.hold_reason or "")


def test_error_is_held_with_error_string(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_ERROR": "container exited: image not found"})
    state = wait_phase(backend, backend.submit(pilot), (Phase.HELD, Phase.COMPLETED))
    assert state.phase is Phase.HELD
    assert "image not found" in (state.hold_reason or "")
    assert (state.hold_code, state.hold_subcode) == (HOLD_REMOTE_ERROR.code, HOLD_REMOTE_ERROR.subcode)
    assert HOLD_REMOTE_ERROR.retryable
    assert "HoldReasonCode = 1001" in state.status_ad() and "HoldReasonSubCode = 20" in state.status_ad()


def test_error_at_max_run_time_is_a_run_time_hold(backend: Agent, sim: LanciumSim,
                                                  tmp_path: Path) -> None:
    job_id = backend.submit(make_pilot(tmp_path, wall_time_s=700))
    sim.advance(parse_job_id(job_id), "error", error_string="walltime exceeded", execution_time=700)
    state = backend.status(job_id)
    assert state.phase is Phase.HELD
    assert (state.hold_code, state.hold_subcode) == (1002, 21) and not HOLD_RUN_TIME.retryable
    assert "max_run_time" in (state.hold_reason or "")


def _job_in_state(backend: Agent, sim: LanciumSim, tmp_path: Path, key: str) -> str:
    """A job of ours the simulator shows as the row ``key`` of the state table says (``gone``: vanished;
    ``error/RunTime``: in error after using up its run time)."""
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"})
    if key == "created":  # made and recorded by a submit that went no further
        name = f"podgahp-{sandbox_key(backend.backend.settings.ce_name, backend.backend.user, pilot.sandbox_id)}-0123456789ab"
        job_id = job_id_of(backend.backend.client.create_job({"name": name})["id"])
        backend.records.put(JobRecord(job_id, pilot.sandbox_id, pilot.iwd, None, None, time.time(), name))
        return job_id
    job_id = backend.submit(pilot)
    lancium_id = parse_job_id(job_id)
    if key in ("delete pending", GONE):
        backend.backend.client.delete_job(lancium_id)
        if key == GONE:
            sim.wait_for(lancium_id, "gone")
    elif key == "error/RunTime":
        sim.advance(lancium_id, "error", error_string="walltime exceeded", execution_time=2592000)
    else:
        sim.advance(lancium_id, key)
    return job_id


@pytest.mark.parametrize("key, rule", sorted(STATE_TABLE.items()), ids=sorted(STATE_TABLE))
def test_every_row_of_the_state_table_is_reached(make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path,
                                                 key: str, rule: Rule) -> None:
    sim.settings.output_prepare_polls = 0
    job_id = _job_in_state(make_backend(), sim, tmp_path, key)
    fresh = make_backend()  # a process that has never seen the job
    state = fresh.status(job_id)
    assert state.phase is rule.phase
    if rule.phase is Phase.COMPLETED:
        assert state.exit_code == 0
    if rule.hold is not None:
        assert (state.hold_code, state.hold_subcode) == (rule.hold.code, rule.hold.subcode)
        assert state.hold_reason and state.hold_reason.startswith(f"{rule.reason}: Lancium job {parse_job_id(job_id)}: ")


def test_state_table_covers_every_lancium_state() -> None:
    assert {key.split("/")[0] for key in STATE_TABLE} == set(STATUSES) | {GONE}


def test_one_list_call_per_cycle_and_detail_reads_only_on_change(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="0.5")
    job_ids = [backend.submit(make_pilot(tmp_path, f"sandbox_{i}", env={"PODGAHP_SIM_NEVER_START": "1"}))
               for i in range(6)]
    for job_id in job_ids:
        sim.wait_for(parse_job_id(job_id), "queued")
    time.sleep(0.5)
    sim.clear_log()

    def poll_all() -> List[JobState]:
        states: List[JobState] = []
        threads = [threading.Thread(target=lambda j=j: states.append(backend.status(j))) for j in job_ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return states

    assert {s.phase for s in poll_all()} == {Phase.IDLE}
    assert sim.count("GET", "/jobs") == 1
    assert sim.count("GET", "/jobs/*") == 6  # submitted -> queued: one detail read each
    assert {s.phase for s in poll_all()} == {Phase.IDLE}
    assert sim.count("GET", "/jobs") == 1 and sim.count("GET", "/jobs/*") == 6  # cached, no change

    sim.advance(parse_job_id(job_ids[0]), "running")
    time.sleep(0.5)
    states = poll_all()
    assert sorted(s.phase.value for s in states) == ["idle"] * 5 + ["running"]
    assert sim.count("GET", "/jobs") == 2 and sim.count("GET", "/jobs/*") == 7


def test_reported_state_never_goes_back(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_pilot(tmp_path))
    sim.advance(parse_job_id(job_id), "running")
    assert backend.status(job_id).phase is Phase.RUNNING
    sim.advance(parse_job_id(job_id), "queued")
    assert backend.status(job_id).phase is Phase.RUNNING
    sim.advance(parse_job_id(job_id), "error")
    assert backend.status(job_id).phase is Phase.HELD
    sim.advance(parse_job_id(job_id), "running")
    assert backend.status(job_id).phase is Phase.HELD


def test_fresh_process_finishes_the_job_from_its_id(make_backend: BackendFactory, sim: LanciumSim,
                                                    tmp_path: Path) -> None:
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_STDOUT": "from lancium\n"})
    job_id = make_backend().submit(pilot)
    sim.wait_for(parse_job_id(job_id), "finished")
    state = wait_phase(make_backend(), job_id, (Phase.COMPLETED,))
    assert state.exit_code == 0
    assert Path(pilot.stdout or "").read_text() == "from lancium\n"


def test_job_submitted_after_the_list_was_taken_is_not_gone(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="60")
    backend.ping()  # takes the list now
    sim.clear_log()
    backend.backend.jobs.get(not_before=0)  # served from the cache
    job_id = backend.submit(make_pilot(tmp_path))  # refreshes it (idempotency check) first
    assert backend.status(job_id).phase is Phase.IDLE
    assert sim.count("GET", "/jobs/*") == 0


def test_status_keeps_the_last_good_list_while_lancium_fails(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="1", PODGAHP_LANCIUM_LIST_STALE_SECONDS="60")
    job_id = backend.submit(make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"}))
    assert backend.status(job_id).phase is Phase.IDLE
    sim.inject(500, method="GET", path="/jobs", count=100)
    assert backend.status(job_id).phase is Phase.IDLE
    assert sim.count("GET", "/jobs", 500) == 2  # one attempt plus one retry
    sim.clear_faults()


def test_failed_detail_read_keeps_the_last_state(make_backend: BackendFactory, sim: LanciumSim,
                                                 tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="0")
    job_id = backend.submit(make_pilot(tmp_path))
    sim.advance(parse_job_id(job_id), "running")
    sim.inject(500, method="GET", path="/jobs/*", count=1)
    assert backend.status(job_id).phase is Phase.IDLE  # the change is seen on the next query
    assert backend.status(job_id).phase is Phase.RUNNING


def test_status_without_any_list_is_transient(make_backend: BackendFactory, sim: LanciumSim,
                                             tmp_path: Path) -> None:
    job_id = make_backend().submit(make_pilot(tmp_path))
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="0")  # a fresh process
    sim.inject(502, method="GET", path="/jobs", count=5)
    with pytest.raises(TransientError, match="cannot list Lancium jobs.*HTTP 502"):
        backend.status(job_id)


@pytest.mark.parametrize("job_id", ["lancium/", "k8s/ns/pod", "lancium/12 3", "lancium/x", "lancium/0",
                                    "lancium/007", "lancium/1/", "lancium/1\n", "lancium/-1", "lancium/1e3",
                                    "lancium/" + "9" * 19],
                         ids=["empty", "other-backend", "space", "not-numeric", "zero", "leading-zeros", "slash",
                              "newline", "negative", "exponent", "too-long"])
def test_malformed_job_ids_are_refused_before_any_request(backend: Agent, sim: LanciumSim,
                                                          job_id: str) -> None:
    for act in (backend.status, backend.cancel, lambda j: backend.refresh_proxy(j, "/tmp/x509up")):
        with pytest.raises(InvalidJob, match="not a Lancium job id"):
            act(job_id)
    assert sim.request_log == []


# --------------------------------------------------------------------------------------------
# Cancel, clean-up, ping, refresh


def test_cancel_terminates_and_deletes_idempotently(backend: Agent, sim: LanciumSim,
                                                    tmp_path: Path) -> None:
    job_id = backend.submit(make_pilot(tmp_path, env={"PODGAHP_SIM_RUN_SECONDS": "60"}))
    wait_phase(backend, job_id, (Phase.RUNNING,))
    backend.cancel(job_id)
    lancium_id = parse_job_id(job_id)
    assert deleted(sim, lancium_id)
    assert sim.count("POST", f"/jobs/{lancium_id}/terminate", 202) == 1
    assert sim.count("DELETE", f"/jobs/{lancium_id}", 202) == 1
    backend.cancel(job_id)  # again: terminate 409, delete again
    sim.wait_for(lancium_id, "gone")
    backend.cancel(job_id)  # gone: 404s
    assert backend.status(job_id).phase is Phase.REMOVED
    record = backend.records.get(job_id)
    assert record is not None and record.cancel == "done"


def test_cancel_of_finished_job(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_pilot(tmp_path))
    sim.advance(parse_job_id(job_id), "finished")
    backend.cancel(job_id)
    assert sim.count("POST", "/jobs/*/terminate", 409) == 1
    assert deleted(sim, parse_job_id(job_id))


def test_cancel_lancium_refused_is_answered_failed_and_retried(make_backend: BackendFactory, sim: LanciumSim,
                                                             tmp_path: Path) -> None:
    """A cancel Lancium did not carry out is an error result (the gridmanager keeps a held job's id);
    it is retried in the background until the job is gone."""
    backend = make_backend(PODGAHP_LANCIUM_RETRIES="1")
    job_id = backend.submit(make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"}))
    sim.inject(500, method="DELETE", count=4)
    with pytest.raises(TransientError, match="could not be cancelled now.*HTTP 500"):
        backend.cancel(job_id)
    record = backend.records.get(job_id)
    assert record is not None and record.cancel == "pending"
    wait_until(lambda: sim.job(parse_job_id(job_id)).get("status"), "the job deleted by the background retry",
               10, 0.05, done=lambda status: status in ("delete pending", None))
    wait_until(lambda: backend.records.get(job_id), "the record saying the cancel is done", 10, 0.05,
               done=lambda r: r is not None and r.cancel == "done")
    backend.cancel(job_id)  # repeated: still answered


def test_a_pending_cancel_outlives_the_gahp(make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    """A GAHP that exits before Lancium answers leaves the cancel in the job's record; the next GAHP of
    the user sees it through."""
    first = make_backend(PODGAHP_LANCIUM_RETRIES="0", PODGAHP_LANCIUM_CANCEL_RETRY_MAX_SECONDS="0")
    job_id = first.submit(make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"}))
    sim.inject(503, method="DELETE", count=1000)
    with pytest.raises(TransientError):
        first.cancel(job_id)
    first.close()
    sim.clear_faults()
    assert sim.job(parse_job_id(job_id))["status"] != "delete pending"
    make_backend().start()
    wait_until(lambda: sim.job(parse_job_id(job_id)).get("status"), "the job deleted by the next GAHP", 10, 0.05,
               done=lambda status: status in ("delete pending", None))


def test_cleanup_deletes_old_finished_jobs_only_once_reported(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    backend = make_backend(PODGAHP_LANCIUM_CLEANUP_AFTER_SECONDS="0.2")
    done = backend.submit(make_pilot(tmp_path, "done"))
    unreported = backend.submit(make_pilot(tmp_path, "unreported"))
    foreign = backend.backend.client.create_job({"name": "someone else's job"})["id"]
    # Named as this user's would be, but made by someone else (no record): not this GAHP's to delete.
    name = f"podgahp-{sandbox_key(backend.backend.settings.ce_name, backend.backend.user, 'x')}-0123456789ab"
    lookalike = backend.backend.client.create_job({"name": name})["id"]
    sim.advance(parse_job_id(unreported), "finished")
    wait_phase(backend, done, (Phase.COMPLETED,))
    backend.status(unreported)  # not yet: outputs are awaited, so it is RUNNING at first
    def cleaned() -> bool:
        try:
            backend.status(done)
        except InvalidJob:
            pass  # cleaned up and forgotten between two probes (a busy machine): the job must be gone
        return deleted(sim, parse_job_id(done))

    wait_until(cleaned, "the finished job cleaned up", 30, 0.05)
    assert sim.job(foreign)["status"] == "created"  # not named by podgahp
    assert sim.job(lookalike)["status"] == "created"
    assert sim.job(parse_job_id(unreported))["status"] == "finished"  # outcome not reported yet


def test_ping_checks_key_and_list(backend: Agent, sim: LanciumSim) -> None:
    backend.ping()
    assert sim.count("POST", "/access_tokens", 201) == 1
    assert sim.count("GET", "/jobs", 200) == 1


def test_refresh_proxy_is_accepted(backend: Agent, sim: LanciumSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_pilot(tmp_path))
    sim.clear_log()
    backend.refresh_proxy(job_id, "/tmp/x509up")
    assert sim.request_log == []


def test_lancium_closes_as_a_black_hole_when_its_jobs_keep_failing(make_backend: BackendFactory, sim: LanciumSim,
                                                                  tmp_path: Path) -> None:
    """The GAHP-wide guard covers Lancium too (one queue, ``lancium``): after the threshold, a submit
    fails at once naming it and the cause, and no job is created."""
    backend = make_backend(PODGAHP_BLACKHOLE_FAILURES="2", PODGAHP_STATE_DIR=str(tmp_path))
    for i in range(2):
        job_id = backend.submit(make_pilot(tmp_path, f"sandbox_{i}", env={"PODGAHP_SIM_NEVER_START": "1"}))
        sim.advance(parse_job_id(job_id), "error", error_string="node lost")
        wait_phase(backend, job_id, (Phase.HELD,))
    creates = sim.count("POST", "/jobs")
    with pytest.raises(BackendError, match="queue lancium is closed as a black hole.*node lost"):
        backend.submit(make_pilot(tmp_path, "sandbox_3"))
    assert sim.count("POST", "/jobs") == creates
