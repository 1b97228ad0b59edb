"""``podgahp routes check`` and ``convert`` on route files sites really have, against HTCondor's own
tools, on each series.

tests/data/routes-corpus holds reduced copies (written for these tests; each file says where its
case comes from) of the route examples of HTCondor-CE's manuals (v23, v25), the routes its packages
ship, the OSG documentation's examples and two production sites' published routes, mistakes
included. For each file:

* new syntax: the routes the check reports are those ``condor_job_router_info -config`` lists;
  the check passes a valid file and fails an invalid one naming file:line;
* old syntax: the check says to convert; ``condor_transform_ads -convert`` and ``podgahp routes
  convert`` convert the same routes, and the proof finds every converted route routing the pilots
  as the old one did behind HTCondor-CE (the old one with HTCondor-CE 23.0's own defaults), showing
  where HTCondor's conversion would not; a file HTCondor cannot read as ClassAds is refused naming
  the line; the converted file passes the check.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

from gahp.routes.check import parse_listing
from harness import Installation

pytestmark = pytest.mark.live

CORPUS = Path(__file__).resolve().parent.parent / "data" / "routes-corpus"


@dataclass(frozen=True)
class Case:
    """What HTCondor makes of a corpus file, and what podgahp must say about it."""

    routes: Sequence[str] = ()
    """Routes HTCondor accepts (new syntax) or converts (old syntax), in order."""
    valid: bool = True
    """The check passes (new syntax), or the converted file passes it (old syntax)."""
    problems: Sequence[str] = ()
    """Each a ``:<line>: text`` a problem must hold, after the file's path."""
    warnings: Sequence[str] = ()
    unread: str = ""
    """Old syntax with an entry HTCondor cannot read as a ClassAd: ``:<line>: text`` of what
    convert says of it (the entries before it are converted, as the JobRouter used them)."""
    htcondor_loses: bool = False
    """HTCondor's own conversion loses what the route gave (the CE's defaults)."""
    notes: Sequence[str] = field(default_factory=tuple)
    htcondor_routes: Optional[Sequence[str]] = None
    """The named routes ``condor_transform_ads -convert`` writes, when not ``routes``."""
    checks: Sequence[str] = ()
    """Routes converted as closely as they can be, marked CHECK: what differs cannot be expressed."""


CASES: Dict[str, Case] = {
    "ce-docs-v25-routes.conf": Case(routes=("Production_Jobs", "Gpu_Jobs", "Slurm_Cluster")),
    "ce-docs-v25-misnamed.conf": Case(
        valid=False,
        problems=(":10: JOB_ROUTER_ROUTE_NAMES lists Condor_Pool, but no JOB_ROUTER_ROUTE_Condor_Pool is defined; "
                  "did you mean Condor_Poole",),
        warnings=(":5: route Condor_Poole is defined but not in JOB_ROUTER_ROUTE_NAMES",)),
    "ce-docs-v25-environment.conf": Case(
        valid=False, problems=(":12: JOB_ROUTER_ROUTE_NAMES lists Condor_Pool, but no JOB_ROUTER_ROUTE_Condor_Pool "
                               "is defined",)),
    "ce-docs-v25-environment-fixed.conf": Case(routes=("Condor_Pool",)),
    "ce-package-batch-defaults.conf": Case(
        routes=("Condor_Pool", "Slurm_Cluster"),
        warnings=(":11: no sample pilot matched route Slurm_Cluster, and none could be built",)),
    "ce-docs-v23-defaults.entries.conf": Case(routes=("Condor_Pool",), htcondor_loses=True),
    "ce-docs-v23-queue.entries.conf": Case(routes=("Slurm_Cluster",), htcondor_loses=True),
    "ce-docs-v23-names.entries.conf": Case(
        routes=("Condor_Pool",), valid=False,
        problems=(":14: JOB_ROUTER_ROUTE_NAMES lists My_HTCONDOR, but no JOB_ROUTER_ROUTE_My_HTCONDOR is defined",),
        notes=("route Condor_Pool is not in the file's JOB_ROUTER_ROUTE_NAMES",)),
    "ce-23.0-pbs.entries.conf": Case(routes=("Local_PBS", "Local_K8s"), htcondor_loses=True),
    "site-aglt2.entries.conf": Case(routes=("Analysis_Queue", "MCORE_Queue", "Other_Jobs"), htcondor_loses=True,
                                    notes=("route Analysis_Queue was named 'Analysis Queue'",),
                                    checks=("MCORE_Queue",)),  # whole node in an HTCondor pool, the route's cores
    "site-bnl.entries.conf": Case(routes=("BNL_Condor_Pool_long", "BNL_Condor_Pool"), htcondor_loses=True,
                                  notes=("route BNL_Condor_Pool: TargetUniverse = 5 kept as the macro",)),
    "osg-covid19.entries.conf": Case(
        routes=("OSG_COVID19_Jobs",), htcondor_loses=True,
        unread=":13: this entry of JOB_ROUTER_ENTRIES is not a ClassAd",
        problems=(":13: this entry of JOB_ROUTER_ENTRIES is not a ClassAd",)),
    "site-wholenode.entries.conf": Case(routes=("Whole_Node_Pool", "Partial_Node_K8s"), htcondor_loses=True),
    "site-walltime.entries.conf": Case(
        routes=("Short_Queue", "Long_Queue", "Default_Queue"), htcondor_loses=True,
        notes=("route Short_Queue: its own BatchRuntime is kept",)),
    "site-cores.entries.conf": Case(
        routes=("MCore_8", "MCore_Pool", "MCore_xcount", "SCore"), htcondor_loses=True,
        notes=("route MCore_8: its own RequestMemory is also written as maxMemory",
               "route MCore_8: its own RequestCpus is also written as xcount"),
        checks=("MCore_Pool",)),  # whole node in an HTCondor pool, the route's cores and memory
    "site-default-queue.entries.conf": Case(
        routes=("Forced_Queue", "Default_Queue", "Batch_Queue"), htcondor_loses=True,
        notes=("route Batch_Queue: its own BatchQueue did not reach the batch system",)),
    "site-copy.entries.conf": Case(
        routes=("Copy_Route",), htcondor_loses=True,
        notes=("route Copy_Route: copy_environment replaced HTCondor-CE 23.0's own copy to orig_environment",)),
    "site-macros.entries.conf": Case(
        routes=("Prod", "Analysis", "Other"), htcondor_loses=True, htcondor_routes=("Analysis",),
        problems=(":7: JOB_ROUTER_ENTRIES refers to macros this configuration does not define (IdleMP8Pressure, "
                  "SITE_PROD_MAX_JOBS, SITE_GROUP_PREFIX)",),
        notes=("the routes need from the rest of the configuration: IdleMP8Pressure, SITE_PROD_MAX_JOBS, "
               "SITE_GROUP_PREFIX",)),
}


def test_every_corpus_file_has_a_case() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.conf")) == sorted(CASES)


def podgahp(inst: Installation, *args: str) -> Tuple[int, str, str]:
    proc = inst.run([inst.bin("podgahp"), "routes", *args], check=False)
    return proc.returncode, proc.stdout, proc.stderr


def check(inst: Installation, path: str) -> Dict[str, Any]:
    code, out, err = podgahp(inst, "check", "--json", "--emulated-ce", path)
    report: Dict[str, Any] = json.loads(out)
    assert code == (0 if report["ok"] else 1), err
    return report


def holds(found: Sequence[str], path: str, expected: Sequence[str]) -> None:
    for text in expected:
        assert any(f"{path}{text}" in line for line in found), (text, found)


def htcondor_routes(inst: Installation, workdir: str, path: str) -> List[str]:
    """The routes condor_job_router_info lists for ``path`` behind podgahp's CE emulation."""
    config = f"{workdir}/condor_config"
    inst.host_path(config).write_text(f"include : {inst.src_dir}/gahp/data/ce-router-defaults.conf\ninclude : {path}\n")
    proc = inst.run(["condor_job_router_info", "-config"], env={"CONDOR_CONFIG": config}, check=False)
    return [r.name for r in parse_listing(proc.stdout + proc.stderr)]


def htcondor_conversion(inst: Installation, path: str) -> List[str]:
    """The names of the routes condor_transform_ads -convert writes ('' for a route without a name)."""
    proc = inst.run(["condor_transform_ads", "-convert"], env={"CONDOR_CONFIG": path}, check=False)
    sections = re.split(r"^##### JOB_ROUTER_ENTRIES \[\d+\] #####$", proc.stdout, flags=re.M)[1:]
    names = []
    for section in sections:
        found = re.search(r"^NAME (.+)$", section, re.M)
        names.append(re.sub(r"[^A-Za-z0-9_]", "_", found.group(1).strip()) if found else "")
    return names


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_file(acquired: Installation, scratch: str, name: str) -> None:
    inst, workdir, case = acquired, scratch, CASES[name]
    path = f"{workdir}/{name}"
    inst.host_path(path).write_text((CORPUS / name).read_text())
    report = check(inst, path)
    old = name.endswith(".entries.conf")
    if not old:
        assert report["ok"] is case.valid, report["problems"]
        assert [r["name"] for r in report["routes"]] == htcondor_routes(inst, workdir, path) == list(case.routes)
        holds(report["problems"], path, case.problems)
        holds(report["warnings"], path, case.warnings)
        return

    assert not report["ok"]
    holds(report["problems"], path, case.problems)
    if not case.unread and not case.problems:
        assert any("convert them with `podgahp routes convert" in p for p in report["problems"]), report["problems"]
    assert [n for n in htcondor_conversion(inst, path) if n] == list(case.htcondor_routes or case.routes)
    code, converted, err = podgahp(inst, "convert", path)
    assert code == (1 if case.checks or case.unread else 0), err
    if case.unread:
        assert f"{path}{case.unread}" in err and f"# podgahp: CHECK {path}{case.unread}" in converted, err
    lines = converted.splitlines()
    for route in case.routes:
        if any(route in n and "not in the file's" in n for n in case.notes):  # a route the JobRouter did not use
            continue
        if route in case.checks:  # marked, saying what differs, and converted all the same
            assert re.search(rf"^  {route}: DIFFERENT for [1-9]", err, re.M), err
            assert lines[lines.index(f"JOB_ROUTER_ROUTE_{route} @=jrt") - 1].startswith("# podgahp: CHECK pilot ")
        else:
            assert re.search(rf"^  {route}: same for [1-9]", err, re.M), err
    assert ("HTCondor's own converter (condor_transform_ads -convert) would lose this" in err) is case.htcondor_loses
    for note in case.notes:
        assert f"note: {note}" in err, err
    converted_path = f"{workdir}/converted-{name}"
    inst.host_path(converted_path).write_text(converted)
    after = check(inst, converted_path)
    assert after["ok"] is case.valid, after["problems"]
    assert [r["name"] for r in after["routes"]] == htcondor_routes(inst, workdir, converted_path)
    for text in case.problems if case.valid is False else ():  # the same mistake, now at its line of the converted file
        assert any(re.sub(r"^:\d+: ", "", text) in p for p in after["problems"]), after["problems"]


ENTRIES_FILE = """\
[ name = "B"; GridResource = "batch k8s"; Requirements = target.queue =?= "b"; set_default_maxMemory = 1000; ]
[ name = "A"; GridResource = "batch k8s"; Requirements = target.queue =?= "a"; set_default_xcount = 4; ]
"""
WITH_ENTRIES_FILE = """\
JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True
JOB_ROUTER_ENTRIES_FILE = {entries_file}
JOB_ROUTER_ENTRIES @=jre
# B as the site wants it now
[ name = "B"; GridResource = "batch k8s"; Requirements = target.queue =?= "b"; set_default_maxMemory = 3000; ]
@jre
"""


def test_entries_file_then_entries_converted_as_the_router_read_them(acquired: Installation, scratch: str) -> None:
    """JOB_ROUTER_ENTRIES_FILE is read, then JOB_ROUTER_ENTRIES, whose B replaces the file's B (in its
    place) as HTCondor 23's JobRouter replaced it; the proof finds both routes the same."""
    inst, path = acquired, f"{scratch}/routes.conf"
    inst.host_path(f"{scratch}/entries").write_text(ENTRIES_FILE)
    inst.host_path(path).write_text(WITH_ENTRIES_FILE.format(entries_file=f"{scratch}/entries"))
    if inst.condor_version.startswith("23."):  # the JobRouter that reads both: B from JOB_ROUTER_ENTRIES
        proc = inst.run(["condor_job_router_info", "-config"], env={"CONDOR_CONFIG": path}, check=False)
        listing = {r.name: r for r in parse_listing(proc.stdout + proc.stderr)}
        assert sorted(listing) == ["A", "B"] and "SET default_maxMemory 3000" in proc.stdout, proc.stdout
    code, converted, err = podgahp(inst, "convert", path)
    assert code == 0, err
    assert re.findall(r"^JOB_ROUTER_ROUTE_(\w+) @=jrt$", converted, re.M) == ["B", "A"]
    assert "default_maxMemory = 3000" in converted and "default_maxMemory = 1000" not in converted
    assert "default_xcount = 4" in converted and "# B as the site wants it now" in converted
    assert "##  (JOB_ROUTER_ENTRIES_FILE of line 2 converted below)" in converted
    assert "note: entry 1 of JOB_ROUTER_ENTRIES is named 'B' like entry 1 of JOB_ROUTER_ENTRIES_FILE: it replaces " \
           "that one, in its place, as the JobRouter did" in err
    for route in ("A", "B"):
        assert re.search(rf"^  {route}: same for 7 pilot", err, re.M), err
