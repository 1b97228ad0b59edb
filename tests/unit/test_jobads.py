"""Job-ad attributes of ``podgahp reap``: which jobs get which values, grouped into few transactions,
only what differs, bounded per pass, values made safe; and nothing in podgahp reads them back."""

from __future__ import annotations

import ast
import datetime
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import classad2
import pytest

from gahp.backends.base import Census, CeView, RemoteJob
from gahp.core.errors import GahpError
from gahp.ce.jobads import ATTRIBUTES, MAX_VALUE, Edit, JobAdSettings, plan, write
from gahp.core.config import Knobs
from gahp.ce.reap import classad_lines, reap_views
from gahp.core.schedd import GridJobs

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2026, 12, 2, 12, 0, 0, tzinfo=datetime.timezone.utc)
SCHEDD = "ce.example.org"


def sandbox(cluster: int, proc: int = 0) -> str:
    return f"ce.example.org_9619_{SCHEDD}_{cluster}.{proc}_1795297304"


def pod(cluster: int, proc: int = 0, state: str = "Running", node: str = "cpu-1", reason: str = "",
        cluster_name: str = "", age_s: float = 3600, made_for: Optional[str] = None) -> RemoteJob:
    name = f"pilot-{cluster:020d}-{proc}"
    return RemoteJob(job_id=f"k8s/pilots/{name}", name=name, queue="cpu", state=state, health=state,
                     alive=state in ("Pending", "Running"), sandbox=made_for or sandbox(cluster, proc),
                     created=NOW - datetime.timedelta(seconds=age_s), listed_at=NOW, node=node, reason=reason,
                     cluster=cluster_name)


def ad(remote: Optional[RemoteJob], cluster: int, proc: int = 0, resource: str = "batch k8s",
       **attributes: object) -> Dict[str, object]:
    grid_job_id = f"batch k8s {sandbox(cluster, proc)}" + (f" {remote.job_id}" if remote else "")
    return {"ClusterId": cluster, "ProcId": proc, "GridResource": resource, "GridJobId": grid_job_id, **attributes}


def current(remote: RemoteJob, cluster: int, proc: int = 0) -> Dict[str, object]:
    """The ad of a job whose attributes a pass already wrote for ``remote``."""
    values: Dict[str, object] = {"PodgahpPod": remote.name, "PodgahpNode": remote.node, "PodgahpPhase": remote.state,
                                 "PodgahpReason": remote.reason}
    if remote.cluster:
        values["PodgahpCluster"] = remote.cluster
    return ad(remote, cluster, proc, **values)


def by_attribute(edits: List[Edit]) -> Dict[str, Dict[Optional[str], Tuple[str, ...]]]:
    out: Dict[str, Dict[Optional[str], Tuple[str, ...]]] = {}
    for e in edits:
        assert e.value not in out.get(e.attribute, {}), f"two edits of {e.attribute} = {e.value!r}"
        out.setdefault(e.attribute, {})[e.value] = e.jobs
    return out


def test_a_first_pass_groups_the_writes_by_value() -> None:
    pods = [pod(c, node="cpu-1" if c % 2 else "cpu-2") for c in range(1, 7)]
    pending = pod(7, state="Pending", node="", reason="0/3 nodes are available: 3 Insufficient cpu.")
    edits, deferred = plan([ad(p, c) for c, p in enumerate(pods + [pending], start=1)], pods + [pending], ["k8s"], 100)
    groups = by_attribute(edits)
    assert deferred == 0
    assert groups["PodgahpPhase"] == {"Running": ("1.0", "2.0", "3.0", "4.0", "5.0", "6.0"), "Pending": ("7.0",)}
    assert groups["PodgahpNode"] == {"cpu-1": ("1.0", "3.0", "5.0"), "cpu-2": ("2.0", "4.0", "6.0"), "": ("7.0",)}
    assert groups["PodgahpReason"] == {"": ("1.0", "2.0", "3.0", "4.0", "5.0", "6.0"),
                                       "0/3 nodes are available: 3 Insufficient cpu.": ("7.0",)}
    assert groups["PodgahpPod"] == {p.name: (f"{c}.0",) for c, p in enumerate(pods + [pending], start=1)}
    assert "PodgahpCluster" not in groups  # one cluster: never written
    # a transaction per pod (each its own value) and one per distinct node, phase and reason
    assert len(edits) == 7 + 3 + 2 + 2


def test_a_pass_with_no_change_writes_nothing_and_only_what_changed_otherwise() -> None:
    pods = [pod(c) for c in range(1, 4)]
    ads = [current(p, c) for c, p in enumerate(pods, start=1)]
    assert plan(ads, pods, ["k8s"], 100) == ([], 0)
    moved = [pods[0], pod(2, state="Succeeded"), pods[2]]
    edits, _ = plan(ads, moved, ["k8s"], 100)
    assert [(e.attribute, e.value, e.jobs) for e in edits] == [("PodgahpPhase", "Succeeded", ("2.0",))]


def test_a_users_edit_is_put_right_and_a_forged_type_too() -> None:
    remote = pod(5, node="cpu-2")
    forged = dict(current(remote, 5), PodgahpNode="gpu-1", PodgahpPhase=7, PodgahpPod="someone-else")
    edits, _ = plan([forged], [remote], ["k8s"], 100)
    assert {(e.attribute, e.value, e.jobs) for e in edits} == {
        ("PodgahpNode", "cpu-2", ("5.0",)), ("PodgahpPhase", "Running", ("5.0",)), ("PodgahpPod", remote.name, ("5.0",))}


@pytest.mark.parametrize("case", ["other-backend", "not-batch", "remote-gahp", "sandbox-of-another-job",
                                  "sandbox-not-in-grid-job-id", "not-in-census", "no-cluster-id"])
def test_jobs_that_are_not_this_ces_pilot_of_that_pod_are_not_written(case: str) -> None:
    remote = pod(3)
    job = ad(remote, 3)
    if case == "other-backend":
        job["GridResource"] = "batch slurm"
    elif case == "not-batch":
        job["GridResource"] = "condor ce.example.org ce.example.org:9619"
    elif case == "remote-gahp":
        job["GridResource"] = "batch k8s remote.example.org"
    elif case == "sandbox-of-another-job":
        # a user's own grid job whose GridJobId names another pilot's pod and that pilot's sandbox
        job = dict(ad(None, 4), GridJobId=f"batch k8s {sandbox(3)} {remote.job_id}")
    elif case == "sandbox-not-in-grid-job-id":
        job["GridJobId"] = f"batch k8s {sandbox(9)} {remote.job_id}"
        remote = pod(3, made_for=sandbox(3))
    elif case == "not-in-census":
        assert plan([job], [], ["k8s"], 100) == ([], 0)
        return
    else:
        del job["ClusterId"]
    assert plan([job], [remote], ["k8s"], 100) == ([], 0)


def test_a_remote_job_listed_without_its_sandbox_is_the_grid_job_that_names_it() -> None:
    """A Lancium job a grid job names is listed without its details (no sandbox): GridJobId decides."""
    remote = RemoteJob(job_id="lancium/1000", name="1000", queue="lancium", state="running", health="Running",
                       alive=True, sandbox="", created=None, listed_at=NOW)
    job = dict(ad(None, 6, resource="batch lancium"), GridJobId=f"batch lancium {sandbox(6)} lancium/1000")
    edits, _ = plan([job], [remote], ["lancium"], 100)
    assert {(e.attribute, e.value) for e in edits} == {("PodgahpPod", "1000"), ("PodgahpPhase", "running"),
                                                       ("PodgahpNode", ""), ("PodgahpReason", "")}
    assert plan([job], [remote], ["k8s"], 100) == ([], 0)  # not a backend of this pass's views


def test_a_grid_job_with_no_remote_job_yet_loses_values_it_carries() -> None:
    """A source job routed again carries the last pilot's values into its new grid job."""
    carried = ad(None, 8, PodgahpPod="pilot-old-1", PodgahpPhase="Succeeded")
    edits, _ = plan([carried, ad(None, 9)], [], ["k8s"], 100)
    assert {(e.attribute, e.text, e.jobs) for e in edits} == {("PodgahpPod", "undefined", ("8.0",)),
                                                              ("PodgahpPhase", "undefined", ("8.0",))}


def test_the_cluster_is_written_where_there_are_several() -> None:
    remote = pod(2, cluster_name="site-b")
    edits, _ = plan([ad(remote, 2)], [remote], ["k8s"], 100)
    assert ("site-b", ("2.0",)) in [(e.value, e.jobs) for e in edits if e.attribute == "PodgahpCluster"]


def test_values_are_printable_bounded_and_quoted() -> None:
    nasty = 'say "hi" \\ then\n\x1b[31mred ' + "x" * 1000
    remote = pod(1, reason=nasty)
    edits, _ = plan([ad(remote, 1)], [remote], ["k8s"], 100)
    (reason,) = [e for e in edits if e.attribute == "PodgahpReason"]
    parsed = classad2.ClassAd(f"[R = {reason.text}]")["R"]
    assert parsed == reason.value and len(parsed) == MAX_VALUE
    assert parsed.startswith('say "hi" \\ then \\x1b[31mred xxx') and "\n" not in parsed and "\x1b" not in parsed


def test_a_pass_writes_at_most_the_bound_in_job_id_order() -> None:
    pods = [pod(c) for c in (12, 3, 7)]
    edits, deferred = plan([ad(p, c) for p, c in zip(pods, (12, 3, 7))], pods, ["k8s"], 2)
    assert deferred == 1 and {j for e in edits for j in e.jobs} == {"3.0", "7.0"}


def test_a_failed_group_is_an_error_and_the_others_are_made() -> None:
    made: List[Tuple[Tuple[str, ...], str, str]] = []

    def edit(jobs: Sequence[str], attribute: str, expression: str) -> int:
        if attribute == "PodgahpNode":
            raise GahpError("permission denied")
        made.append((tuple(jobs), attribute, expression))
        return len(jobs)

    edits = [Edit("PodgahpNode", "cpu-1", ("1.0",)), Edit("PodgahpPhase", "Running", ("1.0", "2.0"))]
    written = write(edits, 0, edit)
    assert made == [(("1.0", "2.0"), "PodgahpPhase", '"Running"')]
    assert written.transactions == 1 and written.jobs == 2
    assert written.errors == ["PodgahpNode of 1 jobs (e.g. 1.0) not written: permission denied"]
    assert write(edits, 0, None).transactions == 0  # a dry run writes nothing


def test_the_knobs() -> None:
    assert JobAdSettings.from_knobs(Knobs({})) == JobAdSettings(True, 2000)
    assert JobAdSettings.from_knobs(Knobs({"PODGAHP_REAP_JOB_ATTRIBUTES": "false",
                                           "PODGAHP_REAP_MAX_JOB_AD_EDITS": "10"})) == JobAdSettings(False, 10)


class FakeView(CeView):
    backend = "k8s"
    ce_name = "ce"

    def __init__(self, jobs: List[RemoteJob]) -> None:
        self.jobs = jobs
        self.deleted: List[str] = []

    def census(self, held: FrozenSet[str]) -> Census:
        return Census(self.backend, jobs=list(self.jobs))

    def delete(self, job: RemoteJob) -> None:
        self.deleted.append(job.job_id)


def _pass(ads: List[Dict[str, object]], jobs: List[RemoteJob]) -> Tuple[List[str], List[Tuple[str, str]], List[str]]:
    view = FakeView(jobs)
    made: List[Tuple[str, str]] = []

    def edit(job_ids: Sequence[str], attribute: str, expression: str) -> int:
        made.extend((j, attribute) for j in job_ids)
        return len(job_ids)

    grid = GridJobs(frozenset(str(a["GridJobId"]).split(" ")[3] for a in ads if len(str(a["GridJobId"]).split()) > 3),
                    len(ads), SCHEDD, tuple(ads))
    result = reap_views([view], grid, 0, job_ads=JobAdSettings(), edit=edit)
    assert f"JobAdsWritten = {len({j for j, _ in made})}" in classad_lines(result)
    return view.deleted, made, result.errors


def test_forged_values_change_nothing_that_reap_decides() -> None:
    """The same pass with a job owner's values of every attribute (another pilot's pod, a phase that
    says it is over): the same deletions, and the values put right."""
    alive, orphan = pod(1), pod(2, state="Succeeded")
    honest = [current(alive, 1)]
    forged = [dict(current(alive, 1), PodgahpPod=orphan.name, PodgahpPhase="Succeeded", PodgahpNode="",
                   PodgahpReason="gone", PodgahpCluster="elsewhere")]
    deleted, made, errors = _pass(honest, [alive, orphan])
    assert (deleted, made, errors) == ([orphan.job_id], [], [])
    deleted_forged, made_forged, errors_forged = _pass(forged, [alive, orphan])
    assert deleted_forged == deleted and errors_forged == []
    assert sorted(made_forged) == sorted(("1.0", a) for a in ATTRIBUTES)


def test_no_module_but_jobads_reads_the_attributes() -> None:
    """Every string of the product's code that names one of them is in gahp/ce/jobads.py (or is text for
    people: a docstring or a help text that mentions one is not a read)."""
    readers = {}
    for path in (ROOT / "gahp").rglob("*.py"):
        if path == ROOT / "gahp/ce/jobads.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                named = [a for a in ATTRIBUTES if a in node.value]
                if named and not _help_text(tree, node):
                    readers[str(path.relative_to(ROOT))] = named
    assert not readers, readers


def _help_text(tree: ast.AST, constant: ast.Constant) -> bool:
    """Whether ``constant`` is (part of) the help= of a click option or a command's epilog."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("help", "epilog"):
            if any(n is constant for n in ast.walk(node.value)):
                return True
    return False


def test_the_print_format_shows_every_attribute_and_no_other_of_podgahps() -> None:
    """A Podgahp* name of the shipped print format that the pass does not write would be a column of
    "-" for ever."""
    cpf = (ROOT / "ce-config/podgahp.cpf").read_text()
    named = {w for line in cpf.splitlines() if not line.startswith("#") for w in line.split() if w.startswith("Podgahp")}
    assert named == set(ATTRIBUTES)
