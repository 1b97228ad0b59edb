"""One cycle with the condor side replaced: what is submitted, what is logged, what a failure does."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from gahp.core.config import Knobs, user_name
from gahp.provision.demand import DemandUnknown, group_jobs
from gahp.provision.pilots import CeUnavailable, submit_description
from gahp.provision.history import History
from gahp.provision.plan import Ending, Pilot, Slot
from gahp.provision.pool import SupplyUnknown
from gahp.provision.service import Provisioner, describe
from gahp.provision.settings import ProvisionSettings
from gahp.provision.shape import Group
from gahp_driver import gahp_env, script

SETTINGS = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_RAMP_START": "3",
                                               "PODGAHP_PROVISION_REMOVE_IDLE_AFTER_SECONDS": "100"}))
Jobs = List[Tuple[Dict[str, object], int]]


class FakeCe:
    def __init__(self, existing: Sequence[Pilot] = (), fail_submit: bool = False, fail_query: bool = False,
                 fail_remove: bool = False) -> None:
        self.existing = list(existing)
        self.submitted: List[Tuple[str, int]] = []
        self.removed: List[Tuple[str, str]] = []
        self.fail_submit, self.fail_query, self.fail_remove = fail_submit, fail_query, fail_remove
        self.ended: Dict[str, Ending] = {}
        self.fail_endings = False
        self.asked: List[List[str]] = []

    def pilots(self) -> List[Pilot]:
        if self.fail_query:
            raise CeUnavailable("the CE's schedd cannot be asked for pilots: connection refused")
        return self.existing

    def submit(self, group: Group, count: int) -> str:
        if self.fail_submit:
            raise CeUnavailable("refused")
        self.submitted.append((str(group), count))
        return str(len(self.submitted))

    def endings(self, job_ids: Sequence[str]) -> Dict[str, Ending]:
        self.asked.append(list(job_ids))
        if self.fail_endings:
            raise CeUnavailable("the CE's schedd cannot be asked how pilots ended: connection refused")
        return {k: v for k, v in self.ended.items() if k in job_ids}

    def remove(self, pilots: Sequence[Pilot], reason: str) -> None:
        if self.fail_remove:
            raise CeUnavailable("refused")
        self.removed += [(p.job_id, reason) for p in pilots]


def reader(jobs: Jobs) -> object:
    return lambda settings: (jobs, [])


def no_slots(settings: ProvisionSettings) -> List[Slot]:
    return []


def provisioner(ce: FakeCe, read: object, settings: ProvisionSettings = SETTINGS, clock: float = 1000.0,
                slots: object = no_slots, directory: Optional[str] = None) -> Provisioner:
    return Provisioner(settings, ce, read, clock=lambda: clock, slots=slots,  # type: ignore[arg-type]
                       directory=directory)


JOBS: Jobs = [({"RequestCpus": 1, "RequestMemory": 2048}, 10), ({"RequestCpus": 4, "RequestMemory": 8192}, 1)]


def test_a_cycle_submits_per_group_and_logs_each_decision(caplog: pytest.LogCaptureFixture) -> None:
    ce = FakeCe([Pilot("7.0", "1c/2048MiB", True, 0.0)])
    with caplog.at_level(logging.INFO, logger="gahp.provision"):
        decision = provisioner(ce, reader(JOBS)).cycle()
    assert decision is not None
    assert ce.submitted == [("1c/2048MiB", 3), ("4c/8192MiB", 1)]
    assert ce.removed == [("7.0", "idle at the CE for more than 100 s (podgahp provision)")]
    lines = [r.getMessage() for r in caplog.records]
    assert "group 1c/2048MiB: submitted 3 (cluster 1)" in lines
    assert "group 1c/2048MiB: 10 jobs waiting, 0 pilots starting, 0 booting, 0 idle in the pool, 0 running, " \
           "3 submitted, 1 removed" in lines
    assert any(line.startswith("removed 1 pilots, idle at the CE for more than 100 s") for line in lines)


def test_no_demand_no_pilots() -> None:
    ce = FakeCe()
    provisioner(ce, reader([])).cycle()
    assert ce.submitted == []


@pytest.mark.parametrize("ce, read, slots", [
    (FakeCe(fail_query=True), reader(JOBS), no_slots),
    (FakeCe(), lambda settings: (_ for _ in ()).throw(DemandUnknown("no schedd of pool.example could be asked")),
     no_slots),
    (FakeCe(), reader(JOBS), lambda settings: (_ for _ in ()).throw(SupplyUnknown("collector down"))),
], ids=["CE unknown", "demand unknown", "pool's slots unknown"])
def test_a_cycle_that_cannot_know_submits_nothing(ce: FakeCe, read: object, slots: object,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="gahp.provision"):
        assert provisioner(ce, read, slots=slots).cycle() is None
    assert ce.submitted == [] and "cycle skipped, nothing submitted" in caplog.text


def test_a_refused_submit_is_logged_and_the_cycle_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    ce = FakeCe(fail_submit=True)
    with caplog.at_level(logging.ERROR, logger="gahp.provision"):
        decision = provisioner(ce, reader(JOBS)).cycle()
    assert decision is not None and decision.submissions == 0 and decision.failures == 2
    assert caplog.text.count("submitting") == 2


def test_a_group_held_back_says_why_and_the_history_survives_a_restart(tmp_path: Path) -> None:
    """Pilots idle in the pool while their jobs wait: removed, and the group gets none until that
    changes, in this process and in the next one (the history is in a file, as for --once)."""
    idle = [Pilot(f"5.{i}", "1c/2048MiB", False, 0.0) for i in range(2)]
    slots = [Slot(p.job_id, p.group, False, 400.0) for p in idle]
    ce = FakeCe(idle)
    first = provisioner(ce, reader(JOBS[:1]), slots=lambda s: slots, directory=str(tmp_path)).cycle()
    assert first is not None and first.submissions == 0 and sorted(j for j, _ in ce.removed) == ["5.0", "5.1"]
    assert "do not match" in first.rows[0].note and "do not match" in describe(first.rows[0])
    later = provisioner(FakeCe(), reader(JOBS[:1]), clock=1600.0, directory=str(tmp_path)).cycle()
    assert later is not None and later.submissions == 0 and "do not match" in later.rows[0].note
    more = provisioner(FakeCe(), reader([(JOBS[0][0], 11)]), clock=1700.0, directory=str(tmp_path)).cycle()
    assert more is not None and more.submissions == 3


def test_a_history_file_that_cannot_be_read_is_a_fresh_start(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    first = provisioner(FakeCe(), reader(JOBS), directory=str(tmp_path))
    assert first.path is not None
    Path(first.path).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="gahp.provision"):
        again = provisioner(FakeCe(), reader(JOBS), directory=str(tmp_path))
    assert again.history == History() and "starting afresh" in caplog.text
    assert again.cycle() is not None and "1.0" in json.loads(Path(first.path).read_text())["pilots"]


def test_submitted_pilots_are_remembered_before_any_cycle_sees_them() -> None:
    ce = FakeCe()
    p = provisioner(ce, reader(JOBS[:1]))
    p.cycle()
    assert set(p.history.pilots) == {"1.0", "1.1", "1.2"}
    # they end before the next cycle sees them, never having joined the pool: the group backs off
    later = Provisioner(SETTINGS, ce, reader(JOBS[:1]), clock=lambda: 1060.0, slots=no_slots)  # type: ignore[arg-type]
    later.history = p.history
    decision = later.cycle()
    assert decision is not None and decision.submissions == 0 and "without joining" in decision.rows[0].note


@pytest.mark.parametrize("exit_code, fail, backs_off", [(0, False, False), (1, False, True), (0, True, True)],
                         ids=["joined and left between two cycles", "failed", "the CE cannot say"])
def test_pilots_gone_between_two_cycles_are_failures_unless_the_ce_says_they_ran(
        exit_code: int, fail: bool, backs_off: bool, caplog: pytest.LogCaptureFixture) -> None:
    ce = FakeCe()
    p = provisioner(ce, reader(JOBS[:1]))
    p.cycle()
    assert ce.asked == []  # nothing gone yet: the CE's history is not asked
    ce.ended = {f"1.{i}": Ending(True, exit_code, SETTINGS.pilot_idle_minutes * 60 + 30.0) for i in range(3)}
    ce.fail_endings = fail
    later = Provisioner(SETTINGS, ce, reader(JOBS[:1]), clock=lambda: 2500.0, slots=no_slots)  # type: ignore[arg-type]
    later.history = p.history
    with caplog.at_level(logging.WARNING, logger="gahp.provision"):
        decision = later.cycle()
    assert decision is not None and sorted(ce.asked[0]) == ["1.0", "1.1", "1.2"]
    assert (decision.submissions == 0) == backs_off
    assert ("without joining" in decision.rows[0].note) == backs_off
    assert ("how 3 pilots ended is not known" in caplog.text) == fail


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
    Provisioner(settings, ce, read, slots=no_slots).serve(stop)  # type: ignore[arg-type]
    assert len(calls) == 2 and len(ce.submitted) == 2  # two groups; the second cycle waits for them to start


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


def test_a_history_from_long_ago_forgets_its_pilots(tmp_path: Path) -> None:
    """Pilots recorded an hour ago are not evidence now (the CE may have been another): their records
    go; a group held back stays held."""
    from gahp.provision import history as histories
    from gahp.provision.history import GroupRecord, PilotRecord

    first = provisioner(FakeCe(), reader(JOBS), directory=str(tmp_path))
    assert first.path is not None
    old = History({"1.0": PilotRecord("1c/2048MiB", 0.0)}, {"1c/2048MiB": GroupRecord(unmatched_at=900.0)}, 1000.0)
    assert histories.save(old, first.path) is None
    assert provisioner(FakeCe(), reader(JOBS), clock=1300.0, directory=str(tmp_path)).history.pilots != {}
    later = provisioner(FakeCe(), reader(JOBS), clock=1000.0 + 3600, directory=str(tmp_path))
    assert later.history.pilots == {} and later.history.groups == old.groups


def test_provisioners_for_two_ces_never_share_their_pilots_directory(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    knobs = {"PODGAHP_PROVISION_POOL": "pool.example.org", "PODGAHP_PROVISION_CE_POOL": "ce.example.org:9619"}

    def made(**more: str) -> Provisioner:
        return Provisioner(ProvisionSettings.from_knobs(Knobs({**knobs, **more})), read=reader(JOBS),
                           clock=lambda: 1000.0, slots=no_slots)  # type: ignore[arg-type]

    one, other = made(PODGAHP_PROVISION_CE_SCHEDD="ce1.example.org"), made(PODGAHP_PROVISION_CE_SCHEDD="ce2.example.org")
    again = made(PODGAHP_PROVISION_CE_SCHEDD="ce1.example.org")
    renamed = made(PODGAHP_PROVISION_CE_SCHEDD="ce1.example.org", PODGAHP_PROVISION_NAME="other")
    directories = [p.ce.directory for p in (one, other, renamed)]
    assert len(set(directories)) == 3
    assert again.ce.directory == one.ce.directory  # the same after a restart
    root = tmp_path / ".podgahp" / "provision"
    for directory, provisioner_ in zip(directories, (one, other, renamed)):
        assert Path(directory).parent == root
        assert provisioner_.path is not None and Path(provisioner_.path).parent == Path(directory)
        # where its pilots write their output
        description = submit_description(next(iter(group_jobs(JOBS, provisioner_.settings).groups)),
                                         provisioner_.settings, directory)
        assert description["initialdir"] == directory
