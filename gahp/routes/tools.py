"""HTCondor's own tools, run on one configuration that podgahp wrote (nothing from the caller's
environment), with their answers read back: values and where they were set
(``condor_config_val``), the routes and the routed jobs (``condor_job_router_info``), and route
transforms applied to job ads (``condor_transform_ads``).

Must not know which files the configuration holds: :mod:`gahp.routes.sources` writes it and maps
the paths of its copies back to the admin's files (``translate``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import classad2

from gahp.core.errors import RoutesError
from gahp.routes.submit_ad import ad_value

_VERSION = re.compile(r"\$CondorVersion:\s*(\d+\.\d+\.\d+)")
_AT = re.compile(r"^\s*# at: (.*), line (\d+)\s*$")
_ATTRIBUTE_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*\s*=")
#: Longest a tool may take (the tools read a few files and route a few dozen ads).
TOOL_TIMEOUT_SECONDS = 120
#: Most output read from one tool run (routed ads of thousands of pilots stay well below).
MAX_OUTPUT_CHARS = 64 * 1024 * 1024


class Tools:
    """The tools of the HTCondor on ``PATH``, each run with ``CONDOR_CONFIG=condor_config``."""

    def __init__(self, condor_config: str, translate: Callable[[str], str] = lambda text: text) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.upper().startswith("_CONDOR_")}
        self.env["CONDOR_CONFIG"] = condor_config
        self.translate = translate

    def run(self, argv: Sequence[str], stdin: Optional[str] = None) -> "subprocess.CompletedProcess[str]":
        exe = shutil.which(argv[0], path=self.env.get("PATH"))
        if exe is None:
            raise RoutesError(f"{argv[0]} not found on PATH: run this where HTCondor's tools are installed "
                              "(the CE, or any machine with HTCondor 23 or later)")
        try:
            proc = subprocess.run([exe, *argv[1:]], env=self.env, input=stdin, capture_output=True, text=True,
                                  errors="replace", timeout=TOOL_TIMEOUT_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            raise RoutesError(f"{argv[0]} did not finish within {TOOL_TIMEOUT_SECONDS} s") from None
        except OSError as e:
            raise RoutesError(f"{argv[0]} could not be run: {e.strerror}") from e
        if len(proc.stdout) + len(proc.stderr) > MAX_OUTPUT_CHARS:
            raise RoutesError(f"{argv[0]} wrote more than {MAX_OUTPUT_CHARS} characters")
        return proc

    def value(self, name: str) -> Optional[str]:
        """The value HTCondor gives ``name`` (None when undefined), with trailing blanks kept."""
        proc = self.run(["condor_config_val", name])
        if proc.returncode != 0:
            return None
        out = proc.stdout
        return out[:-1] if out.endswith("\n") else out

    def raw(self, name: str) -> Optional[str]:
        """``name``'s value as written, its macros not expanded (None when undefined)."""
        proc = self.run(["condor_config_val", "-raw", name])
        if proc.returncode != 0:
            return None
        out = proc.stdout
        return out[:-1] if out.endswith("\n") else out

    def config_error(self, probe: str) -> Optional[str]:
        """HTCondor's own message when the configuration does not read at all, else None (knob
        ``probe`` is set by the configuration's first line)."""
        proc = self.run(["condor_config_val", probe])
        if proc.returncode == 0:
            return None
        return self.translate((proc.stdout + proc.stderr).strip())

    def where(self, name: str) -> Optional[Tuple[str, int]]:
        """(file, line) of the assignment HTCondor took ``name`` from, file as the caller sees it.

        For a ``NAME @=tag`` block HTCondor names its closing line."""
        proc = self.run(["condor_config_val", "-v", name])
        for line in proc.stdout.splitlines():
            match = _AT.match(line)
            if match:
                return self.translate(match.group(1)), int(match.group(2))
        return None

    def locations(self, prefix: str) -> Dict[str, Tuple[str, str, int]]:
        """Every defined knob whose name starts with ``prefix``: upper-case name -> (name as
        written, file, line). For a ``NAME @=tag`` block HTCondor names its closing line."""
        proc = self.run(["condor_config_val", "-dump", "-v", prefix])
        found: Dict[str, Tuple[str, str, int]] = {}
        name = ""
        for line in proc.stdout.splitlines():
            start = re.match(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(=|@=)", line)
            if start:
                name = start.group(1)
                continue
            match = _AT.match(line)
            if match and name.upper().startswith(prefix.upper()):
                found[name.upper()] = (name, self.translate(match.group(1)), int(match.group(2)))
                name = ""
        return found

    def names(self, prefix: str) -> List[str]:
        """Every defined knob whose name starts with ``prefix`` (HTCondor's spelling)."""
        proc = self.run(["condor_config_val", "-dump", prefix])
        found = []
        for line in proc.stdout.splitlines():
            match = re.match(r"^([A-Za-z_][A-Za-z0-9_.]*)\s*(=|@=)", line)
            if match and match.group(1).upper().startswith(prefix.upper()):
                found.append(match.group(1))
        return found

    def version(self) -> str:
        match = _VERSION.search(self.run(["condor_version"]).stdout)
        return match.group(1) if match else "(unknown version)"

    def route_jobs(self, jobs_file: str) -> Tuple[Dict[str, classad2.ClassAd], List[str]]:
        """Routed ads by source job id (``RoutedFromJobId``) and the other lines the router printed
        (every step of every route applied, and why one failed).

        The routed ads come on stderr (``-route-jobs -2``): a file would be written by the ``condor``
        user when the tool runs as root."""
        proc = self.run(["condor_job_router_info", "-log-steps", "-route-jobs", "-2", "-jobads", jobs_file])
        messages = [line for line in proc.stdout.splitlines() if line.strip()]
        if proc.returncode != 0:
            raise RoutesError(self.translate(
                f"condor_job_router_info -route-jobs failed (exit {proc.returncode}): "
                + "\n".join(messages + proc.stderr.splitlines())))
        routed: Dict[str, classad2.ClassAd] = {}
        block: List[str] = []
        for line in proc.stderr.splitlines() + [""]:
            if _ATTRIBUTE_LINE.match(line):
                block.append(line)
                continue
            if block:
                ad = classad2.parseOne("\n".join(block), classad2.ParserType.Old)
                source = ad_value(ad, "RoutedFromJobId")
                if isinstance(source, str):
                    routed[source] = ad
                block = []
            if line.strip():
                messages.append(line.strip())
        return routed, [self.translate(m) for m in messages]
