"""The proof of a conversion: the same pilots routed through the old routes and the converted
ones with HTCondor's own tools, and what podgahp would receive compared field by field.

* old form: each ``JOB_ROUTER_ENTRIES`` route, merged with ``JOB_ROUTER_DEFAULTS`` — behind an
  HTCondor-CE, HTCondor-CE 23.0's own defaults for that syntax
  (``gahp/data/ce-router-defaults-entries.conf``) — applied by ``condor_transform_ads`` (HTCondor's
  own reading of an old-syntax route, on 23.x and 25.x alike);
* podgahp's conversion, routed by ``condor_job_router_info`` (behind the CE's transforms of today);
* HTCondor's own conversion (``condor_transform_ads -convert``), routed the same way, so that where
  the two conversions differ the proof shows which one keeps what the old routes did.

The pilots are the check's: built-in samples and a pilot built for each route they miss.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import classad2

from gahp.core import plugins
from gahp.core.errors import InvalidJob, RoutesError
from gahp.core.job import split_env_v2
from gahp.routes.check import job_id, lay_out, parse_listing, route
from gahp.routes.macros import TOKEN_PREFIX
from gahp.routes.pilots import RouteCondition, pilot_for
from gahp.routes.report import Route
from gahp.routes.convert import (Conversion, ConvertedRoute, OldRoutes, convert_routes, mark_checks, merge,
                                 merged_defaults, old_entries, read_old_routes)
from gahp.routes.samples import SAMPLES, Sample, samples_text
from gahp.routes.sources import CE_ROUTER_EMULATION, CE_ROUTER_ENTRIES_DEFAULTS, CE_ROUTER_GENERATED, SafeConfig
from gahp.routes.submit_ad import ad_value, gahp_view, grid_type

#: What podgahp receives that the proof compares.
FIELDS: Tuple[Tuple[str, str], ...] = (
    ("queue", "queue"), ("cpus", "cores"), ("memory_mb", "memory (MiB)"), ("disk_kb", "disk (KiB)"),
    ("gpus", "GPUs"), ("wall_time_s", "wall time (s)"), ("whole_node", "whole node"),
    ("settings", "route settings"), ("environment", "environment"))
_MARK = "PodgahpOldRoute"
_OLD_KNOB = "PODGAHP_OLD_ROUTE_"


@dataclass(frozen=True)
class RouteProof:
    """The outcome for one route: pilots compared, and every difference found (none: proven).

    ``htcondor`` holds the differences of HTCondor's own conversion (None when it gave none)."""

    route: str
    pilots: Tuple[str, ...]
    differences: Tuple[str, ...]
    htcondor: Optional[Tuple[str, ...]] = None

    @property
    def proven(self) -> bool:
        return bool(self.pilots) and not self.differences


def _observed(routed: classad2.ClassAd, sample: Sample, grid_resource: str = "",
              vanilla: bool = False) -> Tuple[Dict[str, object], str]:
    """What the destination of a routed pilot receives: for a podgahp route (``batch <backend>`` of a
    registered backend) what podgahp reads from the gridmanager's submit ad; for any other route
    the routed job's own requests."""
    if grid_resource and "GridResource" not in routed:
        routed["GridResource"] = grid_resource
    resource = ad_value(routed, "GridResource")
    if not (isinstance(resource, str) and grid_type(resource)[0] in plugins.backend_names()):
        return _requests(routed, vanilla), ""
    try:
        job = gahp_view(routed, "proof_" + job_id(sample).replace(".", "_"))[1]
    except InvalidJob as e:
        return {}, f"podgahp would hold it: {e}"
    return {name: (dict(getattr(job, name)) if name in ("settings", "environment") else getattr(job, name))
            for name, _ in FIELDS}, ""


#: The slot a routed job of an HTCondor pool is matched to, for requests that depend on it
#: (a whole-node job asks for the slot's TotalCpus and TotalMemory).
SLOT = '[ TotalCpus = 16; TotalMemory = 64000; TotalGPUs = 0; Cpus = 16; Memory = 64000; Gpus = 0 ]'


def _requests(routed: classad2.ClassAd, vanilla: bool) -> Dict[str, object]:
    """A routed job's requests as its batch system reads them from the job itself, matched to a
    slot of :data:`SLOT`."""
    # Only a job routed to the vanilla universe is matched to a slot; a grid job's batch system reads it alone.
    slot = classad2.parseOne(SLOT) if vanilla else classad2.ClassAd()

    def value(name: str) -> object:
        if name not in routed:
            return None
        found = classad2.ExprTree(str(routed.lookup(name))).eval(routed, slot)
        return None if isinstance(found, classad2.Value) else found

    environment = value("Environment")
    try:
        env = dict(split_env_v2(environment)) if isinstance(environment, str) else {}
    except ValueError:
        env = {"(unparsable)": str(environment)}
    queue = value("remote_queue") if "remote_queue" in routed else value("BatchQueue")
    return {"queue": queue or None,
            "cpus": value("RequestCpus"), "memory_mb": value("RequestMemory"), "disk_kb": value("RequestDisk"),
            "gpus": value("RequestGPUs"), "wall_time_s": value("BatchRuntime"), "whole_node": value("WholeNodes"),
            "settings": value("CERequirements"), "environment": env}


def _compare(pilot: str, old: Dict[str, object], new: Dict[str, object], what: str) -> List[str]:
    return [f"pilot {pilot}: {label} {old.get(name)!r} under the old route, {new.get(name)!r} under {what}"
            for name, label in FIELDS if old.get(name) != new.get(name)]


def every_shape(routes: Sequence[Route], constraint: Optional[str]) -> List[Sample]:
    """For every route, each sample pilot's shape made to reach it: the sample with what the route's
    REQUIREMENTS ask for, and none of the earlier routes' (a shape that cannot reach it is left out)."""
    conditions = [RouteCondition(r.name, r.requirements) for r in routes]
    found: List[Sample] = []
    for index, condition in enumerate(conditions):
        for number, sample in enumerate(SAMPLES):
            built = pilot_for(condition, conditions[:index], constraint, sample, 1000 * (index + 1) + number)
            if built is not None:
                found.append(replace(built, name=sample.name, description=f"{sample.description}, {built.description}"))
    return found


def _new_form(tmp: str, text: str, mode: str, macros: str = "") -> Tuple[SafeConfig, str]:
    """The converted ``text`` laid out for ``mode``; ``macros``: definitions of the macros the
    file needs from the rest of the configuration, the values the old routes were read with."""
    os.makedirs(tmp, mode=0o711, exist_ok=True)
    path = os.path.join(tmp, "converted.conf")
    Path(path).write_text(text)
    os.chmod(path, 0o644)
    safe = SafeConfig(os.path.join(tmp, "config"))
    if macros:
        safe.add(macros)
    lay_out(safe, path, mode, "")
    return safe, path


def _routed_by_router(safe: SafeConfig, samples: Sequence[Sample], tmp: str) -> Dict[str, classad2.ClassAd]:
    return route(safe.tools(), samples, tmp)[0]


#: The JobRouter's own limits of a route that sets none, and the knobs that replace them.
_LIMITS = (("MaxJobs", "JOB_ROUTER_DEFAULT_MAX_JOBS_PER_ROUTE", 100),
           ("MaxIdleJobs", "JOB_ROUTER_DEFAULT_MAX_IDLE_JOBS_PER_ROUTE", 50))


def _old_form(old: OldRoutes, tmp: str, mode: str, samples_by_route: Dict[str, List[Sample]],
              limits: Dict[str, Tuple[str, str]]) -> Dict[str, classad2.ClassAd]:
    """Each pilot transformed by the old route it belongs to (``condor_transform_ads``); a pilot
    the old route's Requirements refuse comes back without the route's mark. ``limits`` gets each
    old route's MaxJobs and MaxIdleJobs, as the JobRouter read them."""
    safe = SafeConfig(os.path.join(tmp, "old"))
    if mode != "plain":
        safe.add("COLLECTOR_HOST = $(FULL_HOSTNAME):9619")
        safe.include_data(CE_ROUTER_EMULATION)
        safe.include_data(CE_ROUTER_ENTRIES_DEFAULTS)
        safe.include_data(CE_ROUTER_GENERATED)
    safe.include(old.path)
    if old.macros.references:
        safe.add(old.macros.proof_definitions())
    tools = safe.tools()
    defaults_text = tools.value("JOB_ROUTER_DEFAULTS") or ""
    merge_flag = (tools.value("MERGE_JOB_ROUTER_DEFAULT_ADS") or "").strip().lower() in ("true", "1", "yes", "t")
    defaults = merged_defaults(defaults_text, merge_flag) if defaults_text.strip() else classad2.ClassAd()
    knobs: List[str] = []
    names: Dict[str, str] = {}
    for index, entry in enumerate(old_entries(old)[0], start=1):
        merged = merge(defaults, entry.ad)
        name = ad_value(merged, "Name")
        clean = re.sub(r"[^A-Za-z0-9_]", "_", name) if isinstance(name, str) and name else f"Route_{index}"
        merged[f"set_{_MARK}"] = clean
        limits[clean] = tuple(_limit(merged, attribute, tools.value(knob), default)  # type: ignore[assignment]
                              for attribute, knob, default in _LIMITS)
        names[clean] = f"R{index}"
        knobs.append(f"{_OLD_KNOB}R{index} @=podgahp_old\n{old.macros.restore(repr(merged))}\n@podgahp_old\n")
    routes_file = os.path.join(safe.tmp, "old-routes.conf")
    Path(routes_file).write_text("".join(knobs))
    os.chmod(routes_file, 0o644)
    safe.include_data(Path(routes_file))
    tools = safe.tools()
    out: Dict[str, classad2.ClassAd] = {}
    for name, samples in samples_by_route.items():
        if name not in names or not samples:
            continue
        jobs = os.path.join(safe.tmp, f"pilots-{names[name]}.ads")
        Path(jobs).write_text(samples_text(samples))
        os.chmod(jobs, 0o644)
        # Its exit status is 1 even when it transformed every ad: the ads it prints tell.
        proc = tools.run(["condor_transform_ads", "-rules", f"config://{_OLD_KNOB}%s/{names[name]}", jobs])
        ads = list(classad2.parseAds(proc.stdout, classad2.ParserType.Old))
        if len(ads) != len(samples):
            raise RoutesError(safe.translate(f"condor_transform_ads could not apply the old route {name}: "
                                             f"{(proc.stdout + proc.stderr).strip()[:2000]}"))
        for ad in ads:
            cluster, proc_id = ad_value(ad, "ClusterId"), ad_value(ad, "ProcId")
            out[f"{cluster}.{proc_id}"] = ad
    return out


def _limit(route: classad2.ClassAd, attribute: str, knob: Optional[str], default: int) -> str:
    if attribute in route:
        return str(_literal_or_text(route, attribute))
    return (knob or "").strip() or str(default)


def _literal_or_text(route: classad2.ClassAd, attribute: str) -> object:
    value = route.eval(attribute)
    return str(route.lookup(attribute)) if isinstance(value, classad2.Value) else value


def _htcondor_form(old: OldRoutes, tmp: str, mode: str) -> Optional[SafeConfig]:
    """HTCondor's own conversion of the file (``condor_transform_ads -convert``), laid out like
    podgahp's; None when it converts nothing."""
    safe = SafeConfig(os.path.join(tmp, "htcondor-source"))
    safe.include(old.path)
    proc = safe.tools().run(["condor_transform_ads", "-convert"])
    sections = re.split(r"^##### JOB_ROUTER_ENTRIES(?:_FILE)? \[\d+\] #####$", proc.stdout, flags=re.M)[1:]
    blocks, names = [], []
    for index, section in enumerate(sections, start=1):
        found = re.search(r"^NAME (\S+)$", section, re.M)
        name = re.sub(r"[^A-Za-z0-9_]", "_", found.group(1)) if found else f"Route_{index}"
        names.append(name)
        body = "\n".join(f"  {line}" for line in section.strip().splitlines())
        blocks.append(f"JOB_ROUTER_ROUTE_{name} @=podgahp_htcondor\n{body}\n@podgahp_htcondor\n")
    if not blocks:
        return None
    text = "".join(blocks) + f"JOB_ROUTER_ROUTE_NAMES = {' '.join(names)}\n"
    return _new_form(os.path.join(tmp, "htcondor"), text, mode)[0]


@dataclass(frozen=True)
class _Routed:
    """The same pilots routed each way, by their job id, and the limits of the routes they took."""

    old: Dict[str, classad2.ClassAd]
    """Transformed by the old routes (a pilot the old route refuses: without the route's mark)."""
    new: Dict[str, classad2.ClassAd]
    """Routed by the converted routes."""
    htcondor: Optional[Dict[str, classad2.ClassAd]]
    """Routed by HTCondor's own conversion (None when it gave none)."""
    old_limits: Dict[str, Tuple[str, str]]
    new_limits: Dict[str, Tuple[str, str]]


def prove(old: OldRoutes, conversion: Conversion, mode: str, tmp: str) -> List[RouteProof]:
    """Route the same pilots through ``old``'s routes and ``conversion``'s; one proof per route."""
    new, _ = _new_form(os.path.join(tmp, "new"), conversion.text, mode, old.macros.proof_definitions())
    tools = new.tools()
    proc = tools.run(["condor_job_router_info", "-diagnostic", "-config"])
    routes = parse_listing(new.translate(proc.stdout + proc.stderr))
    samples = every_shape(routes, tools.value("JOB_ROUTER_SOURCE_JOB_CONSTRAINT"))
    routed = _routed_by_router(new, samples, os.path.join(tmp, "new"))
    by_route = _samples_by_route(routed, samples)
    old_limits: Dict[str, Tuple[str, str]] = {}
    old_ads = _old_form(old, tmp, mode, by_route, old_limits)
    htcondor = _htcondor_form(old, tmp, mode)
    seen = _Routed(old_ads, routed,
                   _routed_by_router(htcondor, samples, os.path.join(tmp, "htcondor")) if htcondor else None,
                   old_limits, {r.name: (r.max_jobs, r.max_idle_jobs) for r in routes})
    return [_route_proof(converted, by_route.get(converted.name, []), seen) for converted in conversion.routes]


def _samples_by_route(routed: Dict[str, classad2.ClassAd], samples: Sequence[Sample]) -> Dict[str, List[Sample]]:
    """The pilots each converted route took, by the route's name."""
    by_id = {job_id(s): s for s in samples}
    by_route: Dict[str, List[Sample]] = {}
    for source, ad in routed.items():
        name = ad_value(ad, "RouteName")
        if isinstance(name, str) and source in by_id:
            by_route.setdefault(name, []).append(by_id[source])
    return by_route


def _route_proof(converted: ConvertedRoute, samples: Sequence[Sample], seen: _Routed) -> RouteProof:
    """One route's proof: the differences of each pilot it took, then those of its limits."""
    differences: List[str] = []
    theirs: Optional[List[str]] = [] if seen.htcondor is not None else None
    for sample in samples:
        ours, their = _pilot_differences(converted, sample, seen)
        differences += ours
        if theirs is not None:
            theirs += their
    differences += _limit_differences(converted.name, seen)
    return RouteProof(converted.name, tuple(s.name for s in samples), tuple(differences),
                      tuple(theirs) if theirs is not None else None)


def _pilot_differences(converted: ConvertedRoute, sample: Sample, seen: _Routed) -> Tuple[List[str], List[str]]:
    """What differs for one pilot between the old route and the converted one, and between the old
    route and HTCondor's conversion (nothing of that when the old and converted ones cannot be compared)."""
    source = job_id(sample)
    old_ad = seen.old.get(source)
    if old_ad is None or ad_value(old_ad, _MARK) != converted.name:
        return [f"pilot {sample.name}: the old route's Requirements do not take it, the converted "
                "route's REQUIREMENTS do"], []
    vanilla = converted.universe == 5
    old_seen, old_error = _observed(old_ad, sample, converted.grid_resource, vanilla)
    new_seen, new_error = _observed(seen.new[source], sample, vanilla=vanilla)
    if old_error or new_error:
        return [f"pilot {sample.name}: {old_error or 'fine'} under the old route, "
                f"{new_error or 'fine'} under the converted one"], []
    return (_compare(sample.name, old_seen, new_seen, "the converted route"),
            _htcondor_differences(sample, old_seen, seen.htcondor, vanilla))


def _htcondor_differences(sample: Sample, old_seen: Dict[str, object],
                          htcondor: Optional[Dict[str, classad2.ClassAd]], vanilla: bool) -> List[str]:
    """What differs for one pilot between the old route and HTCondor's conversion."""
    if htcondor is None:
        return []
    their_ad = htcondor.get(job_id(sample))
    if their_ad is None:
        return [f"pilot {sample.name}: no route of HTCondor's conversion takes it"]
    their_seen, _ = _observed(their_ad, sample, vanilla=vanilla)
    return _compare(sample.name, old_seen, their_seen, "HTCondor's conversion")


def _limit_differences(name: str, seen: _Routed) -> List[str]:
    """The route's limits that differ between the old route and the converted one (not one that is a
    macro the file does not define: its value is unknown)."""
    if name not in seen.old_limits or name not in seen.new_limits:
        return []
    return [f"route limit {attribute}: {before} under the old route, {after} under the converted route"
            for (attribute, _, _), before, after in zip(_LIMITS, seen.old_limits[name], seen.new_limits[name])
            if before != after and TOKEN_PREFIX not in before]


def proof_text(proofs: Sequence[RouteProof], mode: str) -> str:
    """The proof as an admin reads it."""
    where = "behind HTCondor-CE's transforms (old: HTCondor-CE 23.0's defaults)" if mode != "plain" else "alone"
    lines = [f"Proof: the same pilots through the old and the converted routes, {where}:"]
    for proof in proofs:
        if not proof.pilots:
            lines.append(f"  {proof.route}: no pilot reached it; nothing compared")
            continue
        verdict = "same" if proof.proven else "DIFFERENT"
        lines.append(f"  {proof.route}: {verdict} for {len(proof.pilots)} pilot(s) ({', '.join(proof.pilots)})")
        lines += [f"      {d}" for d in proof.differences]
        if proof.htcondor:
            lines.append("      HTCondor's own converter (condor_transform_ads -convert) would lose this:")
            lines += [f"        {d}" for d in proof.htcondor]
    return "\n".join(lines) + "\n"


def convert_and_prove(path: str, mode: str = "emulated", proof: bool = True) -> Tuple[Conversion, List[RouteProof]]:
    """Convert the old-syntax routes of ``path`` and, unless ``proof`` is False, prove the result
    (``mode``: ``emulated`` compares behind HTCondor-CE's transforms, ``plain`` without)."""
    if not os.path.isfile(path):
        raise RoutesError(f"{path}: no such file")
    with tempfile.TemporaryDirectory(prefix="podgahp-convert-") as tmp:
        os.chmod(tmp, 0o711)  # run as root, HTCondor's tools read some files as the condor user
        safe = SafeConfig(os.path.join(tmp, "read"))
        old = read_old_routes(safe, path)
        conversion = convert_routes(old, ce=mode != "plain")
        if safe.warnings:
            conversion = Conversion(conversion.text, conversion.routes, tuple(safe.warnings) + conversion.notes,
                                    conversion.problems)
        if not proof:
            return conversion, []
        proofs = prove(old, conversion, mode, tmp)
        return mark_checks(conversion, {p.route: p.differences for p in proofs if p.differences}), proofs
