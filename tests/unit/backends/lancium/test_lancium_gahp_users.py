"""Two users' ``lancium_gahp`` programs on one Lancium account, spoken to as the gridmanager speaks:
what the second user (mallory, a key of her own to the same account) reaches of the first user's
(alice's) pilot through her GAHP (job ids seen or guessed, the victim's sandbox claimed) and with her
key (a job made up to look like the victim's, whose notes say where its output goes).

Each GAHP keeps its state where its user's is kept (the tests run as one local user, so each is given
a state directory of its own, as two users have). Every attack is answered with an error naming why;
no write reaches the victim's job and no file of the victim's is written but the pilot's own Out."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from gahp_driver import GahpProcess
from podgahp_sim.lancium import LanciumSim
from polling import wait_until

Start = Callable[..., GahpProcess]

VICTIM_SANDBOX = "ce.test_victim_12.0_1795297304"
REFUSED = "was not made by this CE"


class User:
    """One user's GAHP and the directory its pilots run from."""

    def __init__(self, gahp: GahpProcess, home: Path) -> None:
        self.gahp = gahp
        self.home = home
        self.ask = gahp.request

    def submit(self, sandbox: str, env: str) -> str:
        iwd = self.home / sandbox
        iwd.mkdir(parents=True, exist_ok=True)
        rc, err, job_id = self.ask("BLAH_JOB_SUBMIT", _submit_ad(iwd, sandbox, env))
        assert (rc, err) == ("0", "NULL"), err
        return job_id

    def status(self, job_id: str) -> Tuple[str, str, Optional[str]]:
        fields = self.ask("BLAH_JOB_STATUS", job_id)
        return fields[0], fields[1], (fields[2] if len(fields) > 2 else None)

    def wait_status(self, job_id: str, code: str) -> None:
        wait_until(lambda: self.status(job_id), f"{job_id} in BLAHP state {code}", 30, 0.05,
                   done=lambda answer: answer[:3] == ("0", "NULL", code))


def _submit_ad(iwd: Path, sandbox: str, env: str) -> str:
    exe = iwd / "pilot.sh"
    exe.write_text("#!/bin/sh\necho pilot\n")
    os.chmod(exe, 0o755)
    attrs = {"Cmd": f'"{exe}"', "Iwd": f'"{iwd}"', "Out": '"p.out"', "Err": '"p.err"', "In": '"/dev/null"',
             "JobDirectory": f'"home_bl_{sandbox}"', "Environment": f'"{env}"', "RequestMemory": "2048",
             "BatchRuntime": "3600", "gridtype": '"lancium"', "GridResource": '"batch lancium"'}
    return "[ " + "; ".join(f"{k} = {v}" for k, v in attrs.items()) + " ]"


def _key_file(path: Path, key: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return path


def _lancium_id(job_id: str) -> int:
    return int(job_id.split("/", 1)[1])


@pytest.fixture
def users(start_gahp: Start, sim: LanciumSim, key_file: Path, tmp_path: Path) -> Iterator[Dict[str, User]]:
    made = {}
    for name in ("alice", "mallory"):
        key = key_file if name == "alice" else _key_file(tmp_path / "mallory.key", sim.new_api_key(name))
        state = tmp_path / name / "state"
        state.mkdir(parents=True)
        gahp = start_gahp(program="lancium_gahp", PODGAHP_LANCIUM_BASE_URL=sim.url,
                          PODGAHP_LANCIUM_API_KEY_FILE=str(key), PODGAHP_STATE_DIR=str(state),
                          PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="0", PODGAHP_LANCIUM_BACKOFF_SECONDS="0.01",
                          PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS="0.05")
        gahp.start()
        made[name] = User(gahp, tmp_path / name / "jobs")
    yield made
    for user in made.values():
        assert user.gahp.close() == 0


def _writes(sim: LanciumSim) -> List[str]:
    return [f"{r.method} {r.path}" for r in sim.request_log
            if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.path != "/access_tokens"]


def test_another_users_gahp_cannot_read_the_victims_pilot(users: Dict[str, User], sim: LanciumSim) -> None:
    alice, mallory = users["alice"], users["mallory"]
    victim = alice.submit(VICTIM_SANDBOX, "PODGAHP_SIM_RUN_SECONDS=120")
    alice.wait_status(victim, "2")
    sim.clear_log()

    rc, err, _ = mallory.status(victim)
    assert rc != "0" and REFUSED in err, (rc, err)
    rc, err = mallory.ask("BLAH_JOB_REFRESH_PROXY", victim, str(mallory.home / "proxy"))
    assert rc != "0" and REFUSED in err, (rc, err)
    assert _writes(sim) == []


@pytest.mark.parametrize("guessed", [False, True], ids=["seen", "guessed"])
def test_another_users_gahp_cannot_cancel_the_victims_pilot(users: Dict[str, User], sim: LanciumSim,
                                                            guessed: bool) -> None:
    """The victim's job id as seen (in the queue, a log), or ids tried in turn: the first few of the
    account and those around the victim's (which include it)."""
    alice, mallory = users["alice"], users["mallory"]
    victim = alice.submit(VICTIM_SANDBOX, "PODGAHP_SIM_RUN_SECONDS=120")
    alice.wait_status(victim, "2")
    sim.clear_log()

    around = range(_lancium_id(victim) - 3, _lancium_id(victim) + 4)
    tried = [f"lancium/{n}" for n in list(range(1, 8)) + list(around)] if guessed else [victim]
    for job_id in tried:
        rc, err = mallory.ask("BLAH_JOB_CANCEL", job_id)
        assert rc != "0" and REFUSED in err, (job_id, rc, err)
    assert _writes(sim) == []
    assert sim.job(_lancium_id(victim))["status"] == "running"
    assert alice.status(victim) == ("0", "NULL", "2")


def test_claiming_the_victims_sandbox_gets_a_job_of_ones_own(users: Dict[str, User], sim: LanciumSim) -> None:
    alice, mallory = users["alice"], users["mallory"]
    victim = alice.submit(VICTIM_SANDBOX, "PODGAHP_SIM_RUN_SECONDS=120")
    alice.wait_status(victim, "2")
    # +remote_JobDirectory = "home_bl_<the victim's sandbox>" in mallory's own job
    attacker = mallory.submit(VICTIM_SANDBOX, "PODGAHP_SIM_RUN_SECONDS=120")
    assert attacker != victim
    assert mallory.ask("BLAH_JOB_CANCEL", attacker) == ["0", "NULL"]
    assert sim.job(_lancium_id(victim))["status"] == "running"
    assert alice.status(victim) == ("0", "NULL", "2")


def _api(sim: LanciumSim, key: str) -> Callable[..., object]:
    """Lancium's REST API called with ``key``, as anyone holding a key of the account may."""
    exchange = urllib.request.Request(sim.url + "/access_tokens", method="POST",
                                      headers={"Authorization": "Bearer " + key})
    with urllib.request.urlopen(exchange, timeout=10) as answer:
        token = answer.headers["Authorization"]

    def call(method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(sim.url + path, data=data, method=method,
                                         headers={"Authorization": token, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read()
        return json.loads(text) if text.strip() else None
    return call


def test_a_job_made_up_as_the_victims_with_forged_notes_is_neither_taken_nor_written_from(
        users: Dict[str, User], sim: LanciumSim, tmp_path: Path) -> None:
    """Mallory makes a job named as a GAHP named the victim's sandbox's job, with notes naming a
    private file of alice's as its Out and Err, and starts it before alice's pilot is submitted."""
    alice = users["alice"]
    private = tmp_path / "alice-home" / ".ssh" / "authorized_keys"
    private.parent.mkdir(parents=True)
    private.write_text("alice's key\n")
    os.chmod(private, 0o600)
    notes = json.dumps({"podgahp": 1, "sandbox": VICTIM_SANDBOX, "iwd": str(private.parent),
                        "out": str(private), "err": str(private)})
    api = _api(sim, sim.new_api_key("mallory"))
    made = api("POST", "/jobs", {"job": {
        "name": f"podgahp:{VICTIM_SANDBOX}", "notes": notes, "qos": "high", "image": "x",
        "command_line": "true", "max_run_time": 600, "resources": {"core_count": 2, "memory": 4},
        "environment": [{"variable": "PODGAHP_SIM_STDOUT", "value": "ssh-rsa mallory\n"},
                        {"variable": "PODGAHP_SIM_RUN_SECONDS", "value": "1"}]}})
    assert isinstance(made, dict)
    forged = made["job"]["id"]
    api("POST", f"/jobs/{forged}/submit")
    sim.wait_for(forged, "running")
    sim.clear_log()

    job_id = alice.submit(VICTIM_SANDBOX, "PODGAHP_SIM_STDOUT=pilot-output")
    assert _lancium_id(job_id) != forged
    alice.wait_status(job_id, "4")
    assert (alice.home / VICTIM_SANDBOX / "p.out").read_text() == "pilot-output"
    sim.wait_for(forged, "finished")
    rc, err, _ = alice.status(f"lancium/{forged}")
    assert rc != "0" and REFUSED in err, (rc, err)
    assert private.read_text() == "alice's key\n"
    assert not [r for r in sim.request_log if r.path.startswith(f"/jobs/{forged}")]
