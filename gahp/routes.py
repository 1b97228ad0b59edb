"""JobRouter routes for podgahp: check them offline with HTCondor's tools, convert the old syntax.

Owns: running ``condor_job_router_info`` (``-config`` and ``-route-jobs``) on an admin's route file
with a temporary configuration (optionally wrapped in HTCondor-CE's router transforms), the sample
pilot ads it routes, predicting from each routed ad the submit ad the gridmanager hands to the GAHP
(``INFNBatchJob::buildSubmitAd``: copied attributes, ``CERequirements``, ``Queue``, ``GPUNumber``,
``REMOTE_*``), reading that ad with :func:`gahp.job.parse_submit_ad`, and rewriting
``JOB_ROUTER_ENTRIES`` as ``JOB_ROUTER_ROUTE_<name>`` transforms.

Must not know any backend or client library: what a backend does with the ad is its own business.
ClassAds are parsed and unparsed only through ``classad2``.
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
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import classad2

from gahp.errors import GahpError, InvalidJob
from gahp.job import PilotJob, ce_requirements, parse_submit_ad


class RoutesError(GahpError):
    """The routes cannot be checked or converted; the message says what to fix."""


# --------------------------------------------------------------------------------------------
# Sample pilots

@dataclass(frozen=True)
class Sample:
    """A pilot job ad (long form) to route, and what it stands for."""

    name: str
    description: str
    ad: str


def _pilot(cluster: int, extra: str) -> str:
    # What the router's own constraint needs (Owner, JobStatus, ProcId, JobUniverse, Requirements)
    # plus what a CE's schedd holds for a pilot that arrived from a factory.
    return (
        f"ClusterId = {cluster}\n"
        "ProcId = 0\n"
        'Owner = "pilot"\n'
        "JobStatus = 1\n"
        "JobUniverse = 5\n"
        "Requirements = true\n"
        f'GlobalJobId = "ce.example.org#{cluster}.0#1767225600"\n'
        "QDate = 1767225600\n"
        "EnteredCurrentStatus = 1767225600\n"
        'Cmd = "/home/pilot/pilot.sh"\n'
        'Args = "-v"\n'
        + ('' if "Environment = " in extra else 'Environment = ""\n') +
        'In = "/dev/null"\n'
        'Out = "pilot.out"\n'
        'Err = "pilot.err"\n'
        'Iwd = "/home/pilot"\n'
        "RequestCpus = 1\n"
        "RequestMemory = 2048\n"
        + extra
    )


#: Built-in pilots: one per kind of route the example routes (routes/) provide.
SAMPLES: Tuple[Sample, ...] = (
    Sample("plain", "a pilot with no CE attributes: 1 core, 2048 MiB, 1 GB of disk",
           _pilot(1, "RequestDisk = 1000000\n")),
    Sample("gpu", "an 8-core, 16000 MiB, 1-GPU pilot (xcount, maxMemory, RequestGPUs), 20 GB of disk, 48 h",
           _pilot(2, "RequestDisk = 20000000\nxcount = 8\nmaxMemory = 16000\nRequestGPUs = 1\n"
                     "maxWallTime = 2880\n")),
    Sample("opportunistic", 'a 4-core, 8000 MiB pilot asking for queue "opportunistic"',
           _pilot(3, 'RequestDisk = 4000000\nxcount = 4\nmaxMemory = 8000\nqueue = "opportunistic"\n')),
    Sample("lancium", 'a 2-core, 4000 MiB pilot asking for queue "lancium"',
           _pilot(4, 'RequestDisk = 2000000\nxcount = 2\nmaxMemory = 4000\nqueue = "lancium"\n')),
    Sample("nodisk", "a pilot submitted without request_disk (HTCondor 23.x: RequestDisk = DiskUsage, 50 KiB)",
           _pilot(5, "DiskUsage = 50\nRequestDisk = DiskUsage\n")),
    Sample("minwalltime", "a pilot that must run 60 min (minWalltime) of its 120 (maxWallTime), with its own "
                          "environment",
           _pilot(6, 'RequestDisk = 1000000\nminWalltime = 60\nmaxWallTime = 120\n'
                     'Environment = "PILOT_GROUP=atlas"\n')),
)


def samples_text(samples: Sequence[Sample] = SAMPLES) -> str:
    """The samples as one job-ads file (long form, a blank line after each ad)."""
    return "".join(s.ad + "\n" for s in samples)


# --------------------------------------------------------------------------------------------
# HTCondor-CE's router transforms

#: Where an HTCondor-CE installs its router defaults; used instead of the built-in copy below
#: when present, so that a check on a CE applies exactly what the CE applies.
CE_ROUTER_DEFAULTS = "/usr/share/condor-ce/config.d/01-ce-router-defaults.conf"

#: HTCondor-CE's router behaviour re-stated by podgahp (also the stand-alone pool's
#: ``config.d/01-ce-router-defaults.conf``): route defaults as macros, the pre- and post-route
#: transforms (WholeNode, Cpus, Gpus, Memory, Queue, BatchRuntime, CERequirements, OnExitHold, Env).
CE_ROUTER_EMULATION = Path(__file__).resolve().parent / "data" / "ce-router-defaults.conf"


# --------------------------------------------------------------------------------------------
# The submit ad the gridmanager builds (INFNBatchJob::buildSubmitAd)

#: Job attributes the gridmanager evaluates in the routed job and copies as literals.
COPIED_ATTRIBUTES: Tuple[str, ...] = (
    "Args", "Arguments", "Env", "EnvDelim", "Environment", "In", "Out", "Err", "TransferInput",
    "TransferOutput", "TransferOutputRemaps", "Iwd", "GridResource", "RequestMemory", "NodeNumber",
    "HostNumber", "SMPGranularity", "WholeNodes", "HostSMPSize", "BatchExtraSubmitArgs", "StageCmd",
    "BatchProject", "BatchRuntime", "GPUNumber", "GPUMode", "GPUModel", "MICNumber",
)

_ENV_ATTRIBUTES = {"env", "envdelim", "environment"}
_ARG_ATTRIBUTES = {"args", "arguments"}
_LIST_SEPARATORS = re.compile(r"[,\s]+")


def _evaluate(ad: classad2.ClassAd, name: str) -> object:
    """``name`` evaluated in ``ad`` (``classad2.Value.Undefined`` when absent)."""
    if name not in ad:
        return classad2.Value.Undefined
    return ad.eval(name)


def _value(ad: classad2.ClassAd, name: str) -> object:
    """``name`` evaluated in ``ad``; None when absent, undefined or an error.

    (``classad2.Value`` is an int enum, so it must never reach an ``isinstance(x, int)`` test.)
    """
    value = _evaluate(ad, name)
    return None if isinstance(value, classad2.Value) else value


def _literal_text(value: object) -> Optional[str]:
    """The ClassAd literal for an evaluated value, or None when the value is not a scalar."""
    if isinstance(value, classad2.Value):
        return "error" if value == classad2.Value.Error else "undefined"
    if isinstance(value, (bool, int, float, str)):
        holder = classad2.ClassAd()
        holder["v"] = value
        return str(holder.lookup("v"))
    return None


def grid_type(grid_resource: str) -> Tuple[str, List[str]]:
    """The batch type of a ``GridResource`` and any further tokens (which mean remote mode)."""
    tokens = grid_resource.split(" ")
    if tokens and tokens[0].lower() == "batch":
        tokens = tokens[1:]
    if not tokens or not tokens[0]:
        return "", []
    return tokens[0].lower(), tokens[1:]


def predict_submit_ad(routed: classad2.ClassAd, sandbox_id: str) -> classad2.ClassAd:
    """The ad ``BLAH_JOB_SUBMIT`` would carry for ``routed`` (blahp-protocol.md §4.1, §4.3)."""
    submit = classad2.ClassAd()
    for name in COPIED_ATTRIBUTES:
        if name in routed:
            text = _literal_text(routed.eval(name))
            if text is not None:
                submit[name] = classad2.ExprTree(text)

    if "CERequirements" in routed:
        cereq = routed.eval("CERequirements")
        conjuncts: List[str] = []
        if isinstance(cereq, str):
            pairs = [(n, _evaluate(routed, n)) for n in _LIST_SEPARATORS.split(cereq) if n]
        elif isinstance(cereq, classad2.ClassAd):
            pairs = [(n, cereq.eval(n)) for n in cereq.keys()]
        else:
            pairs = []
            if not isinstance(cereq, classad2.Value) or cereq != classad2.Value.Undefined:
                submit["CERequirements"] = routed.lookup("CERequirements")
        for name, value in pairs:
            text = _literal_text(value)
            if text is not None:
                conjuncts.append(f"{name} == {text}")
        if conjuncts:
            submit["CERequirements"] = classad2.ExprTree(" && ".join(conjuncts))

    remote_iwd = _value(routed, "RemoteIwd")
    if isinstance(remote_iwd, str) and remote_iwd:
        submit["Iwd"] = remote_iwd
    queue = _value(routed, "BatchQueue")
    if isinstance(queue, str) and queue:
        submit["Queue"] = queue
    gpus = _value(routed, "RequestGPUs")
    if isinstance(gpus, (int, float)) and not isinstance(gpus, bool) and int(gpus) > 0:
        submit["GPUNumber"] = int(gpus)

    iwd = _value(submit, "Iwd")
    cmd = _value(routed, "Cmd")
    if isinstance(cmd, str):
        submit["Cmd"] = cmd if cmd.startswith("/") or not isinstance(iwd, str) else f"{iwd}/{cmd}"
    proxy = _value(routed, "x509userproxy")
    if isinstance(proxy, str):
        submit["x509userproxy"] = proxy if proxy.startswith("/") else f"{iwd if isinstance(iwd, str) else ''}/{proxy}"
    submit["JobDirectory"] = "home_bl_" + sandbox_id
    resource = _value(routed, "GridResource")
    batch = grid_type(resource)[0] if isinstance(resource, str) else ""
    if batch and batch != "blah":
        submit["gridtype"] = batch

    cleared_env = cleared_args = False
    for name in list(routed.keys()):
        if len(name) <= 7 or name[:7].lower() != "remote_":
            continue
        target = name[7:]
        if target.lower() in _ENV_ATTRIBUTES and not cleared_env:
            cleared_env = True
            _delete(submit, "Env", "EnvDelim", "Environment")
        if target.lower() in _ARG_ATTRIBUTES and not cleared_args:
            cleared_args = True
            _delete(submit, "Args", "Arguments")
        _delete(submit, target)
        submit[target] = routed.lookup(name)
    return submit


def _delete(ad: classad2.ClassAd, *names: str) -> None:
    for name in names:
        if name in ad:
            del ad[name]


def gahp_view(routed: classad2.ClassAd, sandbox_id: str) -> Tuple[str, PilotJob]:
    """The predicted submit ad (one line, as sent) and the :class:`PilotJob` podgahp reads from it."""
    text = repr(predict_submit_ad(routed, sandbox_id))
    return text, parse_submit_ad(text)


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


def _route_names(value: Optional[str]) -> List[str]:
    return [n for n in _LIST_SEPARATORS.split(value or "") if n]


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
        value = _value(ad, "Name")
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
        cluster, proc = _value(ad, "ClusterId"), _value(ad, "ProcId")
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
        source = _value(ad, "RoutedFromJobId")
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
        tools = _Tools(config)

        version = tools.version()
        proc = tools.run(["condor_job_router_info", "-diagnostic", "-config"])
        listing = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RoutesError(f"{path}: condor_job_router_info -config failed (exit {proc.returncode}):\n"
                              f"{listing.strip()}")
        routes = _parse_listing(listing)
        messages = _router_errors(listing)
        problems: List[str] = []
        warnings: List[str] = list(disabled)

        expected = _route_names(tools.config_val("JOB_ROUTER_ROUTE_NAMES"))
        entries = _entries_names(tools)
        if entries:
            knob = (tools.config_val("JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES") or "").strip().lower()
            if any("no longer supported" in m for m in messages):
                problems.append(
                    f"JOB_ROUTER_ENTRIES ({', '.join(entries)}) are not read by HTCondor {version}: "
                    f"convert them with `podgahp routes convert {path}`")
                entries = []
            elif knob not in ("true", "1", "yes", "t"):
                problems.append(
                    f"JOB_ROUTER_ENTRIES ({', '.join(entries)}) are ignored unless "
                    "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True; better, convert them with "
                    f"`podgahp routes convert {path}`")
                entries = []
            else:
                warnings.append(
                    "the routes use the old JOB_ROUTER_ENTRIES syntax, which HTCondor 24.10 and later no "
                    f"longer read; convert them with `podgahp routes convert {path}`")
                if ce:
                    warnings.append(
                        "HTCondor applies no pre- or post-route transforms (HTCondor-CE's xcount, maxMemory, "
                        "maxWallTime, default_* handling) to routes in the old syntax; HTCondor-CE 23.0 "
                        "used JOB_ROUTER_DEFAULTS for that instead")
        found = [r.name for r in routes]
        want = expected + [e for e in entries if e not in expected]
        missing = [n for n in want if n not in found]
        if missing:
            problems.append(
                f"route(s) {', '.join(missing)} of {path} were dropped by the JobRouter (HTCondor "
                "drops invalid routes silently)")
        if not want and not routes and not problems:
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

        if jobs_file is not None:
            jobs_path = os.path.abspath(jobs_file)
            try:
                jobs_text = Path(jobs_path).read_text()
            except OSError as e:
                raise RoutesError(f"{jobs_file}: {e.strerror}") from e
            names = _job_names(jobs_text)
            descriptions: Dict[str, Tuple[str, str]] = {jid: (jid, "") for jid in names}
            if not names:
                raise RoutesError(f"{jobs_file}: no job ad with ClusterId and ProcId (long form, a blank "
                                  "line between ads)")
        else:
            jobs_path = os.path.join(tmp, "samples.ads")
            Path(jobs_path).write_text(samples_text())
            descriptions = {f"{i + 1}.0": (s.name, s.description) for i, s in enumerate(SAMPLES)}
        routed, _ = route_jobs(tools, jobs_path, os.path.join(tmp, "routed.ads"))

    results = [_sample_result(jid, name, description, routed.get(jid), problems, warnings)
               for jid, (name, description) in descriptions.items()]
    if routes and not routed:
        problems.append("no pilot was routed by these routes; give pilots they accept with --jobs")
    return Report(path=path, ce=ce, condor_version=version, transforms=transforms, routes=tuple(routes),
                  expected_routes=tuple(want), samples=tuple(results), problems=tuple(problems),
                  warnings=tuple(warnings), router_messages=tuple(messages))


def _sample_result(job_id: str, name: str, description: str, routed: Optional[classad2.ClassAd],
                   problems: List[str], warnings: List[str]) -> SampleResult:
    if routed is None:
        return SampleResult(name, job_id, description, error="no route takes it")
    route = _value(routed, "RouteName")
    route_name = route if isinstance(route, str) else "(unnamed)"
    resource = _value(routed, "GridResource")
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


# --------------------------------------------------------------------------------------------
# Converting JOB_ROUTER_ENTRIES


#: Route-ad attributes that are router settings; they become bare macros of the same name.
ROUTE_MACROS: Tuple[str, ...] = (
    "TargetUniverse", "GridResource", "MaxJobs", "MaxIdleJobs", "FailureRateThreshold",
    "JobFailureTest", "OverrideRoutingEntry", "SendIDTokens", "EditJobInPlace",
    "UseSharedX509UserProxy", "SharedX509UserProxy", "JobShouldBeSandboxed",
)
_MACROS = {m.lower(): m for m in ROUTE_MACROS}
#: Order in which HTCondor applies old-syntax edits (and lists them when it converts a route).
_EDITS: Tuple[Tuple[str, str], ...] = (
    ("copy_", "COPY"), ("delete_", "DELETE"), ("set_", "SET"), ("eval_set_", "EVALSET"))
#: Knobs that convert() replaces.
_CONSUMED = ("JOB_ROUTER_ENTRIES", "JOB_ROUTER_DEFAULTS", "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES",
             "MERGE_JOB_ROUTER_DEFAULT_ADS")
_UNSUPPORTED = ("JOB_ROUTER_ENTRIES_FILE", "JOB_ROUTER_ENTRIES_CMD")
_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(@?=)\s*(.*)$")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SCOPE = re.compile(r"\b(target|my)\.", re.IGNORECASE)


@dataclass(frozen=True)
class _Knob:
    """One assignment in a config file: its name, its value and the lines it spans."""

    name: str
    value: str
    first: int
    last: int


def _config_knobs(text: str) -> Iterator[_Knob]:
    """Assignments of an HTCondor config file (``NAME = value`` with ``\\`` continuations,
    ``NAME @=tag`` ... ``@tag``); comments, includes and conditionals are skipped."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _ASSIGNMENT.match(line)
        if not match or line.lstrip().startswith("#"):
            i += 1
            continue
        name, op, rest = match.groups()
        first = i
        if op == "@=":
            tag = rest.strip()
            body: List[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() != "@" + tag:
                body.append(lines[i])
                i += 1
            if i >= len(lines):
                raise RoutesError(f"line {first + 1}: {name} @={tag} has no closing @{tag}")
            yield _Knob(name, "\n".join(body), first, i)
            i += 1
            continue
        value = rest
        while value.endswith("\\") and i + 1 < len(lines):
            i += 1
            value = value[:-1] + "\n" + lines[i]
        yield _Knob(name, value.strip(), first, i)
        i += 1


def _plain_scope(expr: classad2.ExprTree, where: str) -> str:
    """Unparse ``expr`` with ``target.`` references made plain (new-syntax REQUIREMENTS see the job)."""
    text = str(expr)
    pieces: List[str] = []
    last = 0
    for string in _STRING.finditer(text):
        pieces.append(_strip_scope(text[last:string.start()], where))
        pieces.append(string.group(0))
        last = string.end()
    pieces.append(_strip_scope(text[last:], where))
    return "".join(pieces)


def _strip_scope(code: str, where: str) -> str:
    def replace(match: "re.Match[str]") -> str:
        if match.group(1).lower() == "my":
            raise RoutesError(f"{where} refers to the route itself (MY.); rewrite it by hand")
        return ""

    return _SCOPE.sub(replace, code)


def _parse_ads(text: str, knob: str) -> List[classad2.ClassAd]:
    ads: List[classad2.ClassAd] = []
    stripped = text.strip()
    if not stripped:
        return ads
    if not stripped.startswith("["):
        stripped = "[ " + stripped + " ]"
    try:
        ads = list(classad2.parseAds(stripped, classad2.ParserType.New))
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        raise RoutesError(f"{knob} is not a list of ClassAds in new syntax ([ ... ] [ ... ]): {e}") from e
    if not ads:
        raise RoutesError(f"{knob} is not a list of ClassAds in new syntax ([ ... ] [ ... ])")
    return ads


def _route_name(value: object, index: int) -> Tuple[str, Optional[str]]:
    if not isinstance(value, str) or not value:
        return f"Route_{index}", f"entry {index} had no name"
    name = re.sub(r"[^A-Za-z0-9_]", "_", value)
    return name, (None if name == value else f"was named {value!r}")


def _convert_route(entry: classad2.ClassAd, index: int) -> Tuple[str, str]:
    """(route name, ``JOB_ROUTER_ROUTE_<name> @=jrt ... @jrt`` block) for one merged route ad."""
    name, note = _route_name(_value(entry, "Name"), index)
    where = f"route {name}"
    macros: List[Tuple[int, str]] = []
    requirements: Optional[str] = None
    edits: Dict[str, List[str]] = {keyword: [] for _, keyword in _EDITS}
    for attr in sorted(entry.keys(), key=str.lower):
        lower = attr.lower()
        expr = entry.lookup(attr)
        if lower == "name":
            continue
        if lower == "requirements":
            requirements = _plain_scope(expr, f"{where}: Requirements")
            continue
        if lower in _MACROS:
            macros.append((ROUTE_MACROS.index(_MACROS[lower]), f"{_MACROS[lower]} = {expr}"))
            continue
        if lower == "default_cerequirements":
            raise RoutesError(f"{where}: default_CERequirements is read from the job, not the route: "
                              f"write set_default_CERequirements = {expr}; and convert again")
        if lower.startswith("default_") and len(attr) > len("default_"):
            # HTCondor-CE's defaults (default_maxWallTime, ...) are macros of the route.
            macros.append((len(ROUTE_MACROS), f"{attr} = {expr}"))
            continue
        for prefix, keyword in _EDITS:
            if lower.startswith(prefix) and len(attr) > len(prefix):
                target = attr[len(prefix):]
                if keyword == "COPY":
                    value = entry.eval(attr)
                    if not isinstance(value, str) or not value:
                        raise RoutesError(f"{where}: {attr} must name the attribute to copy to, as a string")
                    edits[keyword].append(f"COPY {target} {value}")
                elif keyword == "DELETE":
                    edits[keyword].append(f"DELETE {target}")
                else:
                    edits[keyword].append(f"{keyword} {target} {expr}")
                break
        else:
            raise RoutesError(
                f"{where}: attribute {attr} is neither a route setting ({', '.join(ROUTE_MACROS)}), a "
                "CE default (default_*) nor a copy_/delete_/set_/eval_set_ edit; nothing reads it, remove it "
                "and convert again")
    # set_X before eval_set_X is the order HTCondor applies them; sorting by name above keeps a
    # stable order within each kind.
    lines = [f"JOB_ROUTER_ROUTE_{name} @=jrt"]
    if note:
        lines.insert(0, f"##  (converted: {note})")
    lines += [f"  {m}" for _, m in sorted(macros)]
    if requirements is not None:
        lines.append(f"  REQUIREMENTS {requirements}")
    for _, keyword in _EDITS:
        lines += [f"  {e}" for e in edits[keyword]]
    lines.append("@jrt")
    return name, "\n".join(lines)


def convert(text: str) -> str:
    """Rewrite a config file's ``JOB_ROUTER_ENTRIES`` (and ``JOB_ROUTER_DEFAULTS``) in route syntax.

    The entries are parsed with ``classad2``; each becomes ``JOB_ROUTER_ROUTE_<name> @=jrt ... @jrt``
    with the defaults merged in (the entry wins), route settings as bare macros, ``Requirements`` as
    ``REQUIREMENTS`` with ``target.`` dropped, and ``copy_``/``delete_``/``set_``/``eval_set_`` as
    ``COPY``/``DELETE``/``SET``/``EVALSET``; ``JOB_ROUTER_ROUTE_NAMES`` lists them in entry order.
    Every other line of the file is kept. Raises :class:`RoutesError` naming what cannot be converted.
    """
    knobs = list(_config_knobs(text))
    by_name: Dict[str, _Knob] = {}
    for knob in knobs:
        by_name[knob.name.upper()] = knob  # the last assignment wins, as in HTCondor
    for unsupported in _UNSUPPORTED:
        if unsupported in by_name:
            raise RoutesError(f"{unsupported} is set: convert the routes it provides (put them in "
                              "JOB_ROUTER_ENTRIES of a file) and run convert on that file")
    entries_knob = by_name.get("JOB_ROUTER_ENTRIES")
    if entries_knob is None or not entries_knob.value.strip():
        raise RoutesError("no JOB_ROUTER_ENTRIES in this file: nothing to convert")
    for source in (entries_knob, by_name.get("JOB_ROUTER_DEFAULTS")):
        if source is not None and "$(" in source.value:
            raise RoutesError(f"{source.name} uses config macros ($(...)); expand them first "
                              f"(condor_config_val {source.name}) and convert the expanded text")

    defaults: Dict[str, classad2.ExprTree] = {}
    defaults_knob = by_name.get("JOB_ROUTER_DEFAULTS")
    if defaults_knob is not None:
        default_ads = _parse_ads(defaults_knob.value, "JOB_ROUTER_DEFAULTS")
        merge = by_name.get("MERGE_JOB_ROUTER_DEFAULT_ADS")
        if len(default_ads) > 1 and not (merge and merge.value.strip().lower() in ("true", "1", "yes")):
            raise RoutesError("JOB_ROUTER_DEFAULTS holds several ClassAds but MERGE_JOB_ROUTER_DEFAULT_ADS "
                              "is not True, so HTCondor would not read them; fix that first")
        for ad in default_ads:
            for key in ad.keys():
                defaults[key] = ad.lookup(key)

    names: List[str] = []
    blocks: List[str] = []
    for index, entry in enumerate(_parse_ads(entries_knob.value, "JOB_ROUTER_ENTRIES"), start=1):
        merged = classad2.ClassAd()
        for key, expr in defaults.items():
            merged[key] = expr
        for key in entry.keys():
            _delete(merged, key)
            merged[key] = entry.lookup(key)
        name, block = _convert_route(merged, index)
        if name in names:
            raise RoutesError(f"two entries are named {name}; route names must be unique")
        names.append(name)
        blocks.append(block)

    listed = _route_names(by_name["JOB_ROUTER_ROUTE_NAMES"].value) if "JOB_ROUTER_ROUTE_NAMES" in by_name else []
    new_names = [n for n in names if n not in listed]
    replacement = [
        "##  Routes converted from JOB_ROUTER_ENTRIES by podgahp routes convert"
        + (" (JOB_ROUTER_DEFAULTS merged into each)" if defaults_knob is not None else "") + ".",
        "##  Match order: the order of JOB_ROUTER_ROUTE_NAMES.",
    ]
    if new_names:
        # First: a catch-all route defined elsewhere (an HTCondor-CE batch-system package) would
        # otherwise take every job before them.
        replacement.append("JOB_ROUTER_ROUTE_NAMES = " + " ".join(new_names) + " $(JOB_ROUTER_ROUTE_NAMES)")
    replacement.append("")
    replacement.append("\n\n".join(blocks))

    consumed = {k.first: k for k in knobs if k.name.upper() in _CONSUMED}
    out: List[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        here = consumed.get(i)
        if here is None:
            out.append(lines[i])
            i += 1
            continue
        if here is entries_knob:
            out.extend(replacement)
        elif here.name.upper() == "JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES":
            out.append("##  (JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES dropped: the routes use the new syntax)")
        elif here.name.upper() == "JOB_ROUTER_DEFAULTS":
            out.append("##  (JOB_ROUTER_DEFAULTS merged into the routes below)")
        i = here.last + 1
    header = ["##  Converted to JOB_ROUTER_ROUTE_* routes by podgahp routes convert; the comments are",
              "##  those of the original file, which used JOB_ROUTER_ENTRIES.", ""]
    return "\n".join(header + out).rstrip("\n") + "\n"
