"""Orphan pods: which pods ``podgahp reap`` deletes (its job is gone, past the grace period on the API
server's clock, made through this CE's schedd, not already deleting), when a pass deletes nothing at
all (an empty queue while pilots run, pods of another CE using the same name, no server clock), at
what cost, and that it deletes nothing when it cannot ask the schedd."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterator, List, Optional

import pytest

from gahp.backends.k8s.reaper import ReapResult, made_by, plan, reap_orphans
from gahp.backends.k8s.settings import KubernetesSettings, ce_label
from gahp.config import Knobs
from gahp.errors import GahpError
from gahp.jobstate import Phase
from gahp.reaper import classad_lines, reap
from gahp.schedd import GridJobs
from podgahp_sim.k8s import KubeSim, SimConfig

from k8s_helpers import NAMESPACE, BackendFactory, knobs_for, make_job, wait_state

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0, tzinfo=datetime.timezone.utc)
SCHEDD = "ce.example.org"
#: A sandbox id as the gridmanager of schedd SCHEDD makes it: <collector>_<GlobalJobId, @ # as _>.
OURS = f"ce.example.org_9619_{SCHEDD}_7.0_1795297304"
THEIRS = "ce2.example.org_9619_ce2.example.org_7.0_1795297304"


def pod(name: str, age_s: float, deleting: bool = False, phase: str = "Succeeded",
        sandbox: Optional[str] = OURS) -> Dict[str, Any]:
    created = (NOW - datetime.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta: Dict[str, Any] = {"name": name, "namespace": "ns", "creationTimestamp": created}
    if sandbox is not None:
        meta["annotations"] = {"podgahp.htcondor.org/sandbox-id": sandbox}
    if deleting:
        meta["deletionTimestamp"] = created
    return {"metadata": meta, "status": {"phase": phase}}


def jobs(*ids: str, count: Optional[int] = None) -> GridJobs:
    return GridJobs(job_ids=frozenset(ids), jobs=len(ids) if count is None else count, schedd_name=SCHEDD)


LIVE = "k8s/ns/pilot-b-1"


@pytest.mark.parametrize("pods, answer, now, deleted, refused", [
    ([pod("pilot-a-1", 3600)], jobs(LIVE), NOW, ["pilot-a-1"], None),
    ([pod("pilot-b-1", 3600)], jobs(LIVE), NOW, [], None),
    ([pod("pilot-a-1", 30)], jobs(LIVE), NOW, [], None),
    ([pod("pilot-a-1", 3600, deleting=True)], jobs(LIVE), NOW, [], None),
    ([{"metadata": {"name": "pilot-a-1", "namespace": "ns"}}], jobs(LIVE), NOW, [], None),
    # The reaper's clock is 660 s ahead of the API server's: the age is taken on the server's clock
    # (the Date of its LIST answer), so a pod made 60 s ago by the server's clock is 60 s old.
    ([pod("pilot-a-1", 60, phase="Running")], jobs(LIVE), NOW, [], None),
    ([pod("pilot-a-1", 3600)], jobs(LIVE), None, [], "no Date"),
    # The schedd answers, successfully, with no grid job while pilots run: nothing is deleted.
    ([pod("pilot-a-1", 3600, phase="Running"), pod("pilot-c-1", 3600)], jobs(), NOW, [], "answers with no grid job"),
    # An empty queue with only finished pods is believed.
    ([pod("pilot-a-1", 3600), pod("pilot-c-1", 3600, phase="Failed")], jobs(), NOW, ["pilot-a-1", "pilot-c-1"],
     None),
    # A pod of this CE's name made through another schedd: another CE uses the name; the pass is refused.
    ([pod("pilot-a-1", 3600), pod("pilot-c-1", 3600, sandbox=THEIRS)], jobs(LIVE), NOW, [],
     "another CE uses the same PODGAHP_K8S_CE_NAME"),
    # No sandbox id to tell whose job it was: kept (an error line), the rest goes on.
    ([pod("pilot-a-1", 3600), pod("pilot-c-1", 3600, sandbox=None)], jobs(LIVE), NOW, ["pilot-a-1"], None),
], ids=["orphan", "job-exists", "young", "deleting", "no-time", "reaper-clock-ahead", "no-server-clock",
        "empty-answer-while-pilots-run", "empty-answer-only-finished", "another-ce-same-name", "no-sandbox"])
def test_orphan_rules(pods: List[Dict[str, Any]], answer: GridJobs, now: Optional[datetime.datetime],
                      deleted: List[str], refused: Optional[str]) -> None:
    decided = plan(pods, answer, now, grace_s=600, ce_name="ce.test")
    if refused is None:
        assert decided.refused is None
        assert [p["metadata"]["name"] for p in decided.orphans] == deleted
    else:
        assert decided.refused is not None and refused in decided.refused


def test_a_pod_without_sandbox_is_reported() -> None:
    decided = plan([pod("pilot-c-1", 3600, sandbox=None)], jobs(LIVE), NOW, grace_s=600)
    assert decided.orphans == [] and "names no sandbox" in decided.skipped[0]


@pytest.mark.parametrize("sandbox, schedd, expected", [
    (OURS, SCHEDD, True),
    (THEIRS, SCHEDD, False),
    ("127.0.0.1_40001_schedd_pool.example.org_12.3_1795297304", "schedd@pool.example.org", True),
    (f"x.example.org_9619_other-{SCHEDD}_7.0_1", SCHEDD, False),   # a longer name ending like ours
    (f"{SCHEDD}_7.0_1795297304", SCHEDD, False),                    # no collector part
    ("ce.example.org_9619_ce.example.org_7.0", SCHEDD, False),      # no QDate
    (OURS, "", False),
], ids=["ours", "other-schedd", "at-in-name", "suffix-only", "no-pool", "no-qdate", "unknown-schedd"])
def test_sandbox_ids_name_their_schedd(sandbox: str, schedd: str, expected: bool) -> None:
    assert made_by(sandbox, schedd) is expected


@pytest.mark.parametrize("name, label", [
    ("ce.example.org", "ce.example.org"),
    ("CE_1.example.org", "CE_1.example.org"),
    ("a" * 63, "a" * 63),
], ids=["fqdn", "mixed", "63-chars"])
def test_a_ce_name_that_is_a_label_value_is_its_own_label(name: str, label: str) -> None:
    assert ce_label(name) == label


def test_ce_names_never_share_a_label() -> None:
    """Cut at 63 characters or with characters replaced, two names would share a label value, and each
    CE's reaper would delete the other's pods as orphans: a name that is no label value is hashed."""
    long_a, long_b = "ce-" + "x" * 60 + "-a.example.org", "ce-" + "x" * 60 + "-b.example.org"
    pairs = [(long_a, long_b), ("ce a", "ce-a"), ("ce a", "ce/a"), ("ce-" + "x" * 60, "ce-" + "x" * 60 + "y")]
    for one, other in pairs:
        assert ce_label(one) != ce_label(other), (one, other)
    for name in (long_a, "ce a", "ce/a", "ce-" + "x" * 61, "--", "é"):
        label = ce_label(name)
        assert len(label) <= 63 and label[0].isalnum() and label[-1].isalnum(), (name, label)
    settings = KubernetesSettings.from_knobs(Knobs({"PODGAHP_K8S_CE_NAME": long_a}))
    assert settings.ce_name == ce_label(long_a) and settings.ce_name.startswith("ce-xxx")


def _pods_left(sim: KubeSim, job_ids: List[str]) -> FrozenSet[str]:
    left = set()
    for jid in job_ids:
        current = sim.pod(NAMESPACE, jid.split("/")[2])
        if current is not None and not current["metadata"].get("deletionTimestamp"):
            left.add(jid)
    return frozenset(left)


def test_a_pass_deletes_orphans_of_every_user_and_keeps_the_rest(make_backend: BackendFactory, sim: KubeSim,
                                                                 kubeconfig: str, tmp_path: Path) -> None:
    backend = make_backend()
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    kept = backend.submit(make_job(tmp_path, sandbox="ce.test_host_1.0_1", env=env))
    lost = backend.submit(make_job(tmp_path, sandbox="ce.test_host_2.0_1", env=env))
    done = backend.submit(make_job(tmp_path, sandbox="ce.test_host_3.0_1"))
    wait_state(backend, done, Phase.COMPLETED)
    sim.clear_requests()
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    result = reap_orphans(settings, GridJobs(frozenset({kept}), 1, "host"), grace_s=0)
    assert (result.pods, result.orphans, result.deleted, result.errors) == (3, 2, 2, [])
    assert _pods_left(sim, [kept, lost, done]) == {kept}
    # cost: one LIST for the namespace, one DELETE per orphan
    requests = sorted((r.method, r.path.rsplit("/", 1)[-1]) for r in sim.requests())
    assert requests == sorted([("GET", "pods"), ("DELETE", lost.split("/")[2]), ("DELETE", done.split("/")[2])])
    assert result.requests == 3
    assert "Deleted = 2" in classad_lines(result) and "Errors = 0" in classad_lines(result)


@pytest.fixture
def slow_clock_sim() -> Iterator[KubeSim]:
    """An API server whose clock is 660 s behind the machine's (as if the reaper's were ahead)."""
    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, container_create_seconds=0.05,
                       clock_offset_seconds=-660)
    with KubeSim(config) as running:
        yield running


def test_ages_are_taken_on_the_api_servers_clock(make_backend: BackendFactory, slow_clock_sim: KubeSim,
                                                 tmp_path: Path) -> None:
    """A pilot started a moment ago is not 660 s old because the reaper's clock is ahead of the API
    server's: with a grace of 600 s it is kept; once past the grace on the server's clock, it goes."""
    kubeconfig = slow_clock_sim.write_kubeconfig(str(tmp_path / "kubeconfig"), namespace=NAMESPACE)
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    from gahp.backends.k8s.backend import KubernetesBackend

    backend = KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig)))
    try:
        job = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
        wait_state(backend, job, Phase.RUNNING)
    finally:
        backend.close()
    other = GridJobs(frozenset({"k8s/pilots/pilot-00000000000000000000-1"}), 1, "host")
    result = reap_orphans(settings, other, grace_s=600)
    assert (result.orphans, result.deleted) == (0, 0) and _pods_left(slow_clock_sim, [job]) == {job}
    result = reap_orphans(settings, other, grace_s=0)
    assert result.deleted == 1 and _pods_left(slow_clock_sim, [job]) == frozenset()


def test_a_refused_pass_deletes_nothing_anywhere(make_backend: BackendFactory, sim: KubeSim, kubeconfig: str,
                                                 tmp_path: Path) -> None:
    """Another CE's pod under this CE's name stops the whole pass, loudly: this CE's own orphan stays too."""
    backend = make_backend()
    env = [("PODGAHP_SIM_RUN_SECONDS", "600")]
    ours = backend.submit(make_job(tmp_path, sandbox="ce.test_host_1.0_1", env=env))
    theirs = backend.submit(make_job(tmp_path, sandbox="ce2.test_otherhost_1.0_1", env=env))
    sim.clear_requests()
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    result = reap_orphans(settings, GridJobs(frozenset(), 1, "host"), grace_s=0)
    assert result.deleted == 0 and not sim.requests("DELETE")
    assert any("another CE uses the same PODGAHP_K8S_CE_NAME" in e for e in result.errors), result.errors
    assert _pods_left(sim, [ours, theirs]) == {ours, theirs}
    assert any(line.startswith("LastError = ") for line in classad_lines(result))


def test_dry_run_deletes_nothing(make_backend: BackendFactory, sim: KubeSim, kubeconfig: str,
                                 tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path))
    settings = KubernetesSettings.from_knobs(Knobs(knobs_for(kubeconfig)))
    result = reap_orphans(settings, GridJobs(frozenset(), 1, "host"), grace_s=0, dry_run=True)
    assert (result.orphans, result.deleted) == (1, 0) and not sim.requests("DELETE")


def test_nothing_is_deleted_when_the_schedd_cannot_be_asked(make_backend: BackendFactory, sim: KubeSim,
                                                            kubeconfig: str, tmp_path: Path) -> None:
    make_backend().submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "600")]))
    knobs = Knobs({**knobs_for(kubeconfig), "PODGAHP_K8S_REAP_GRACE_SECONDS": "0",
                   "PODGAHP_REAP_SCHEDD_NAME": "no-such-schedd@nowhere.invalid",
                   "PODGAHP_REAP_SCHEDD_POOL": "127.0.0.1:1"})
    with pytest.raises(GahpError, match="schedd no-such-schedd@nowhere.invalid .*(cannot be queried|not known)"):
        reap(knobs)
    assert not sim.requests("DELETE")


def test_classad_lines_quote_errors() -> None:
    lines = classad_lines(ReapResult(pods=1, errors=['pod "x": 503 \\ down']))
    assert lines[-1] == 'LastError = "pod \\"x\\": 503 \\\\ down"'


def test_an_error_text_forges_no_attribute_of_the_schedds_ad() -> None:
    from gahp.backends.k8s.reaper import ReapResult

    lines = classad_lines(ReapResult(errors=['pod "x\nPodgahpReapDeleted = 999\x1b[2J" refused\r']))
    assert len(lines) == 6 and all(line.isprintable() for line in lines)
    assert lines[-1].startswith('LastError = "pod \\"x\\\\x0aPodgahpReapDeleted = 999')
