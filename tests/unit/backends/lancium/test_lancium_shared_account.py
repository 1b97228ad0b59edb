"""One Lancium account, several users of one CE, each with their own key: what a hostile user reaches
through their own GAHP (job ids, claimed sandboxes) and through the API with their key (jobs made up to
look like the victim's, notes naming where to write).

Every attack is refused with a message naming why, no request reaches Lancium for a job the GAHP did not
make, and no file outside the victim's job directory is written."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterator, List

import pytest

from gahp.agent import Agent
from gahp.backends.lancium.backend import LanciumBackend
from gahp.backends.lancium.identity import job_id_of, new_name, parse_job_id, pending_key, sandbox_key
from gahp.backends.lancium.settings import LanciumSettings
from gahp.core.errors import InvalidJob
from gahp.rules.records import JobRecord
from gahp.core.jobstate import Phase
from lancium_helpers import BackendFactory, deleted, knobs_for, make_pilot, wait_phase
from podgahp_sim.lancium import LanciumSim

VICTIM_SANDBOX = "ce.test_victim_12.0_1795297304"


def _key_file(path: Path, key: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return path


@pytest.fixture
def users(sim: LanciumSim, key_file: Path, tmp_path: Path) -> Iterator[List[Agent]]:
    """The GAHPs of alice and mallory on one CE (one state directory), each with a key of their own."""
    mallory_key = _key_file(tmp_path / "mallory.key", sim.new_api_key("mallory"))
    made = [Agent(LanciumBackend(LanciumSettings.from_knobs(knobs_for(sim, key_file)), user="alice")),
            Agent(LanciumBackend(LanciumSettings.from_knobs(knobs_for(sim, mallory_key)), user="mallory"))]
    yield made
    for backend in made:
        backend.close()


def writes(sim: LanciumSim) -> List[str]:
    return [f"{r.method} {r.path}" for r in sim.request_log if r.method in ("POST", "PUT", "PATCH", "DELETE")
            and r.path != "/access_tokens"]


def test_claiming_another_users_sandbox_gets_a_job_of_ones_own(users: List[Agent], sim: LanciumSim,
                                                               tmp_path: Path) -> None:
    alice, mallory = users
    env = {"PODGAHP_SIM_RUN_SECONDS": "60"}
    victim = alice.submit(make_pilot(tmp_path / "alice", VICTIM_SANDBOX, env=env))
    wait_phase(alice, victim, (Phase.RUNNING,))
    # +remote_JobDirectory = "home_bl_<victim's sandbox>": same sandbox id, another user
    attacker = mallory.submit(make_pilot(tmp_path / "mallory", VICTIM_SANDBOX, env=env))
    assert attacker != victim
    mallory.cancel(attacker)
    assert deleted(sim, parse_job_id(attacker))
    assert sim.job(parse_job_id(victim))["status"] == "running"
    assert alice.status(victim).phase is Phase.RUNNING


def test_another_users_job_ids_are_refused_without_a_request(users: List[Agent], sim: LanciumSim,
                                                              tmp_path: Path) -> None:
    alice, mallory = users
    victim = alice.submit(make_pilot(tmp_path / "alice", VICTIM_SANDBOX, env={"PODGAHP_SIM_RUN_SECONDS": "60"}))
    wait_phase(alice, victim, (Phase.RUNNING,))
    mallory.ping()
    sim.clear_log()
    guesses = [job_id_of(n) for n in range(1, 8)]
    for job_id in [victim] + guesses:
        with pytest.raises(InvalidJob, match="was not made by this CE .* for user mallory"):
            mallory.cancel(job_id)
        with pytest.raises(InvalidJob, match="was not made by this CE"):
            mallory.status(job_id)
        with pytest.raises(InvalidJob, match="was not made by this CE"):
            mallory.refresh_proxy(job_id, str(tmp_path / "proxy"))
    assert sim.request_log == []
    assert sim.job(parse_job_id(victim))["status"] == "running"
    assert alice.status(victim).phase is Phase.RUNNING


def test_a_job_made_up_as_the_victims_with_forged_notes_is_never_adopted_nor_written_from(
        users: List[Agent], sim: LanciumSim, tmp_path: Path) -> None:
    """Mallory, with her own key, makes jobs named as alice's pilot would be (in every form a GAHP ever
    gave) whose notes say its output goes to a private file of alice's outside the pilot's directory.
    Alice's GAHP makes its own job, and writes only the pilot's own Out."""
    alice, mallory = users
    private = tmp_path / "alice-home" / ".ssh" / "authorized_keys"
    private.parent.mkdir(parents=True)
    private.write_text("alice's key\n")
    os.chmod(private, 0o600)
    pilot = make_pilot(tmp_path / "alice", VICTIM_SANDBOX, env={"PODGAHP_SIM_STDOUT": "the pilot's output"})
    forged_notes = json.dumps({"podgahp": 1, "sandbox": VICTIM_SANDBOX, "iwd": str(private.parent),
                               "out": str(private), "err": str(private)})
    key = sandbox_key(alice.backend.settings.ce_name, "alice", VICTIM_SANDBOX)
    forged = []
    for name in (f"podgahp:{VICTIM_SANDBOX}", f"podgahp-{key}-0123456789ab"):
        made = mallory.backend.client.create_job({"name": name, "notes": forged_notes, "qos": "high", "image": "x",
                                          "command_line": "true", "max_run_time": 600,
                                          "resources": {"core_count": 2, "memory": 4},
                                          "environment": [{"variable": "PODGAHP_SIM_STDOUT",
                                                           "value": "ssh-rsa mallory\n"}]})
        mallory.backend.client.submit_job(made["id"])
        forged.append(made["id"])
    sim.wait_for(forged[0], "running")
    sim.clear_log()

    job_id = alice.submit(pilot)
    assert parse_job_id(job_id) not in forged
    state = wait_phase(alice, job_id, (Phase.COMPLETED,))
    assert state.exit_code == 0
    assert Path(pilot.stdout or "").read_text() == "the pilot's output"
    for lancium_id in forged:
        sim.wait_for(lancium_id, "finished")
        with pytest.raises(InvalidJob, match="was not made by this CE"):
            alice.status(job_id_of(lancium_id))
    assert private.read_text() == "alice's key\n"
    assert not [r for r in sim.request_log if any(f"/jobs/{i}" in r.path for i in forged)]


def test_a_lost_create_answer_is_completed_but_a_copy_of_its_name_is_not(
        make_backend: BackendFactory, sim: LanciumSim, tmp_path: Path) -> None:
    """A GAHP that died while its create was on the way left the name it was creating under recorded;
    the next submit of the sandbox takes the oldest job of that name as its own, and leaves alone a
    job someone made later under the same name (it was visible in the account's list)."""
    backend = make_backend()
    pilot = make_pilot(tmp_path, env={"PODGAHP_SIM_NEVER_START": "1"})
    key = sandbox_key(backend.backend.settings.ce_name, backend.backend.user, pilot.sandbox_id)
    name = new_name(key)
    backend.records.put(JobRecord(pending_key(key), pilot.sandbox_id, pilot.iwd, pilot.stdout, pilot.stderr,
                                  time.time(), name))
    made = backend.backend.client.create_job({"name": name})  # the create whose answer never came back
    copy = backend.backend.client.create_job({"name": name})
    sim.clear_log()
    job_id = backend.submit(pilot)
    assert parse_job_id(job_id) == made["id"]
    assert sim.job(made["id"])["status"] != "created"
    assert sim.job(copy["id"])["status"] == "created"
    assert not [r for r in sim.request_log if f"/jobs/{copy['id']}" in r.path]
    assert backend.records.get(pending_key(key)) is None
