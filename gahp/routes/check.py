"""``podgahp routes check``: an admin's route file under HTCondor's own JobRouter code, offline.

Runs ``condor_job_router_info`` (``-config`` and ``-route-jobs``) with a temporary configuration
(optionally behind HTCondor-CE's router transforms: the CE's own file where installed, else podgahp's
emulation), routes the sample pilots, and predicts for each what the GAHP would receive.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import classad2

from gahp.errors import InvalidJob, RoutesError
from gahp.job import PilotJob, ce_requirements
from gahp.routes.samples import SAMPLES, samples_text
from gahp.routes.convert import route_names
from gahp.routes.submit_ad import ad_value, gahp_view, grid_type


# --------------------------------------------------------------------------------------------
# HTCondor-CE's router transforms

#: Where an HTCondor-CE installs its router defaults; used instead of the built-in copy below
#: when present, so that a check on a CE applies exactly what the CE applies.
CE_ROUTER_DEFAULTS = "/usr/share/condor-ce/config.d/01-ce-router-defaults.conf"

#: HTCondor-CE's router behaviour re-stated by podgahp (also the stand-alone pool's
#: ``config.d/01-ce-router-defaults.conf``): route defaults as macros, the pre- and post-route
#: transforms (WholeNode, Cpus, Gpus, Memory, Queue, BatchRuntime, CERequirements, OnExitHold, Env).
CE_ROUTER_EMULATION = Path(__file__).resolve().parent.parent / "data" / "ce-router-defaults.conf"


# --------------------------------------------------------------------------------------------
# Running HTCondor's tools


@dataclass(frozen=True)
class Route:
    """One route as ``condor_job_router_info -config`` lists it."""

    name: str
    grid_resource: str = ""
    requirements: str = ""
    max_jobs: str = ""
    max_idle_jobs: str = ""
    old_syntax: bool = False


@dataclass(frozen=True)
class SampleResult:
    """Where one pilot went and what podgahp would receive."""

    name: str
    job_id: str
    description: str = ""
    route: Optional[str] = None
    grid_resource: Optional[str] = None
    submit_ad: Optional[str] = None
    job: Optional[PilotJob] = None
    routed_ad: Optional[str] = None
    error: Optional[str] = None

    def as_dict(self) -> Dict[str, Any]:
        job = self.job
        return {
            "name": self.name, "job_id": self.job_id, "route": self.route,
            "grid_resource": self.grid_resource, "submit_ad": self.submit_ad, "error": self.error,
            "routed_ad": self.routed_ad,
            "gahp": None if job is None else {
                "queue": job.queue, "cpus": job.cpus, "memory_mb": job.memory_mb, "disk_kb": job.disk_kb,
                "gpus": job.gpus, "wall_time_s": job.wall_time_s, "whole_node": job.whole_node,
                "grid_type": job.grid_type, "settings": dict(job.settings),
                "environment": dict(job.environment),
            },
        }


@dataclass(frozen=True)
class Report:
    """The outcome of :func:`check_file`; ``ok`` is False when anything in ``problems``."""

    path: str
    ce: bool
    condor_version: str
    transforms: str
    routes: Tuple[Route, ...] = ()
    expected_routes: Tuple[str, ...] = ()
    samples: Tuple[SampleResult, ...] = ()
    problems: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    router_messages: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path, "ce": self.ce, "condor_version": self.condor_version, "ok": self.ok,
            "transforms": self.transforms,
            "routes": [dataclasses.asdict(r) for r in self.routes], "expected_routes": list(self.expected_routes),
            "samples": [s.as_dict() for s in self.samples], "problems": list(self.problems),
            "warnings": list(self.warnings), "router_messages": list(self.router_messages),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)

    def text(self) -> str:
        lines = [f"Routes in {self.path} (HTCondor {self.condor_version}; {self.transforms})", ""]
        order = ("in no defined order (old syntax)" if any(r.old_syntax for r in self.routes)
                 else "matched in this order")
        lines.append(f"{len(self.routes)} route(s), {order}:" if self.routes else "No routes.")
        for r in self.routes:
            limits = ", ".join(x for x in (f"MaxJobs {r.max_jobs}" if r.max_jobs else "",
                                           f"MaxIdleJobs {r.max_idle_jobs}" if r.max_idle_jobs else "") if x)
            lines.append(f"  {r.name}: GridResource \"{r.grid_resource}\"; {limits}"
                         f"{'; old syntax' if r.old_syntax else ''}")
            lines.append(f"      requirements: {r.requirements}")
        for s in self.samples:
            lines += ["", f"Pilot {s.name} (job {s.job_id}){': ' + s.description if s.description else ''}"]
            if s.route is None:
                lines.append(f"  {s.error or 'no route takes it'}")
                continue
            lines.append(f"  route          {s.route}")
            lines.append(f"  GridResource   {s.grid_resource}")
            job = s.job
            if job is None:
                lines.append(f"  {s.error}")
                continue
            settings = ", ".join(f"{k} = {v!r}" for k, v in sorted(job.settings.items())) or "none"
            lines += [
                f"  queue          {job.queue or '(backend default)'}",
                f"  cpus           {job.cpus}",
                f"  memory         {_unit(job.memory_mb, 'MiB')}",
                f"  disk           {_unit(job.disk_kb, 'KiB')}",
                f"  gpus           {job.gpus}",
                f"  wall time      {_unit(job.wall_time_s, 's')}",
                f"  whole node     {'yes' if job.whole_node else 'no'}",
                f"  route settings {settings}",
                f"  submit ad      {s.submit_ad}",
            ]
            if s.error:
                lines.append(f"  {s.error}")
        if self.warnings:
            lines += ["", "Warnings:"] + [f"  - {w}" for w in self.warnings]
        if self.problems:
            lines += ["", "Problems:"] + [f"  - {p}" for p in self.problems]
            other = [m for m in self.router_messages if f"JobRouter: {m}" not in self.problems]
            if other:
                lines += ["", "Other JobRouter messages:"] + [f"  {m}" for m in other]
        lines += ["", "FAILED" if self.problems else "OK"]
        return "\n".join(lines) + "\n"


def _unit(value: Optional[int], unit: str) -> str:
    return "not sent" if value is None else f"{value} {unit}"


#: Lines of ``-diagnostic`` output that report a broken configuration.
_ERROR_LINE = re.compile(
    r"ERROR|not found in the routing table|no longer supported|will be ignored|is not defined, so job"
    r"|JobRouter is disabled|failed to parse|not a valid", re.IGNORECASE)
#: 25.x prints these, empty, for valid routes and transforms (htcondor-setup.md §4): noise.
_EMPTY_ERROR = re.compile(r"^\s*ERROR in (transform|route) \S* ?:\s*$")
_CONVERTED = re.compile(r"^route (\S+) converted to :")
_VERSION = re.compile(r"\$CondorVersion:\s*(\d+\.\d+\.\d+)")


class _Tools:
    """HTCondor's tools, run with one temporary configuration and nothing from the environment."""

    def __init__(self, condor_config: str) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.upper().startswith("_CONDOR_")}
        self.env["CONDOR_CONFIG"] = condor_config

    def run(self, argv: Sequence[str], timeout: float = 60) -> "subprocess.CompletedProcess[str]":
        exe = shutil.which(argv[0], path=self.env.get("PATH"))
        if exe is None:
            raise RoutesError(f"{argv[0]} not found on PATH: run the check where HTCondor's tools are "
                              "installed (the CE, or any machine with HTCondor 23 or later)")
        try:
            return subprocess.run([exe, *argv[1:]], env=self.env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            raise RoutesError(f"{argv[0]} could not be run: {e}") from e

    def config_val(self, name: str) -> Optional[str]:
        proc = self.run(["condor_config_val", name])
        if proc.returncode != 0:
            return None
        return proc.stdout.rstrip("\n")

    def version(self) -> str:
        out = self.run(["condor_version"]).stdout
        match = _VERSION.search(out)
        return match.group(1) if match else "(unknown version)"


def _parse_listing(text: str) -> List[Route]:
    """The routes of ``condor_job_router_info -config``, in match order."""
    routes: List[Route] = []
    for block in re.split(r"\n(?=Route \d+\n)", text):
        if not re.match(r"Route \d+\n", block):
            continue
        fields: Dict[str, str] = {}
        for line in block.splitlines()[1:]:
            key, sep, value = line.partition(":")
            if sep and not line.startswith("\t"):
                fields.setdefault(key.strip(), value.strip())
        name = fields.get("Name", "").strip('"')
        routes.append(Route(
            name=name, grid_resource=fields.get("GridResource", ""),
            requirements=fields.get("Requirements", ""), max_jobs=fields.get("MaxJobs", ""),
            max_idle_jobs=fields.get("MaxIdleJobs", ""),
            old_syntax=fields.get("Source", "").startswith("entries")))
    return routes


def _router_errors(text: str) -> List[str]:
    """Error lines of ``-diagnostic`` output, each prefixed with the route it follows, if any."""
    errors: List[str] = []
    route = ""
    for line in text.splitlines():
        match = _CONVERTED.match(line)
        if match:
            route = match.group(1)
            continue
        if line.startswith("\t") or _EMPTY_ERROR.match(line) or not _ERROR_LINE.search(line):
            continue
        line = line.strip()
        if route and "CONFIGURATION ERROR" in line:
            line = f"route {route}: {line}"
        if line not in errors:
            errors.append(line)
    return errors




def _entries_names(tools: _Tools) -> List[str]:
    text = tools.config_val("JOB_ROUTER_ENTRIES")
    if not text:
        return []
    try:
        ads = list(classad2.parseAds(text, classad2.ParserType.New))
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        raise RoutesError(f"JOB_ROUTER_ENTRIES is not a list of ClassAds: {e}") from e
    names = []
    for index, ad in enumerate(ads):
        value = ad_value(ad, "Name")
        names.append(value if isinstance(value, str) else f"(entry {index + 1})")
    return names


def _job_names(jobs_text: str) -> Dict[str, str]:
    """``"<cluster>.<proc>"`` of every ad in a job-ads file, in order."""
    names: Dict[str, str] = {}
    try:
        ads = list(classad2.parseAds(jobs_text, classad2.ParserType.Old))
    except Exception as e:  # noqa: BLE001
        raise RoutesError(f"the job ads cannot be parsed: {e}") from e
    for ad in ads:
        cluster, proc = ad_value(ad, "ClusterId"), ad_value(ad, "ProcId")
        if isinstance(cluster, int) and isinstance(proc, int):
            names[f"{cluster}.{proc}"] = f"{cluster}.{proc}"
    return names


def route_jobs(tools: "_Tools", jobs_file: str, out_file: str) -> Tuple[Dict[str, classad2.ClassAd], str]:
    """Routed ads by source job id (``RoutedFromJobId``), and the tool's own output."""
    proc = tools.run(["condor_job_router_info", "-route-jobs", out_file, "-jobads", jobs_file])
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise RoutesError(f"condor_job_router_info -route-jobs failed (exit {proc.returncode}): {output}")
    routed: Dict[str, classad2.ClassAd] = {}
    text = Path(out_file).read_text() if os.path.exists(out_file) else ""
    for ad in classad2.parseAds(text, classad2.ParserType.Old):
        source = ad_value(ad, "RoutedFromJobId")
        if isinstance(source, str):
            routed[source] = ad
    return routed, output


#: Lines of a configuration file that would run a program, or read files other than the one checked.
_UNSAFE_LINE = re.compile(r"^\s*(include\b|@include\b|(LOCAL_CONFIG_FILE|LOCAL_CONFIG_DIR|LOCAL_ROOT_CONFIG_FILE|"
                          r"JOB_ROUTER_ENTRIES_CMD|JOB_ROUTER_ENTRIES_FILE)\s*=|.*\|\s*$)", re.IGNORECASE)
#: Largest routes file checked (real ones are a few KiB).
MAX_ROUTES_FILE_BYTES = 4 * 1024 * 1024


def _without_commands(path: str, tmp: str) -> Tuple[str, List[str]]:
    """A copy of ``path`` in ``tmp`` whose lines that would run commands or read other files are
    commented out (``routes check`` never executes what the file it checks says); and a warning per
    such line, showing it unexecuted."""
    from gahp.files import read_input
    from gahp.errors import InvalidJob

    try:
        data = read_input(path, "routes file", MAX_ROUTES_FILE_BYTES, "a routes file")
    except InvalidJob as e:
        raise RoutesError(str(e)) from None
    if b"\0" in data:
        raise RoutesError(f"{path}: not a text file (it holds NUL bytes)")
    text = data.decode("utf-8", "surrogateescape")
    lines, warnings = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if _UNSAFE_LINE.match(line):
            shown = line.strip().encode("utf-8", "backslashreplace").decode("utf-8")[:200]
            warnings.append(f"line {number} not executed or followed (routes check reads this file only): {shown}")
            line = "# (disabled by podgahp routes check) " + line
        lines.append(line)
    checked = os.path.join(tmp, "routes-checked.conf")
    Path(checked).write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    return checked, warnings


def check_file(path: str, jobs_file: Optional[str] = None, ce: bool = True) -> Report:
    """Check the routes in config file ``path`` with HTCondor's JobRouter code, offline.

    The file is read with a temporary configuration that holds only it (after HTCondor-CE's router
    transforms when ``ce``: the CE's own file if installed, else :data:`CE_ROUTER_EMULATION`).
    ``condor_job_router_info -config`` must list every route the file names (invalid routes are
    dropped silently otherwise); the router's error text is reported. Then the pilots of
    ``jobs_file`` (default :data:`SAMPLES`) are routed with ``-route-jobs`` and, for each, the
    submit ad the gridmanager would send is predicted and read as podgahp reads it.
    Raises :class:`RoutesError` when the check itself cannot run.
    """
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise RoutesError(f"{path}: no such file")
    with tempfile.TemporaryDirectory(prefix="podgahp-routes-") as tmp:
        config, transforms, disabled = _write_config(tmp, path, ce)
        tools = _Tools(config)
        version = tools.version()
        proc = tools.run(["condor_job_router_info", "-diagnostic", "-config"])
        listing = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RoutesError(f"{path}: condor_job_router_info -config failed (exit {proc.returncode}):\n"
                              f"{listing.strip()}")
        routes = _parse_listing(listing)
        messages = _router_errors(listing)
        entries, problems, warnings = _old_syntax(tools, messages, path, version, ce)
        warnings = list(disabled) + warnings
        expected = route_names(tools.config_val("JOB_ROUTER_ROUTE_NAMES"))
        want = expected + [e for e in entries if e not in expected]
        problems += _route_problems(path, routes, want, messages, bool(problems))
        jobs_path, descriptions = _pilots(jobs_file, tmp)
        routed, _ = route_jobs(tools, jobs_path, os.path.join(tmp, "routed.ads"))

    results = [_sample_result(jid, name, description, routed.get(jid), problems, warnings)
               for jid, (name, description) in descriptions.items()]
    if routes and not routed:
        problems.append("no pilot was routed by these routes; give pilots they accept with --jobs")
    return Report(path=path, ce=ce, condor_version=version, transforms=transforms, routes=tuple(routes),
                  expected_routes=tuple(want), samples=tuple(results), problems=tuple(problems),
                  warnings=tuple(warnings), router_messages=tuple(messages))


def _write_config(tmp: str, path: str, ce: bool) -> Tuple[str, str, List[str]]:
    """A configuration holding only the routes file (behind the CE's router transforms when ``ce``):
    its path, a description of the transforms, and warnings about the commands taken out of it."""
    config = os.path.join(tmp, "condor_config")
    parts = ["## Written by podgahp routes check.\n"]
    transforms = "no HTCondor-CE transforms"
    if ce:
        if os.path.isfile(CE_ROUTER_DEFAULTS):
            parts.append(f"include : {CE_ROUTER_DEFAULTS}\n")
            transforms = f"HTCondor-CE transforms from {CE_ROUTER_DEFAULTS}"
        else:
            # The pilots' CONDORCE_COLLECTOR_HOST: this machine's CE collector.
            parts.append("COLLECTOR_HOST = $(FULL_HOSTNAME):9619\n")
            parts.append(f"include : {CE_ROUTER_EMULATION}\n")
            transforms = "HTCondor-CE router transforms (podgahp's emulation)"
    checked, disabled = _without_commands(path, tmp)
    parts.append(f"include : {checked}\n")
    Path(config).write_text("".join(parts))
    return config, transforms, list(disabled)


def _old_syntax(tools: "_Tools", messages: List[str], path: str, version: str,
                ce: bool) -> Tuple[List[str], List[str], List[str]]:
    """Routes in the old JOB_ROUTER_ENTRIES syntax: the names this HTCondor reads, problems, warnings."""
    entries = _entries_names(tools)
    if not entries:
        return [], [], []
    knob = (tools.config_val("JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES") or "").strip().lower()
    if any("no longer supported" in m for m in messages):
        return [], [f"JOB_ROUTER_ENTRIES ({', '.join(entries)}) are not read by HTCondor {version}: "
                    f"convert them with `podgahp routes convert {path}`"], []
    if knob not in ("true", "1", "yes", "t"):
        return [], [f"JOB_ROUTER_ENTRIES ({', '.join(entries)}) are ignored unless "
                    "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True; better, convert them with "
                    f"`podgahp routes convert {path}`"], []
    warnings = ["the routes use the old JOB_ROUTER_ENTRIES syntax, which HTCondor 24.10 and later no "
                f"longer read; convert them with `podgahp routes convert {path}`"]
    if ce:
        warnings.append(
            "HTCondor applies no pre- or post-route transforms (HTCondor-CE's xcount, maxMemory, "
            "maxWallTime, default_* handling) to routes in the old syntax; HTCondor-CE 23.0 "
            "used JOB_ROUTER_DEFAULTS for that instead")
    return entries, [], warnings


def _route_problems(path: str, routes: Sequence[Route], want: List[str], messages: List[str],
                    already: bool) -> List[str]:
    """Routes the JobRouter dropped, its error lines, and GridResources that would start the wrong GAHP."""
    problems: List[str] = []
    found = [r.name for r in routes]
    missing = [n for n in want if n not in found]
    if missing:
        problems.append(
            f"route(s) {', '.join(missing)} of {path} were dropped by the JobRouter (HTCondor "
            "drops invalid routes silently)")
    if not want and not routes and not already:
        problems.append(f"{path} defines no routes (no JOB_ROUTER_ROUTE_NAMES, no JOB_ROUTER_ENTRIES)")
    for line in messages:
        if "ERROR" in line or (missing and "failed to parse" in line.lower()):
            problems.append(f"JobRouter: {line}")
    for r in routes:
        batch, extra = grid_type(r.grid_resource)
        if extra and r.grid_resource.lower().startswith("batch"):
            problems.append(
                f"route {r.name}: GridResource \"{r.grid_resource}\" has tokens after the batch type; "
                "the gridmanager would start REMOTE_GAHP (SSH) instead of the local "
                f"{batch.upper()}_GAHP. Pass parameters with SET and CERequirements instead")
    return problems


def _pilots(jobs_file: Optional[str], tmp: str) -> Tuple[str, Dict[str, Tuple[str, str]]]:
    """The file of pilot ads to route (``jobs_file``, or the samples written into ``tmp``) and, by
    job id, each pilot's name and description."""
    if jobs_file is None:
        jobs_path = os.path.join(tmp, "samples.ads")
        Path(jobs_path).write_text(samples_text())
        return jobs_path, {f"{i + 1}.0": (s.name, s.description) for i, s in enumerate(SAMPLES)}
    jobs_path = os.path.abspath(jobs_file)
    try:
        jobs_text = Path(jobs_path).read_text()
    except OSError as e:
        raise RoutesError(f"{jobs_file}: {e.strerror}") from e
    names = _job_names(jobs_text)
    if not names:
        raise RoutesError(f"{jobs_file}: no job ad with ClusterId and ProcId (long form, a blank "
                          "line between ads)")
    return jobs_path, {jid: (jid, "") for jid in names}


def _sample_result(job_id: str, name: str, description: str, routed: Optional[classad2.ClassAd],
                   problems: List[str], warnings: List[str]) -> SampleResult:
    if routed is None:
        return SampleResult(name, job_id, description, error="no route takes it")
    route = ad_value(routed, "RouteName")
    route_name = route if isinstance(route, str) else "(unnamed)"
    resource = ad_value(routed, "GridResource")
    grid_resource = resource if isinstance(resource, str) else ""
    routed_text = "\n".join(f"{k} = {routed.lookup(k)}" for k in sorted(routed.keys(), key=str.lower))
    sandbox = "routes-check_" + job_id.replace(".", "_")
    batch, _ = grid_type(grid_resource)
    if batch not in ("k8s", "lancium"):
        return SampleResult(name, job_id, description, route_name, grid_resource, routed_ad=routed_text,
                            error=f"not a podgahp route (GridResource \"{grid_resource}\")")
    try:
        submit, job = gahp_view(routed, sandbox)
    except InvalidJob as e:
        problems.append(f"pilot {name} on route {route_name}: podgahp would hold it: {e}")
        return SampleResult(name, job_id, description, route_name, grid_resource, routed_ad=routed_text,
                            error=f"podgahp would hold it: {e}")
    cereq = str(classad2.parseOne(submit).lookup("CERequirements")) if "CERequirements" in submit else ""
    sent = ce_requirements(cereq)
    for attr, what in (("requestcpus", "RequestCpus (cores)"), ("requestdisk", "RequestDisk (disk)")):
        if attr not in sent:
            warning = (f"route {route_name}: {what} does not reach podgahp; list it in CERequirements "
                       "(and default_CERequirements on an HTCondor-CE)")
            if warning not in warnings:
                warnings.append(warning)
    return SampleResult(name, job_id, description, route_name, grid_resource, submit, job, routed_text)


