"""``podgahp routes check``: routes read and applied by HTCondor's own JobRouter code, offline.

The configuration is laid out safely (:mod:`gahp.routes.sources`): on an HTCondor-CE the CE's whole
configuration (``mode="ce"``), else the admin's file behind podgahp's re-statement of the CE's
router transforms (``"emulated"``) or alone (``"plain"``). ``condor_job_router_info -config`` lists
the routes HTCondor accepts; every route named or defined is accounted for (listed but not defined,
defined but not listed, dropped as invalid with HTCondor's reason), each at its file and line.
Sample pilots — built-in ones, plus one built for each route that none of them reaches
(:mod:`gahp.routes.pilots`), or the admin's own (``jobs_file``) — are routed with
``condor_job_router_info -route-jobs``, and for each the submit ad the gridmanager would send is
predicted and read as podgahp reads it.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

import classad2

from gahp.core import plugins
from gahp.core.errors import InvalidJob, RoutesError
from gahp.core.job import PilotJob, ce_requirements
from gahp.routes.convert import bad_entry_line, parse_entries
from gahp.routes.macros import keep_undefined
from gahp.routes.pilots import RouteCondition, condition, meets, pilot_for
from gahp.routes.report import Report, Route, SampleResult
from gahp.routes.samples import SAMPLES, Sample, samples_text
from gahp.routes.sources import CE_CONDOR_CONFIG, CE_ROUTER_EMULATION, CE_ROUTER_ENV, PROBE, SafeConfig, add_ce
from gahp.routes.submit_ad import LIST_SEPARATORS, ad_value, gahp_view, grid_type
from gahp.routes.tools import Tools
from gahp.core.schedd import gahp_type

MODES = ("ce", "emulated", "plain")

#: Attributes the gridmanager sends that podgahp does not use.
UNUSED_SUBMIT_ATTRIBUTES = ("HostNumber", "GPUMode", "GPUModel", "MICNumber", "BatchExtraSubmitArgs", "StageCmd",
                            "BatchProject", "TransferOutput", "TransferOutputRemaps")

#: Lines of ``-diagnostic`` output that report a broken configuration.
_ERROR_LINE = re.compile(
    r"ERROR|not found in the routing table|no longer supported|will be ignored|is not defined, so job"
    r"|JobRouter is disabled|failed to parse|not a valid|is not valid", re.IGNORECASE)
#: 25.x prints these, empty, for valid routes and transforms: noise.
_EMPTY_ERROR = re.compile(r"^\s*ERROR in (transform|route) \S* ?:\s*$")
_CONVERTED = re.compile(r"^route (\S+) converted to :")
_IGNORED = re.compile(r"^Ignoring route entry in JOB_ROUTER_ROUTE_(\S+)")
_FAILURE = re.compile(r"^failure \((?:src=([\d.]+),)?route=([^)]*)\): (.*)$")


def resolve_mode(mode: str, ce_config: str = CE_CONDOR_CONFIG) -> str:
    """``auto``: the installed HTCondor-CE's whole configuration where there is one, else the
    emulation."""
    if mode == "auto":
        return "ce" if os.path.isfile(ce_config) else "emulated"
    if mode not in MODES:
        raise RoutesError(f"unknown mode {mode!r} (one of auto, {', '.join(MODES)})")
    return mode


def lay_out(safe: SafeConfig, path: Optional[str], mode: str, ce_config: str) -> str:
    """Put the configuration of ``mode`` into ``safe``; a description of what it holds."""
    if mode == "ce":
        layout = add_ce(safe, ce_config, path)
        described = f"the HTCondor-CE configuration of {layout.condor_config}"
        if path is not None:
            described += f" with {path} in {layout.directories[-1] if layout.directories else 'it'}"
        return described + (f"; its config pipe read as {layout.pipe}" if layout.pipe else "")
    if mode == "emulated":
        # The pilots' CONDORCE_COLLECTOR_HOST: this machine's CE collector.
        safe.add("COLLECTOR_HOST = $(FULL_HOSTNAME):9619")
        safe.include_data(CE_ROUTER_EMULATION)
        if path is not None:
            safe.include(path)
        safe.include_data(CE_ROUTER_ENV)
        return "HTCondor-CE's router transforms as podgahp re-states them (no HTCondor-CE here)"
    if path is not None:
        safe.include(path)
    return "no HTCondor-CE transforms"


#: Why a backend would hold a pilot for its queue alone: (backend, queue, a knob's raw value) -> reason or None.
QueueProblem = Callable[[str, Optional[str], Callable[[str], Optional[str]]], Optional[str]]


def check_file(path: Optional[str], jobs_file: Optional[str] = None, mode: str = "auto",
               ce_config: str = CE_CONDOR_CONFIG, whole_node: Callable[[str], str] = lambda backend: "",
               queue_problem: QueueProblem = lambda backend, queue, knob: None) -> Report:
    """Check the routes of ``path`` (on a CE, ``None`` checks the CE's own configuration).
    ``whole_node``: how a backend gives a pilot a whole node, in its words (its
    :attr:`~gahp.backends.base.Backend.whole_node`; the caller knows the backends, this module none).
    ``queue_problem``: why a backend would hold a pilot of that queue under the configuration read
    (:meth:`~gahp.backends.base.Backend.queue_problem`).

    Raises :class:`RoutesError` when the check itself cannot run."""
    mode = resolve_mode(mode, ce_config)
    if path is None and mode != "ce":
        raise RoutesError("give the routes file to check (without one, --ce checks the CE's own configuration)")
    if path is not None:
        path = os.path.abspath(path)
        if not os.path.isfile(path):
            raise RoutesError(f"{path}: no such file")
    with tempfile.TemporaryDirectory(prefix="podgahp-routes-") as tmp:
        safe = SafeConfig(tmp, handled=("LOCAL_CONFIG_DIR", "LOCAL_CONFIG_FILE") if mode == "ce" else ())
        transforms = lay_out(safe, path, mode, ce_config)
        tools = safe.tools()
        return _Check(safe, tools, path or ce_config, mode, transforms, whole_node, queue_problem).run(jobs_file, tmp)


class _Check:
    """One check, step by step; problems and warnings accumulate."""

    def __init__(self, safe: SafeConfig, tools: Tools, path: str, mode: str, transforms: str,
                 whole_node: Callable[[str], str], queue_problem: QueueProblem = lambda b, q, k: None) -> None:
        self.safe, self.tools, self.path, self.mode, self.transforms = safe, tools, path, mode, transforms
        self.whole_node, self.queue_problem = whole_node, queue_problem
        self._knobs: Dict[str, Optional[str]] = {}
        self.problems: List[str] = []
        self.warnings: List[str] = list(safe.warnings)
        self.locations: Dict[str, Tuple[str, str]] = {}
        self.entry_names: List[str] = []
        self.version = tools.version()

    def report(self, **fields: object) -> Report:
        return Report(path=self.path, mode=self.mode, condor_version=self.version, transforms=self.transforms,
                      problems=tuple(self.problems), warnings=tuple(dict.fromkeys(self.warnings)),
                      sources=tuple(self.safe.copies), **fields)  # type: ignore[arg-type]

    def run(self, jobs_file: Optional[str], tmp: str) -> Report:
        error = self.tools.config_error(PROBE)
        if error:
            self.problems.append(f"HTCondor cannot read the configuration: {error}")
            return self.report()
        proc = self.tools.run(["condor_job_router_info", "-diagnostic", "-config"])
        listing = self.safe.translate(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RoutesError(f"condor_job_router_info -config failed (exit {proc.returncode}):\n{listing.strip()}")
        locations = {name: (spelled, self.safe.location(file, line))
                     for name, (spelled, file, line) in self.tools.locations("JOB_ROUTER_").items()}
        self.locations = locations
        routes = [_located(r, locations) for r in parse_listing(listing)]
        messages, by_route = router_errors(listing)
        entries = self._old_syntax(messages, locations)
        expected = self._names(routes, entries, by_route, messages, locations)
        self._grid_resources(routes)
        samples, built = pilots(routes, self.tools.value("JOB_ROUTER_SOURCE_JOB_CONSTRAINT"), jobs_file)
        routed, run_messages = route(self.tools, samples, tmp)
        failures = transform_failures(run_messages)
        results = [self._result(sample, routed.get(job_id(sample)), failures, locations) for sample in samples]
        self._coverage(routes, results, built)
        return self.report(routes=tuple(routes), expected_routes=tuple(expected), samples=tuple(results),
                           router_messages=tuple(messages))

    # ---------------------------------------------------------------------------------------
    # the routes

    def _old_syntax(self, messages: List[str], locations: Dict[str, Tuple[str, str]]) -> List[str]:
        """Names of the old-syntax entries this HTCondor reads (problems and warnings about them)."""
        text = self.tools.value("JOB_ROUTER_ENTRIES")
        if not text or not text.strip():
            return []
        where = locations.get("JOB_ROUTER_ENTRIES", ("", self.path))[1]
        try:
            ads = parse_entries(text)
        except RoutesError:
            undefined = self._undefined_macros()
            if undefined:
                self.problems.append(
                    f"{where}: JOB_ROUTER_ENTRIES refers to macros this configuration does not define "
                    f"({', '.join(undefined)}): HTCondor expands them to nothing, and the entries are then not "
                    f"ClassAds; if the rest of the site's configuration defines them, convert them with "
                    f"`podgahp routes convert {self.path}`, which keeps them as $(...) references")
            else:
                self.problems.append(self._bad_entry(where))
            return []
        entries = []
        for index, ad in enumerate(ads):
            value = ad_value(ad, "Name")
            entries.append(value if isinstance(value, str) else f"(entry {index + 1})")
        self.entry_names = list(entries)
        knob = (self.tools.value("JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES") or "").strip().lower()
        convert = f"convert them with `podgahp routes convert {self.path}`"
        if any("no longer supported" in m for m in messages):
            self.problems.append(f"{where}: JOB_ROUTER_ENTRIES ({', '.join(entries)}) are not read by HTCondor "
                                 f"{self.version}: {convert}")
            return []
        if knob not in ("true", "1", "yes", "t"):
            self.problems.append(f"{where}: JOB_ROUTER_ENTRIES ({', '.join(entries)}) are ignored unless "
                                 f"JOB_ROUTER_USE_DEPRECATED_ROUTER_ENTRIES = True; better, {convert}")
            return []
        self.warnings.append(f"{where}: the routes use the old JOB_ROUTER_ENTRIES syntax, which HTCondor 24.10 "
                             f"and later no longer read; {convert}")
        if self.mode != "plain":
            self.warnings.append(
                f"{where}: HTCondor applies no pre- or post-route transforms (HTCondor-CE's xcount, maxMemory, "
                "maxWallTime, default_* handling) to routes in JOB_ROUTER_ENTRIES; HTCondor-CE 23.0 used "
                "JOB_ROUTER_DEFAULTS for that instead")
        return entries

    def _undefined_macros(self) -> List[str]:
        """The macros JOB_ROUTER_ENTRIES refers to that nothing defines."""
        return list(keep_undefined([self.tools.raw("JOB_ROUTER_ENTRIES") or ""], self.tools.raw).needed)

    def _bad_entry(self, where: str) -> str:
        """Where JOB_ROUTER_ENTRIES stops being ClassAds, and what to do."""
        path, _, line = where.rpartition(":")
        statement = self.safe.statement(path, int(line)) if line.isdigit() else None
        entry = self.safe.copies.get(path)
        if statement is not None and entry is not None:
            bad = bad_entry_line(entry.lines, statement)
            if bad is not None:
                where = f"{path}:{bad + 1}"
        return (f"{where}: this entry of JOB_ROUTER_ENTRIES is not a ClassAd (an unclosed string or bracket, a "
                "missing ';'): the JobRouter reads none of the entries")

    def _names(self, routes: Sequence[Route], entries: Sequence[str], by_route: Dict[str, List[str]],
               messages: List[str], locations: Dict[str, Tuple[str, str]]) -> List[str]:
        """JOB_ROUTER_ROUTE_NAMES against the routes defined and the routes HTCondor kept."""
        value = self.tools.value("JOB_ROUTER_ROUTE_NAMES")
        names_at = locations.get("JOB_ROUTER_ROUTE_NAMES", ("", self.path))[1]
        listed = route_names(value)
        self._separators(value, names_at)
        defined = _defined_routes(locations)
        if value is None and defined:
            self.problems.append(f"no JOB_ROUTER_ROUTE_NAMES: the JobRouter uses none of the routes defined "
                                 f"({', '.join(sorted(defined.values()))}); list them there in match order")
        kept = {r.name.upper() for r in routes}
        for name in listed:
            self._listed(name, listed, defined, kept, entries, by_route, locations, names_at)
        if value is not None:
            self._unlisted(listed, entries, defined, locations, names_at)
        self._stray_errors(messages, by_route)
        if not listed and not entries and not routes and not self.problems:
            self.problems.append(f"{self.path} defines no routes (no JOB_ROUTER_ROUTE_NAMES, no JOB_ROUTER_ENTRIES)")
        return listed + [e for e in entries if e.upper() not in {n.upper() for n in listed}]

    def _stray_errors(self, messages: Sequence[str], by_route: Dict[str, List[str]]) -> None:
        """The JobRouter's errors that belong to no route and that no problem says already."""
        attributed = {line for lines in by_route.values() for line in lines}
        for line in messages:
            if "ERROR" in line and line not in attributed and not any(line in p for p in self.problems):
                self.problems.append(f"JobRouter: {line}")

    def _separators(self, value: Optional[str], names_at: str) -> None:
        """A warning for a route list that starts or ends with a separator."""
        if value is not None and value.strip() and re.search(r"(^[, \t])|([, \t]$)", value):
            self.warnings.append(
                f"{names_at}: JOB_ROUTER_ROUTE_NAMES = {value!r} starts or ends with a separator: HTCondor-CE's "
                "start-up check (verify_ce_config) reports a route with an empty name at every start. Extend "
                "the list only when it is defined (if defined JOB_ROUTER_ROUTE_NAMES ... else ... endif)")

    def _listed(self, name: str, listed: Sequence[str], defined: Dict[str, str], kept: Set[str],
                entries: Sequence[str], by_route: Dict[str, List[str]], locations: Dict[str, Tuple[str, str]],
                names_at: str) -> None:
        """The problem with one name of JOB_ROUTER_ROUTE_NAMES, if it has one: no route of that name is
        defined (and which one was perhaps meant), or HTCondor dropped the route (and why)."""
        upper = name.upper()
        if upper not in {n.upper() for n in self.entry_names} | set(defined):
            unused = [spelled for key, spelled in defined.items() if key not in {n.upper() for n in listed}]
            guess = difflib.get_close_matches(name, unused or list(defined.values()), n=1, cutoff=0.6)
            hint = f"; did you mean {guess[0]} (JOB_ROUTER_ROUTE_{guess[0]} is defined)?" if guess else ""
            self.problems.append(f"{names_at}: JOB_ROUTER_ROUTE_NAMES lists {name}, but no JOB_ROUTER_ROUTE_{name} "
                                 f"is defined{hint}")
        elif upper not in kept and upper not in {n.upper() for n in self.entry_names if n not in entries}:
            at = locations.get(f"JOB_ROUTER_ROUTE_{upper}", ("", names_at))[1]
            reasons = by_route.get(name) or by_route.get(upper) or []
            why = "; ".join(reasons) if reasons else "see the JobRouter messages below"
            self.problems.append(f"{at}: route {name} is not valid, so the JobRouter drops it: {why}")

    def _unlisted(self, listed: Sequence[str], entries: Sequence[str], defined: Dict[str, str],
                  locations: Dict[str, Tuple[str, str]], names_at: str) -> None:
        """Warnings for routes (old-syntax entries, then route knobs) that JOB_ROUTER_ROUTE_NAMES leaves out."""
        named = {n.upper() for n in listed}
        for entry in entries:
            if entry.upper() not in named:
                at = locations.get("JOB_ROUTER_ENTRIES", ("", self.path))[1]
                self.warnings.append(f"{at}: route {entry} of JOB_ROUTER_ENTRIES is not in JOB_ROUTER_ROUTE_NAMES "
                                     f"({names_at}), so the JobRouter does not use it; add it to the list to use it")
        for key, spelled in sorted(defined.items()):
            if key not in named:
                at = locations[f"JOB_ROUTER_ROUTE_{key}"][1]
                self.warnings.append(f"{at}: route {spelled} is defined but not in JOB_ROUTER_ROUTE_NAMES "
                                     f"({names_at}), so the JobRouter does not use it; add it to the list to use it")

    def _grid_resources(self, routes: Sequence[Route]) -> None:
        for r in routes:
            for warning in spelling_warnings([r]):
                self.warnings.append(f"{r.location or self.path}: {warning}")
            batch, extra = grid_type(r.grid_resource)
            if extra and r.grid_resource.lower().startswith("batch"):
                self.problems.append(
                    f"{r.location or self.path}: route {r.name}: GridResource \"{r.grid_resource}\" has tokens after "
                    "the batch type; the gridmanager would start REMOTE_GAHP (SSH) instead of the local "
                    f"{batch.upper()}_GAHP. Pass parameters with SET and CERequirements instead")

    # ---------------------------------------------------------------------------------------
    # the pilots

    def _result(self, sample: Sample, routed: Optional[classad2.ClassAd], failures: Dict[str, Tuple[str, str]],
                locations: Dict[str, Tuple[str, str]]) -> SampleResult:
        source = job_id(sample)
        if routed is None:
            if source in failures:
                failed, reason = failures[source]
                at = locations.get(f"JOB_ROUTER_ROUTE_{failed.upper()}", ("", self.path))[1]
                self.problems.append(f"{at}: route {failed} cannot be applied to pilot {sample.name}: {reason}")
                return SampleResult(sample.name, source, sample.description, failed,
                                    error=f"route {failed} cannot be applied to it: {reason}")
            return SampleResult(sample.name, source, sample.description, error="no route takes it")
        return self._routed(sample, routed)

    def _routed(self, sample: Sample, routed: classad2.ClassAd) -> SampleResult:
        source = job_id(sample)
        named = ad_value(routed, "RouteName")
        route_name = named if isinstance(named, str) else "(unnamed)"
        resource = ad_value(routed, "GridResource")
        grid_resource = resource if isinstance(resource, str) else ""
        routed_text = "\n".join(f"{k} = {routed.lookup(k)}" for k in sorted(routed.keys(), key=str.lower))
        batch, _ = grid_type(grid_resource)
        if batch not in plugins.backend_names():
            return SampleResult(sample.name, source, sample.description, route_name, grid_resource,
                                routed_ad=routed_text, error=f"not a podgahp route (GridResource \"{grid_resource}\")")
        try:
            submit, job = gahp_view(routed, "routes-check_" + source.replace(".", "_"))
        except InvalidJob as e:
            self.problems.append(f"pilot {sample.name} on route {route_name}: podgahp would hold it: {e}")
            return SampleResult(sample.name, source, sample.description, route_name, grid_resource,
                                routed_ad=routed_text, error=f"podgahp would hold it: {e}")
        submit_ad = classad2.parseOne(submit)
        self._requirements_sent(submit_ad, route_name)
        notes = self._notes(sample, route_name, batch, job, submit_ad)
        return SampleResult(sample.name, source, sample.description, route_name, grid_resource, submit, job,
                            routed_text, notes=tuple(notes))

    def _requirements_sent(self, submit_ad: classad2.ClassAd, route_name: str) -> None:
        """Warnings for the requests a route's pilots do not pass to podgahp in CERequirements."""
        sent = ce_requirements(str(submit_ad.lookup("CERequirements"))) if "CERequirements" in submit_ad else {}
        for attr, what in (("requestcpus", "RequestCpus (cores)"), ("requestdisk", "RequestDisk (disk)")):
            if attr not in sent:
                at = self.locations.get(f"JOB_ROUTER_ROUTE_{route_name.upper()}", ("", ""))[1]
                self.warnings.append(f"{at + ': ' if at else ''}route {route_name}: {what} does not reach podgahp; list "
                                     "it in CERequirements (and default_CERequirements on an HTCondor-CE)")

    def _notes(self, sample: Sample, route_name: str, batch: str, job: PilotJob,
               submit_ad: classad2.ClassAd) -> List[str]:
        """What the report says of a routed pilot podgahp takes: a hold its queue would give it, a whole
        node, attributes that reach podgahp unused."""
        notes = []
        held = self.queue_problem(job.grid_type or batch, job.queue, self._knob)
        if held:
            self.warnings.append(f"pilot {sample.name} on route {route_name}: podgahp would hold it: {held}")
            notes.append(f"podgahp would hold it: {held}")
        if job.whole_node:
            how = self.whole_node(job.grid_type or batch) or f"the {batch} backend's document says what it gives"
            notes.append(f"whole node: the pilot asks for a whole node (WholeNodes); {how}")
        for name in UNUSED_SUBMIT_ATTRIBUTES:
            if name in submit_ad:
                notes.append(f"{name} = {submit_ad.lookup(name)} reaches podgahp, which does not use it")
        return notes

    def _knob(self, name: str) -> Optional[str]:
        """A knob's raw value in the configuration checked (None when undefined), read once."""
        if name not in self._knobs:
            self._knobs[name] = self.tools.value(name)
        return self._knobs[name]

    def _coverage(self, routes: Sequence[Route], results: Sequence[SampleResult], built: Dict[str, str]) -> None:
        """Warnings for routes no pilot reached, and for built pilots that went elsewhere."""
        reached = {r.route for r in results if r.route}
        by_id = {r.job_id: r for r in results}
        for index, route in enumerate(routes):
            where = route.location or self.path
            if route.name in built and built[route.name]:
                result = by_id.get(built[route.name])
                if result is not None and result.route != route.name:
                    self.warnings.append(f"{where}: the pilot built to meet route {route.name}'s REQUIREMENTS went to "
                                         f"{result.route or 'no route'} ({result.description})")
            if route.name not in reached:
                self._unreached(routes, index, built, where)

    def _unreached(self, routes: Sequence[Route], index: int, built: Dict[str, str], where: str) -> None:
        """The warning for a route no pilot reached, and what to do about it."""
        route = routes[index]
        if route.name in built and not built[route.name]:
            before = ", ".join(r.name for r in routes[:index]) or "none"
            self.warnings.append(
                f"{where}: no sample pilot matched route {route.name}, and none could be built that meets its "
                f"REQUIREMENTS but not those of the routes before it ({before}): if an earlier route takes "
                "every such pilot, change the order of JOB_ROUTER_ROUTE_NAMES; else give pilots with --jobs")
        else:
            self.warnings.append(f"{where}: no sample pilot matched route {route.name}; give pilots it accepts "
                                 "with --jobs to see what it does")


def _defined_routes(locations: Dict[str, Tuple[str, str]]) -> Dict[str, str]:
    """The routes the configuration defines (JOB_ROUTER_ROUTE_<name>): upper-case name -> name as spelled."""
    prefix = "JOB_ROUTER_ROUTE_"
    return {name[len(prefix):].upper(): spelled[len(prefix):] for name, (spelled, _) in locations.items()
            if name.startswith(prefix) and name != "JOB_ROUTER_ROUTE_NAMES"}


def pilots(routes: Sequence[Route], constraint: Optional[str],
           jobs_file: Optional[str] = None) -> Tuple[List[Sample], Dict[str, str]]:
    """The pilots to route — the admin's, or the built-in samples plus one built for each route
    none of them reaches — and, by route, the job id of the pilot built for it ('' when none could
    be built)."""
    if jobs_file is not None:
        return _jobs_samples(jobs_file), {}
    samples = list(SAMPLES)
    conditions = [RouteCondition(r.name, r.requirements) for r in routes]
    covered = {_first_route(s, conditions, constraint) for s in samples}
    built: Dict[str, str] = {}
    for index, condition_ in enumerate(conditions):
        if condition_.name in covered:
            continue
        pilot = pilot_for(condition_, conditions[:index], constraint, SAMPLES[0], 100 + index)
        built[condition_.name] = "" if pilot is None else f"{100 + index}.0"
        if pilot is not None:
            samples.append(pilot)
    return samples, built


def route(tools: Tools, samples: Sequence[Sample], tmp: str) -> Tuple[Dict[str, classad2.ClassAd], List[str]]:
    """The routed ads of ``samples`` by source job id, and the router's other lines."""
    jobs_path = os.path.join(tmp, "pilots.ads")
    Path(jobs_path).write_text(samples_text(samples))
    os.chmod(jobs_path, 0o644)
    return tools.route_jobs(jobs_path)


def job_id(sample: Sample) -> str:
    ad = classad2.parseOne(sample.ad, classad2.ParserType.Old)
    return f"{ad_value(ad, 'ClusterId')}.{ad_value(ad, 'ProcId')}"


def spelling_warnings(routes: Sequence[Route]) -> List[str]:
    """A GridResource the gridmanager reads one way and an exact comparison another: ``batch K8S``
    starts K8S_GAHP, yet a constraint ``GridResource == "batch k8s"`` of another tool (``=?=`` is
    case-sensitive) misses it; ``Batch k8s`` or ``batch  k8s`` look like podgahp's, yet start no
    podgahp GAHP at all."""
    warnings = []
    for r in routes:
        started = gahp_type(r.grid_resource)
        words = r.grid_resource.split()
        looks = words[1].lower() if len(words) == 2 and words[0].lower() == "batch" else ""
        if started in plugins.backend_names() and r.grid_resource != f"batch {started}":
            warnings.append(f"route {r.name}: GridResource \"{r.grid_resource}\" starts {started.upper()}_GAHP "
                            f"(the gridmanager lower-cases the batch type), but tools comparing the exact text "
                            f"miss its jobs; write \"batch {started}\"")
        elif started is None and looks in plugins.backend_names():
            warnings.append(f"route {r.name}: GridResource \"{r.grid_resource}\" starts no podgahp GAHP (the "
                            f"gridmanager needs exactly \"batch\", one space and the type); write "
                            f"\"batch {looks}\"")
    return warnings


# --------------------------------------------------------------------------------------------
# Reading the tools' output


def parse_listing(text: str) -> List[Route]:
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
        routes.append(Route(
            name=fields.get("Name", "").strip('"'), grid_resource=fields.get("GridResource", ""),
            requirements=fields.get("Requirements", ""), max_jobs=fields.get("MaxJobs", ""),
            max_idle_jobs=fields.get("MaxIdleJobs", ""),
            old_syntax=fields.get("Source", "").startswith("entries")))
    return routes


def router_errors(text: str) -> Tuple[List[str], Dict[str, List[str]]]:
    """Error lines of ``-diagnostic`` output, and those that belong to a route, by route name.

    HTCondor prints ``route X converted to :`` before reading a route and
    ``Ignoring route entry in JOB_ROUTER_ROUTE_X`` after dropping one: an error belongs to the
    route dropped next, else to the route being read."""
    errors: List[str] = []
    by_route: Dict[str, List[str]] = {}
    pending: List[str] = []
    current = ""
    for line in text.splitlines():
        converted, ignored = _CONVERTED.match(line), _IGNORED.match(line)
        if converted or ignored:
            if ignored:
                by_route.setdefault(ignored.group(1), []).extend(pending)
            elif current and pending:
                by_route.setdefault(current, []).extend(pending)
            pending = []
            current = converted.group(1) if converted else ""
        elif not (line.startswith("\t") or _EMPTY_ERROR.match(line) or not _ERROR_LINE.search(line)):
            _error_line(line.strip(), errors, pending)
    if current and pending:
        by_route.setdefault(current, []).extend(pending)
    return errors, {name: list(dict.fromkeys(lines)) for name, lines in by_route.items()}


def _error_line(line: str, errors: List[str], pending: List[str]) -> None:
    """One error line of the router's: among the errors (once), and among those of the route being read
    (``pending``) unless it is about the whole configuration (a route listed but not found, the old syntax)."""
    if "not found in the routing table" in line or "JOB_ROUTER_ENTRIES" in line or "no longer supported" in line:
        errors.append(line)
        return
    line = re.sub(r"^route \S+ is not valid: ", "", line)
    if line in pending or re.sub(r"^CONFIGURATION ERROR: ", "", line) in pending:
        return
    pending.append(line)
    if line not in errors:
        errors.append(line)


def transform_failures(messages: Sequence[str]) -> Dict[str, Tuple[str, str]]:
    """Pilots a route could not be applied to: job id -> (route, HTCondor's reason)."""
    reasons: Dict[str, str] = {}
    failed: Dict[str, Tuple[str, str]] = {}
    for line in messages:
        match = _FAILURE.match(line.strip())
        if not match:
            continue
        job, route, reason = match.groups()
        if job is None:
            reasons[route] = reason.rstrip(".")
        else:
            failed[job] = (route, reasons.get(route, reason.rstrip(".")))
    return failed


def route_names(value: Optional[str]) -> List[str]:
    return [n for n in LIST_SEPARATORS.split(value or "") if n]


def _located(route: Route, locations: Dict[str, Tuple[str, str]]) -> Route:
    found = locations.get(f"JOB_ROUTER_ROUTE_{route.name.upper()}")
    if found is None and route.old_syntax:
        found = locations.get("JOB_ROUTER_ENTRIES")
    return Route(route.name, route.grid_resource, route.requirements, route.max_jobs, route.max_idle_jobs,
                 route.old_syntax, found[1] if found else "")


def _first_route(sample: Sample, conditions: Sequence[RouteCondition], constraint: Optional[str]) -> str:
    """The route a sample would take by ``classad2``'s reading of the requirements ('' if none)."""
    ad = classad2.parseOne(sample.ad, classad2.ParserType.Old)
    for index, route in enumerate(conditions):
        if meets(condition(route, conditions[:index], constraint), ad):
            return route.name
    return ""


def _read_jobs(jobs_file: str) -> str:
    try:
        return Path(jobs_file).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RoutesError(f"{jobs_file}: cannot be read: {e}") from None


def _jobs_samples(jobs_file: str) -> List[Sample]:
    """The admin's pilots: one sample per ad with ClusterId and ProcId."""
    text = _read_jobs(jobs_file)
    try:
        ads = list(classad2.parseAds(text, classad2.ParserType.Old))
    except Exception as e:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        raise RoutesError(f"{jobs_file}: the job ads cannot be parsed: {e}") from None
    samples = []
    for ad in ads:
        cluster, proc = ad_value(ad, "ClusterId"), ad_value(ad, "ProcId")
        if isinstance(cluster, int) and isinstance(proc, int):
            samples.append(Sample(f"{cluster}.{proc}", "", "".join(
                f"{k} = {ad.lookup(k)}\n" for k in ad.keys())))
    if not samples:
        raise RoutesError(f"{jobs_file}: no job ad with ClusterId and ProcId (long form, a blank line between ads)")
    return samples
