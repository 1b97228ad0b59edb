"""What ``podgahp routes check`` found, as values, as text for an admin and as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gahp.core.job import PilotJob


@dataclass(frozen=True)
class Route:
    """One route as ``condor_job_router_info -config`` lists it, and where it is defined."""

    name: str
    grid_resource: str = ""
    requirements: str = ""
    max_jobs: str = ""
    max_idle_jobs: str = ""
    old_syntax: bool = False
    location: str = ""


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
    notes: Tuple[str, ...] = ()

    def as_dict(self) -> Dict[str, Any]:
        job = self.job
        return {
            "name": self.name, "job_id": self.job_id, "description": self.description, "route": self.route,
            "grid_resource": self.grid_resource, "submit_ad": self.submit_ad, "error": self.error,
            "routed_ad": self.routed_ad, "notes": list(self.notes),
            "gahp": None if job is None else {
                "queue": job.queue, "cpus": job.cpus, "memory_mb": job.memory_mb, "disk_kb": job.disk_kb,
                "gpus": job.gpus, "wall_time_s": job.wall_time_s, "whole_node": job.whole_node,
                "grid_type": job.grid_type, "settings": dict(job.settings),
                "environment": dict(job.environment),
            },
        }


@dataclass(frozen=True)
class Report:
    """The outcome of a check; ``ok`` is False when anything is in ``problems``."""

    path: str
    mode: str
    condor_version: str
    transforms: str
    routes: Tuple[Route, ...] = ()
    expected_routes: Tuple[str, ...] = ()
    samples: Tuple[SampleResult, ...] = ()
    problems: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    router_messages: Tuple[str, ...] = ()
    sources: Tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def ce(self) -> bool:
        return self.mode != "plain"

    def as_dict(self) -> Dict[str, Any]:
        return {
            "path": self.path, "mode": self.mode, "ce": self.ce, "condor_version": self.condor_version,
            "ok": self.ok, "transforms": self.transforms,
            "routes": [dataclasses.asdict(r) for r in self.routes], "expected_routes": list(self.expected_routes),
            "samples": [s.as_dict() for s in self.samples], "problems": list(self.problems),
            "warnings": list(self.warnings), "router_messages": list(self.router_messages),
            "sources": list(self.sources),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True)

    def text(self) -> str:
        lines = [f"Routes in {self.path} (HTCondor {self.condor_version}; {self.transforms})", ""]
        lines += _routes_lines(self.routes)
        for s in self.samples:
            lines += ["", f"Pilot {s.name} (job {s.job_id}){': ' + s.description if s.description else ''}"]
            lines += _sample_lines(s)
        lines += _list_section("Warnings:", [f"  - {w}" for w in self.warnings])
        lines += _problems_lines(self.problems, self.router_messages)
        lines += ["", "FAILED" if self.problems else "OK"]
        return "\n".join(lines) + "\n"


def _list_section(title: str, items: List[str]) -> List[str]:
    """A section of the report's text after an empty line, or nothing when it has no ``items``."""
    return ["", title] + items if items else []


def _problems_lines(problems: Tuple[str, ...], router_messages: Tuple[str, ...]) -> List[str]:
    """The problems' section, then the JobRouter's messages that none of them repeats (none when
    there is no problem)."""
    if not problems:
        return []
    other = [m for m in router_messages if not any(m in p for p in problems)]
    return (_list_section("Problems:", [f"  - {p}" for p in problems])
            + _list_section("Other JobRouter messages:", [f"  {m}" for m in other]))


def _routes_lines(routes: Tuple[Route, ...]) -> List[str]:
    """The routes' part of the report's text: how many and in what order, then two lines per route."""
    if not routes:
        return ["No routes."]
    order = "in no defined order (old syntax)" if any(r.old_syntax for r in routes) else "matched in this order"
    lines = [f"{len(routes)} route(s), {order}:"]
    for r in routes:
        lines.append(f"  {r.name}: GridResource \"{r.grid_resource}\"; {_limits(r)}"
                     f"{'; old syntax' if r.old_syntax else ''}{'  (' + r.location + ')' if r.location else ''}")
        lines.append(f"      requirements: {r.requirements or '(none: every job the JobRouter considers)'}")
    return lines


def _limits(r: Route) -> str:
    """The route's MaxJobs and MaxIdleJobs, those it sets."""
    return ", ".join(x for x in (f"MaxJobs {r.max_jobs}" if r.max_jobs else "",
                                 f"MaxIdleJobs {r.max_idle_jobs}" if r.max_idle_jobs else "") if x)


def _sample_lines(s: SampleResult) -> List[str]:
    if s.route is None:
        return [f"  {s.error or 'no route takes it'}"]
    lines = [f"  route          {s.route}", f"  GridResource   {s.grid_resource}"]
    job = s.job
    if job is None:
        return lines + [f"  {s.error}"] + [f"  note: {n}" for n in s.notes]
    settings = ", ".join(f"{k} = {v!r}" for k, v in sorted(job.settings.items())) or "none"
    environment = " ".join(f"{k}={v}" for k, v in job.environment) or "none"
    lines += [
        f"  queue          {job.queue or '(backend default)'}",
        f"  cpus           {job.cpus}",
        f"  memory         {_unit(job.memory_mb, 'MiB')}",
        f"  disk           {_unit(job.disk_kb, 'KiB')}",
        f"  gpus           {job.gpus}",
        f"  wall time      {_unit(job.wall_time_s, 's')}",
        f"  whole node     {'yes' if job.whole_node else 'no'}",
        f"  route settings {settings}",
        f"  environment    {environment}",
        f"  submit ad      {s.submit_ad}",
    ]
    if s.error:
        lines.append(f"  {s.error}")
    return lines + [f"  note: {n}" for n in s.notes]


def _unit(value: Optional[int], unit: str) -> str:
    return "not sent" if value is None else f"{value} {unit}"
