"""One cycle with the condor side replaced: what is submitted, what is logged, what a failure does."""

from __future__ import annotations

import logging
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import pytest

from gahp.config import Knobs, user_name
from gahp.provision.demand import DemandUnknown
from gahp.provision.pilots import CeUnavailable
from gahp.provision.plan import Pilot
from gahp.provision.service import Provisioner
from gahp.provision.settings import ProvisionSettings
from gahp.provision.shape import Group
from gahp_driver import gahp_env, script

SETTINGS = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_MAX_IDLE_PER_GROUP": "3",
                                               "PODGAHP_PROVISION_REMOVE_IDLE_AFTER_SECONDS": "100"}))
Jobs = List[Tuple[Dict[str, object], int]]


class FakeCe:
    def __init__(self, existing: Sequence[Pilot] = (), fail_submit: bool = False, fail_query: bool = False) -> None:
        self.existing = list(existing)
        self.submitted: List[Tuple[str, int]] = []
        self.removed: List[str] = []
        self.fail_submit, self.fail_query = fail_submit, fail_query

    def pilots(self) -> List[Pilot]:
        if self.fail_query:
            raise CeUnavailable("the CE's schedd cannot be asked for pilots: connection refused")
        return self.existing

    def submit(self, group: Group, count: int) -> str:
        if self.fail_submit:
            raise CeUnavailable("refused")
        self.submitted.append((str(group), count))
        return str(len(self.submitted))

    def remove(self, pilots: Sequence[Pilot], reason: str) -> None:
        self.removed += [p.job_id for p in pilots]


def reader(jobs: Jobs) -> object:
    return lambda settings: (jobs, [])


JOBS: Jobs = [({"RequestCpus": 1, "RequestMemory": 2048}, 10), ({"RequestCpus": 4, "RequestMemory": 8192}, 1)]


def test_a_cycle_submits_per_group_and_logs_each_decision(caplog: pytest.LogCaptureFixture) -> None:
    ce = FakeCe([Pilot("7.0", "1c/2048MiB", True, 0.0)])
    with caplog.at_level(logging.INFO, logger="gahp.provision"):
        decision = Provisioner(SETTINGS, ce, reader(JOBS), clock=lambda: 1000.0).cycle()  # type: ignore[arg-type]
    assert decision is not None
    assert ce.submitted == [("1c/2048MiB", 3), ("4c/8192MiB", 1)] and ce.removed == ["7.0"]
    lines = [r.getMessage() for r in caplog.records]
    assert "group 1c/2048MiB: 10 jobs waiting, 0 pilots idle, 0 running; submitted 3 (cluster 1)" in lines
    assert any(line.startswith("removed 1 pilots idle at the CE for more than 100 s") for line in lines)


def test_no_demand_no_pilots() -> None:
    ce = FakeCe()
    Provisioner(SETTINGS, ce, reader([])).cycle()  # type: ignore[arg-type]
    assert ce.submitted == []


@pytest.mark.parametrize("ce, read", [
    (FakeCe(fail_query=True), reader(JOBS)),
    (FakeCe(), lambda settings: (_ for _ in ()).throw(DemandUnknown("no schedd of pool.example could be asked"))),
], ids=["CE unknown", "demand unknown"])
def test_a_cycle_that_cannot_know_submits_nothing(ce: FakeCe, read: object,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="gahp.provision"):
        assert Provisioner(SETTINGS, ce, read).cycle() is None  # type: ignore[arg-type]
    assert ce.submitted == [] and "cycle skipped, nothing submitted" in caplog.text


def test_a_refused_submit_is_logged_and_the_cycle_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    ce = FakeCe(fail_submit=True)
    with caplog.at_level(logging.ERROR, logger="gahp.provision"):
        decision = Provisioner(SETTINGS, ce, reader(JOBS)).cycle()  # type: ignore[arg-type]
    assert decision is not None and decision.submissions == 0 and decision.failures == 2
    assert caplog.text.count("submitting") == 2


def test_the_service_runs_cycles_until_stopped() -> None:
    stop = threading.Event()
    calls = []

    def read(settings: ProvisionSettings) -> Tuple[Jobs, List[str]]:
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        return JOBS, []

    ce = FakeCe()
    settings = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_INTERVAL_SECONDS": "1"}))
    Provisioner(settings, ce, read).serve(stop)  # type: ignore[arg-type]
    assert len(calls) == 2 and len(ce.submitted) == 4  # two groups, two cycles


def provision_once(tmp_path: Path, **knobs: str) -> "subprocess.CompletedProcess[str]":
    """The installed command, in a process of its own (HTCondor's configuration is read once per process)."""
    env = {**gahp_env(str(tmp_path), **knobs), "_CONDOR_TOOL_TIMEOUT_MULTIPLIER": "0"}
    return subprocess.run([script("podgahp"), "provision", "--once"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_command_names_a_bad_knob_without_a_traceback(tmp_path: Path) -> None:
    result = provision_once(tmp_path, PODGAHP_PROVISION_PILOT_KIND="huge")
    assert result.returncode != 0 and "PODGAHP_PROVISION_PILOT_KIND = 'huge'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_the_command_without_a_pool_says_it_could_not_decide(tmp_path: Path) -> None:
    result = provision_once(tmp_path, PODGAHP_PROVISION_POOL="127.0.0.1:1")
    assert result.returncode != 0 and "the cycle could not decide" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout and result.stdout == ""
    # The reason is on stderr, not only in the log, with the configuration read.
    reason = next(line for line in result.stderr.splitlines() if "cycle skipped, nothing submitted" in line)
    assert "127.0.0.1:1" in reason or "collector" in reason.lower(), result.stderr
    assert "(read HTCondor configuration ONLY_ENV (CONDOR_CONFIG in the environment))" in result.stderr
    log = tmp_path / f"PodgahpProvisionLog.{user_name()}"
    assert "cycle skipped, nothing submitted" in log.read_text()
