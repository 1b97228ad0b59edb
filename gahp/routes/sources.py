"""The configuration a route check or conversion reads, with nothing in it run.

HTCondor's reader runs programs for some statements (``include command : ...``, ``include : cmd |``,
a ``LOCAL_CONFIG_FILE`` ending in ``|``) and reads other sources for others (``include : file``,
``LOCAL_CONFIG_DIR``); the JobRouter runs ``JOB_ROUTER_ENTRIES_CMD`` and job hooks. ``podgahp
routes`` must read an admin's routes exactly as HTCondor does and yet never run any of that. So
:class:`SafeConfig` copies, into a private temporary directory, every file to be read, with each
such statement replaced line for line (so every other line keeps its number):

* ``include`` of a plain file: followed, pointing at a copy made the same way;
* ``include`` of a program, of a path made of macros or relative: commented out, with a warning;
* ``LOCAL_CONFIG_FILE``, ``LOCAL_CONFIG_DIR``, ``JOB_ROUTER_ENTRIES_CMD``, hook knobs: renamed
  ``PODGAHP_SAFE_<name>`` (their values stay readable, nothing acts on them);
* an assignment whose name is made of macros: commented out.

One top-level ``condor_config`` includes the copies in the order HTCondor would read the
originals; :meth:`SafeConfig.translate` maps the copies' paths in any message back to the admin's
files. On an HTCondor-CE (:func:`add_ce`) the CE's whole configuration is laid out that way: its
``condor_config``, its ``LOCAL_CONFIG_DIR`` files, and in place of its config pipe (HTCondor-CE's
``condor_ce_router_defaults`` program) podgahp's re-statement of what that program writes.

Values are never interpreted here: HTCondor reads them (:mod:`gahp.routes.tools`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import classad2

from gahp.core.errors import InvalidJob, RoutesError
from gahp.core.files import read_input
from gahp.routes.config_text import Statement, statement_at, statements
from gahp.routes.tools import Tools

#: Largest configuration file read (real ones are a few KiB).
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Most files one check reads (an HTCondor-CE has a few dozen).
MAX_FILES = 500
#: Deepest chain of includes followed (HTCondor's own limit is 20).
MAX_INCLUDE_DEPTH = 10

#: Knobs whose values HTCondor or the JobRouter would act on by running a program or reading
#: further sources; renamed in the copies.
SAFE_PREFIX = "PODGAHP_SAFE_"
#: Set by the first line of every configuration written here: HTCondor read it when it is defined.
PROBE = "PODGAHP_ROUTES_CONFIG_READ"
_NEUTRALIZED = ("LOCAL_CONFIG_FILE", "LOCAL_CONFIG_DIR", "LOCAL_ROOT_CONFIG_FILE", "USER_CONFIG_FILE",
                "JOB_ROUTER_ENTRIES_CMD", "JOB_ROUTER_HOOK_KEYWORD")

#: HTCondor-CE's own configuration and the program its config pipe runs.
CE_CONDOR_CONFIG = "/etc/condor-ce/condor_config"
CE_ROUTER_DEFAULTS_PROGRAM = "condor_ce_router_defaults"
#: Files HTCondor-CE's router-defaults program reads the OSG job environment from.
OSG_ENVIRONMENT_FILES = ("/var/lib/osg/osg-job-environment.conf", "/var/lib/osg/osg-local-job-environment.conf")
_DATA = Path(__file__).resolve().parent.parent / "data"
#: HTCondor-CE's router behaviour re-stated by podgahp (also the stand-alone pool's
#: ``config.d/01-ce-router-defaults.conf``) and what its config pipe adds (the Env transform).
CE_ROUTER_EMULATION = _DATA / "ce-router-defaults.conf"
CE_ROUTER_ENV = _DATA / "ce-router-env.conf"
#: HTCondor-CE 23.0's configuration of routes in the old JOB_ROUTER_ENTRIES syntax, and the
#: defaults its router-defaults program wrote for them, re-stated.
CE_ROUTER_ENTRIES_DEFAULTS = _DATA / "ce-router-defaults-entries.conf"
CE_ROUTER_GENERATED = _DATA / "ce-router-defaults-generated.conf"

#: HTCondor's default LOCAL_CONFIG_DIR_EXCLUDE_REGEXP (param_info.in).
_DEFAULT_EXCLUDE = (r"^((\..*)|(.*\.pl)|(.*\.py)|(.*\.sh)|(.*~)|(#.*)|(.*\.rpmsave)|(.*\.rpmnew)"
                    r"|(.*\.dpkg-old)|(.*\.dpkg-dist)|(.*\.cfsaved))$")


def _shown(line: str) -> str:
    return line.strip().encode("utf-8", "backslashreplace").decode("utf-8")[:200]


@dataclass
class Copy:
    """One file read: where it is, its safe copy, its lines and statements."""

    original: str
    copy: str
    lines: List[str]
    statements: List[Statement] = field(default_factory=list)


class SafeConfig:
    """Safe copies of configuration files and the top-level configuration that reads them.

    ``handled`` names knobs of :data:`_NEUTRALIZED` that the caller lays out itself (the CE's
    ``LOCAL_CONFIG_DIR``): no warning is given for them."""

    def __init__(self, tmp: str, handled: Sequence[str] = ()) -> None:
        self.tmp = tmp
        self.handled = {h.upper() for h in handled}
        self.copies: Dict[str, Copy] = {}
        self.warnings: List[str] = []
        self.parts: List[str] = ["## Written by podgahp routes: the files below are safe copies.\n",
                                 f"{PROBE} = True\n"]
        # Run as root, HTCondor's tools read some files as the condor user: the directories may be
        # crossed and the files read by others (they are copies of configuration files).
        os.makedirs(tmp, mode=0o711, exist_ok=True)
        os.chmod(tmp, 0o711)
        os.makedirs(os.path.join(tmp, "src"), mode=0o711, exist_ok=True)
        os.chmod(os.path.join(tmp, "src"), 0o711)

    # --------------------------------------------------------------------------------------
    # copies

    def copy_file(self, path: str, depth: int = 0) -> str:
        """The safe copy of ``path`` (made once), following its plain-file includes."""
        path = os.path.abspath(path)
        if path in self.copies:
            return self.copies[path].copy
        if len(self.copies) >= MAX_FILES:
            raise RoutesError(f"{path}: more than {MAX_FILES} configuration files to read")
        try:
            data = read_input(path, "configuration file", MAX_FILE_BYTES, "a configuration file")
        except InvalidJob as e:
            raise RoutesError(str(e)) from None
        if b"\0" in data:
            raise RoutesError(f"{path}: not a configuration file (it holds NUL bytes)")
        lines = data.decode("utf-8", "surrogateescape").splitlines()
        copy = os.path.join(self.tmp, "src", f"{len(self.copies) + 1:03d}-{os.path.basename(path)}")
        entry = Copy(path, copy, lines, statements(lines))
        self.copies[path] = entry
        out = list(lines)
        for statement in entry.statements:
            self._make_safe(entry, statement, out, depth)
        Path(copy).write_bytes("\n".join(out).encode("utf-8", "surrogateescape") + b"\n")
        os.chmod(copy, 0o644)
        return copy

    def _make_safe(self, entry: Copy, statement: Statement, out: List[str], depth: int) -> None:
        where = f"{entry.original}:{statement.first + 1}"
        text = _shown(entry.lines[statement.first])
        if statement.kind == "include":
            target = self._include_target(entry, statement, depth)
            if target is None:
                _comment_out(out, statement)
            elif target:
                at = "@" if entry.lines[statement.first].lstrip().startswith("@") else ""
                out[statement.first] = f"{at}include {statement.words} : {target}".replace("  ", " ")
                for index in range(statement.first + 1, statement.last + 1):
                    out[index] = "#"
            return
        if statement.kind not in ("assign", "block"):
            return
        if "$" in statement.name:
            self.warnings.append(f"{where}: an assignment whose name is made of macros is not read (podgahp "
                                 f"cannot tell beforehand what it sets): {text}")
            _comment_out(out, statement)
            return
        knob = statement.knob
        if knob in _NEUTRALIZED or "_HOOK_" in knob:
            _rename(out, statement, knob)
            if knob not in self.handled:
                self.warnings.append(f"{where}: {knob} not followed (podgahp reads only the routes, never "
                                     f"what this would run or read): {text}")

    def _include_target(self, entry: Copy, statement: Statement, depth: int) -> Optional[str]:
        """The path an include should read (a safe copy, or the original when it does not exist),
        or None when it is not followed (a warning says why)."""
        where = f"{entry.original}:{statement.first + 1}"
        text = _shown(entry.lines[statement.first])
        words = statement.words.lower().split()
        target = statement.rhs
        if {"command", "output", "into"} & set(words) or target.rstrip().endswith("|"):
            self.warnings.append(f"{where}: include of a program not run (podgahp never runs what a "
                                 f"configuration names): {text}")
            return None
        if "$" in target:
            self.warnings.append(f"{where}: include of a path made of macros not followed (podgahp cannot tell "
                                 f"beforehand whether it names a program); write the path out: {text}")
            return None
        if not os.path.isabs(target):
            self.warnings.append(f"{where}: include of a relative path not followed (HTCondor would look for it "
                                 f"from the daemon's working directory); write an absolute path: {text}")
            return None
        if depth + 1 > MAX_INCLUDE_DEPTH:
            raise RoutesError(f"{where}: includes nested deeper than {MAX_INCLUDE_DEPTH}")
        if not os.path.exists(target):
            return target  # HTCondor reports it (or skips it: ifexist) at the admin's own line
        return self.copy_file(target, depth + 1)

    # --------------------------------------------------------------------------------------
    # the top-level configuration

    def include(self, path: str) -> None:
        """Read the safe copy of ``path`` next."""
        self.parts.append(f"include : {self.copy_file(path)}\n")

    def include_data(self, path: Path) -> None:
        """Read one of podgahp's own files next (no copy: they hold no program)."""
        self.parts.append(f"include : {path}\n")

    def add(self, text: str) -> None:
        self.parts.append(text if text.endswith("\n") else text + "\n")

    def write(self, name: str = "condor_config") -> str:
        path = os.path.join(self.tmp, name)
        Path(path).write_text("".join(self.parts))
        os.chmod(path, 0o644)
        return path

    def tools(self, name: str = "condor_config") -> Tools:
        """HTCondor's tools reading the configuration as laid out so far."""
        return Tools(self.write(name), self.translate)

    # --------------------------------------------------------------------------------------
    # paths and lines as the admin sees them

    def translate(self, text: str) -> str:
        """``text`` with every copy's path replaced by its original's."""
        for entry in self.copies.values():
            text = text.replace(entry.copy, entry.original)
        return text

    def statement(self, path: str, line: int) -> Optional[Statement]:
        """The statement of original file ``path`` spanning 1-based ``line``."""
        entry = self.copies.get(os.path.abspath(path))
        return None if entry is None else statement_at(entry.statements, line - 1)

    def location(self, path: str, line: int) -> str:
        """``file:line`` of the statement spanning ``line`` (a block's first line, where HTCondor
        names its closing one)."""
        found = self.statement(path, line)
        return f"{path}:{found.first + 1 if found else line}"


def _comment_out(out: List[str], statement: Statement) -> None:
    for index in range(statement.first, statement.last + 1):
        out[index] = "# (not read by podgahp) " + out[index].lstrip()


def _rename(out: List[str], statement: Statement, knob: str) -> None:
    """Rename ``knob`` to SAFE_PREFIX + knob in the statement, references to itself included."""
    reference = re.compile(r"\$\(\s*" + re.escape(knob) + r"(?=\s*[:)])", re.IGNORECASE)
    first = out[statement.first]
    head = re.compile(r"^(\s*@?(?:[A-Za-z0-9_]+\.)?)" + re.escape(knob), re.IGNORECASE)
    out[statement.first] = head.sub(lambda m: m.group(1) + SAFE_PREFIX + knob, first, count=1)
    for index in range(statement.first, statement.last + 1):
        out[index] = reference.sub("$(" + SAFE_PREFIX + knob, out[index])


# --------------------------------------------------------------------------------------------
# An HTCondor-CE's whole configuration


@dataclass(frozen=True)
class CeLayout:
    """What :func:`add_ce` read: the CE's condor_config, its configuration directories and files
    in reading order, and what stood in for its config pipe."""

    condor_config: str
    directories: Tuple[str, ...]
    files: Tuple[str, ...]
    pipe: str = ""


def config_dir_files(directory: str, exclude: Optional[str]) -> List[str]:
    """The files HTCondor reads from a LOCAL_CONFIG_DIR entry, in its order (sorted full paths,
    directories skipped, names matching LOCAL_CONFIG_DIR_EXCLUDE_REGEXP skipped)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    try:
        pattern = re.compile(exclude if exclude is not None else _DEFAULT_EXCLUDE)
    except re.error:
        pattern = re.compile(_DEFAULT_EXCLUDE)
    files = [os.path.join(directory, n) for n in names
             if not os.path.isdir(os.path.join(directory, n)) and not pattern.match(n)]
    return sorted(files)


def add_ce(safe: SafeConfig, condor_config: str, routes_file: Optional[str] = None) -> CeLayout:
    """Lay out the HTCondor-CE configuration rooted at ``condor_config`` in ``safe``, in the order
    HTCondor reads it (the file, its LOCAL_CONFIG_DIR, its LOCAL_CONFIG_FILE), with the config pipe
    of HTCondor-CE's router-defaults program replaced by podgahp's re-statement of its output.

    ``routes_file``, if given, is read as if it were in the CE's last configuration directory
    (in place of a file of the same name there)."""
    condor_config = os.path.abspath(condor_config)
    if not os.path.isfile(condor_config):
        raise RoutesError(f"{condor_config}: no HTCondor-CE configuration here (give the CE's condor_config "
                          "with --ce-config, or check the routes file alone with --emulated-ce)")
    safe.add(f"CONFIG_ROOT = {os.path.dirname(condor_config)}\n")
    safe.include(condor_config)
    tools = safe.tools()
    directories = _split(tools.value(SAFE_PREFIX + "LOCAL_CONFIG_DIR"))
    exclude = tools.value("LOCAL_CONFIG_DIR_EXCLUDE_REGEXP")
    files: List[str] = []
    for index, directory in enumerate(directories):
        listed = config_dir_files(directory, exclude)
        if routes_file is not None and index == len(directories) - 1:
            name = os.path.basename(routes_file)
            listed = sorted([f for f in listed if os.path.basename(f) != name] + [os.path.abspath(routes_file)],
                            key=lambda f: os.path.join(directory, os.path.basename(f)))
        files += listed
    if routes_file is not None and not directories:
        files.append(os.path.abspath(routes_file))
    for path in files:
        safe.include(path)
    pipe = _add_local_config_file(safe, safe.tools().value(SAFE_PREFIX + "LOCAL_CONFIG_FILE"))
    return CeLayout(condor_config, tuple(directories), tuple(files), pipe)


def _split(value: Optional[str]) -> List[str]:
    return [v for v in re.split(r"[,\s]+", value or "") if v]


def _add_local_config_file(safe: SafeConfig, value: Optional[str]) -> str:
    """Read the CE's LOCAL_CONFIG_FILE (after its directories, as HTCondor does). A config pipe of
    HTCondor-CE's router-defaults program is replaced by podgahp's re-statement of its output; any
    other program is not run (a warning says so). Returns what stood in for a pipe."""
    if not value or not value.strip():
        return ""
    if value.rstrip().endswith("|"):
        command = value.rstrip()[:-1].split()
        if command and os.path.basename(command[0]) == CE_ROUTER_DEFAULTS_PROGRAM and len(command) == 1:
            safe.include_data(CE_ROUTER_ENV)
            safe.include_data(CE_ROUTER_GENERATED)  # what the program of HTCondor-CE 23.0 also wrote
            safe.add(f"PODGAHP_CE_OSG_ENVIRONMENT = {osg_environment()}\n")
            return f"{CE_ROUTER_ENV} (podgahp's re-statement of {command[0]}, which is not run)"
        safe.warnings.append(f"LOCAL_CONFIG_FILE = {_shown(value)}: program not run (podgahp never runs what a "
                             "configuration names); what it would add is missing from this check")
        return ""
    for path in _split(value):
        if os.path.isfile(path):
            safe.include(path)
    return ""


def osg_environment(files: Sequence[str] = OSG_ENVIRONMENT_FILES) -> str:
    """The OSG job environment as HTCondor-CE's router-defaults program builds it from ``files``:
    the exported ``NAME=value`` lines (a value ``$VAR`` or ``"$VAR"`` taken from this process's
    environment), in condor_submit's environment syntax, as a ClassAd string literal."""
    env: Dict[str, str] = {}
    for path in files:
        try:
            text = read_input(path, "OSG environment file", MAX_FILE_BYTES, "an OSG environment file").decode(
                "utf-8", "replace")
        except InvalidJob:
            continue
        exported, values = set(), {}
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("#"):
                continue
            export = re.match(r"^export\s+([A-Za-z_]\w*)", line)
            if export:
                exported.add(export.group(1))
            assignment = re.search(r"([A-Za-z_]\w*)=(.+)", line)
            if assignment:
                name, value = assignment.groups()
                variable = re.match(r'^"?\$(\w*)"?', value)
                if variable:
                    if os.environ.get(variable.group(1)):
                        values[name] = os.environ[variable.group(1)]
                else:
                    values[name] = value
        env.update({k: v for k, v in values.items() if k in exported})
    return str(classad2.quote(" ".join(f"{name}={_environment_value(value)}" for name, value in env.items())))


def _environment_value(value: str) -> str:
    """A value in condor_submit's environment syntax: single-quoted, quotes doubled."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    value = value.replace("\\", "").replace('"', '""').replace("'", "''")
    return f"'{value}'"
