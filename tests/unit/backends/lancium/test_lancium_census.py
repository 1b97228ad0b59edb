"""Lancium as podgahp reap, q and health see it: the jobs of this CE in the account, all users, from one
job list plus the details of the jobs it must prove are this CE's (their notes, checked against the key
in their name); a pass deletes the orphans and keeps held jobs and jobs it cannot show are this CE's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import FrozenSet

import pytest

from gahp.agent import Agent
from gahp.backends.lancium.backend import LanciumBackend
from gahp.backends.lancium.census import MAX_DETAILS, LanciumCeView, sandbox_of
from gahp.backends.lancium.identity import sandbox_key, parse_job_id, new_name
from gahp.core.config import Knobs
from gahp.core.jobstate import Phase
from gahp.ce.health import census_health
from gahp.ce.reap import reap_views
from gahp.core.schedd import GridJobs
from lancium_helpers import BackendFactory, knobs_for, make_pilot, wait_phase
from podgahp_sim.lancium import LanciumSim

SCHEDD = "ce"


def sandbox(n: int) -> str:
    """A sandbox id the gridmanager of schedd SCHEDD makes (collector, schedd, job id, QDate)."""
    return f"ce.example.org_{SCHEDD}_{n}.0_1700000000"


def _view(sim: LanciumSim, key_file: Path) -> LanciumCeView:
    found = LanciumBackend.ce_view(knobs_for(sim, key_file))
    assert isinstance(found, LanciumCeView)
    return found


def _forge(backend: Agent, notes: str, name: str) -> str:
    """A job someone else with a key to the account made, named and noted as they like."""
    made = backend.backend.client.create_job({"name": name, "notes": notes, "qos": "high", "image": "lancium/ubuntu",
                                      "command_line": "sleep 1", "max_run_time": 3600})
    return f"lancium/{made['id']}"


def test_the_census_lists_this_ces_jobs_and_a_pass_deletes_the_orphans(make_backend: BackendFactory,
                                                                      sim: LanciumSim, key_file: Path,
                                                                      tmp_path: Path) -> None:
    backend = make_backend()
    env = {"PODGAHP_SIM_RUN_SECONDS": "600"}
    held = backend.submit(make_pilot(tmp_path / "a", sandbox(1), env=env))
    lost = backend.submit(make_pilot(tmp_path / "b", sandbox(2), env=env))
    done = backend.submit(make_pilot(tmp_path / "c", sandbox(3)))
    wait_phase(backend, done, (Phase.COMPLETED,))
    for job in (held, lost):
        wait_phase(backend, job, (Phase.RUNNING,))
    ce = backend.backend.settings.ce_name
    other_ce = _forge(backend, json.dumps({"ce": "other.example.org", "user": backend.backend.user, "sandbox": sandbox(4)}),
                      new_name(sandbox_key("other.example.org", backend.backend.user, sandbox(4))))
    mismatched = _forge(backend, json.dumps({"ce": ce, "user": backend.backend.user, "sandbox": sandbox(5)}),
                        new_name(sandbox_key(ce, backend.backend.user, sandbox(6))))
    not_ours = _forge(backend, "{}", "someone-elses-job")
    view = _view(sim, key_file)
    try:
        census = view.census(frozenset({held}))
        by_id = {j.job_id: j for j in census.jobs}
        assert census.errors == [] and census.queues == ("lancium",)
        assert sorted(by_id) == sorted([held, lost, done])  # forged and foreign jobs are not listed
        assert by_id[held].sandbox == "" and by_id[lost].sandbox == sandbox(2) and by_id[done].sandbox == sandbox(3)
        assert by_id[done].state == "finished" and by_id[done].health == "Succeeded" and not by_id[done].alive
        assert by_id[lost].alive and by_id[lost].created is not None and by_id[lost].queue == "lancium"
        # one list, then the details of the jobs not held (two of ours, two forged with podgahp's name form)
        assert view.requests == 1 + 4
        result = reap_views([view], GridJobs(frozenset({held}), 1, SCHEDD), grace_s=0)
    finally:
        view.close()
    assert (result.jobs, result.orphans, result.deleted, result.errors) == (3, 2, 2, [])
    left = sim.jobs()
    assert parse_job_id(held) in left and parse_job_id(other_ce) in left
    assert parse_job_id(mismatched) in left and parse_job_id(not_ours) in left
    assert all(left[parse_job_id(j)]["status"] == "delete pending" for j in (lost, done) if parse_job_id(j) in left)
    health = census_health(knobs_for(sim, key_file), result.censuses, result.ce_names)
    assert health.pods == {"lancium": {"Running": 2, "Succeeded": 1}}


def test_a_pass_refuses_jobs_made_through_another_schedd(make_backend: BackendFactory, sim: LanciumSim,
                                                        key_file: Path, tmp_path: Path) -> None:
    backend = make_backend()
    job = backend.submit(make_pilot(tmp_path, sandbox(1)))
    view = _view(sim, key_file)
    try:
        result = reap_views([view], GridJobs(frozenset(), 1, "another-schedd"), grace_s=0)
    finally:
        view.close()
    assert result.deleted == 0 and any("another CE uses the same CE name" in e for e in result.errors)
    assert sim.job(parse_job_id(job))["status"] != "delete pending"


@pytest.mark.parametrize("notes, key_sandbox, expected", [
    ({"ce": "ce.test", "user": "alice", "sandbox": "s1"}, "s1", "s1"),
    ({"ce": "ce.test", "user": "alice", "sandbox": "s1"}, "s2", None),
    ({"ce": "other", "user": "alice", "sandbox": "s1"}, "s1", None),
    ({"ce": "ce.test", "user": 7, "sandbox": "s1"}, "s1", None),
    ("not json", "s1", None),
    (["ce.test"], "s1", None),
], ids=["ours", "key-of-another-sandbox", "another-ce", "bad-field", "not-json", "not-an-object"])
def test_notes_make_a_job_this_ces_only_when_they_match_its_name(notes: object, key_sandbox: str,
                                                                 expected: object) -> None:
    text = notes if isinstance(notes, str) else json.dumps(notes)
    assert sandbox_of({"notes": text}, sandbox_key("ce.test", "alice", key_sandbox), "ce.test") == expected
    assert sandbox_of({"notes": "x" * 5000}, sandbox_key("ce.test", "alice", "s1"), "ce.test") is None


def test_a_ce_giving_no_key_file_has_no_lancium_view(tmp_path: Path) -> None:
    assert LanciumBackend.ce_view(Knobs({"PODGAHP_LANCIUM_API_KEY_FILE": str(tmp_path / "none")})) is None


def test_details_are_bounded_per_census(make_backend: BackendFactory, sim: LanciumSim, key_file: Path,
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gahp.backends.lancium.census as census_module

    backend = make_backend()
    jobs = [backend.submit(make_pilot(tmp_path / str(n), sandbox(n))) for n in range(3)]
    monkeypatch.setattr(census_module, "MAX_DETAILS", 2)
    view = _view(sim, key_file)
    try:
        census = view.census(frozenset())
    finally:
        view.close()
    assert len(census.jobs) == 2 and "1 Lancium jobs named as podgahp's were not looked at" in census.errors[0]
    assert MAX_DETAILS == 500 and len(jobs) == 3
