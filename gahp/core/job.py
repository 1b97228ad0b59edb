"""The pilot job model: what one submit ad asks for.

Owns parsing the gridmanager's submit ClassAd (through the ``classad2`` bindings) into an immutable
:class:`PilotJob`, with HTCondor's argument and environment syntaxes and the CE's ``CERequirements``.
The state a backend reports is :mod:`gahp.core.jobstate`. Knows nothing about the wire format or any backend.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Tuple, Union

import classad2

from gahp.core.errors import InvalidJob
from gahp.core.outputs import inside

Scalar = Union[str, int, float, bool]

#: Prefix the gridmanager puts before the sandbox id in ``JobDirectory``.
JOB_DIRECTORY_PREFIX = "home_bl_"


@dataclass(frozen=True)
class PilotJob:
    """One pilot as the gridmanager's submit ad describes it. Paths are absolute."""

    executable: str
    """``Cmd``: the (staged) executable; the gridmanager always sends an absolute path."""
    iwd: str
    """``Iwd``: the job's working directory on this machine; relative paths are resolved in it."""
    sandbox_id: str
    """``JobDirectory`` without its ``home_bl_`` prefix: stable across hold/release and restarts."""
    arguments: Tuple[str, ...] = ()
    """V2 ``Arguments`` split with HTCondor's quoting rules, else V1 ``Args`` split on whitespace."""
    environment: Tuple[Tuple[str, str], ...] = ()
    """V2 ``Environment``, else V1 ``Env``/``EnvDelim``, as ordered (name, value) pairs."""
    stdin: Optional[str] = None
    """``In`` unless it is ``/dev/null``."""
    stdout: Optional[str] = None
    """``Out``: where the pilot's standard output must be written back."""
    stderr: Optional[str] = None
    """``Err``: where the pilot's standard error must be written back."""
    transfer_input: Tuple[str, ...] = ()
    """``TransferInput`` entries (paths resolved in ``Iwd``; URLs kept as they are)."""
    proxy: Optional[str] = None
    """``x509userproxy``: the pilot's X.509 proxy file, if any."""
    queue: Optional[str] = None
    """``Queue`` (a route's ``BatchQueue``); None selects the backend's default queue."""
    cpus: int = 1
    """Cores: ``RequestCpus`` from CERequirements, else ``SMPGranularity``/``HostSMPSize``, else ``NodeNumber``."""
    memory_mb: Optional[int] = None
    """``RequestMemory`` in MiB."""
    disk_kb: Optional[int] = None
    """``RequestDisk`` from CERequirements, in KiB."""
    gpus: int = 0
    """``GPUNumber`` (the job's ``RequestGPUs``)."""
    wall_time_s: Optional[int] = None
    """``BatchRuntime`` in seconds."""
    whole_node: bool = False
    """``WholeNodes`` (a copy of the pilot's ``WantWholeNode``)."""
    grid_type: Optional[str] = None
    """``gridtype``: the batch type of ``GridResource`` (``k8s``, ``lancium``)."""
    settings: Mapping[str, Scalar] = field(default_factory=dict)
    """Every other ``Name == literal`` conjunct of ``CERequirements``, names lower-cased."""

    @property
    def job_directory(self) -> str:
        return JOB_DIRECTORY_PREFIX + self.sandbox_id

    def setting(self, name: str, default: Optional[Scalar] = None) -> Optional[Scalar]:
        """A route-provided setting by (case-insensitive) name."""
        return self.settings.get(name.lower(), default)


# --------------------------------------------------------------------------------------------
# HTCondor argument and environment syntaxes (condor_arglist.cpp / env.cpp rules, see the manual
# "arguments" and "environment" submit commands).

_WHITESPACE = " \t\r\n"


def split_args_v2(text: str) -> List[str]:
    """Split V2 raw arguments: whitespace separates, single quotes group, ``''`` is a quote."""
    args: List[str] = []
    current: List[str] = []
    in_token = False
    i = 0
    while i < len(text):
        c = text[i]
        if c in _WHITESPACE:
            if in_token:
                args.append("".join(current))
                current, in_token = [], False
            i += 1
            continue
        in_token = True
        if c != "'":
            current.append(c)
            i += 1
            continue
        i += 1  # inside a quoted section
        while True:
            if i >= len(text):
                raise ValueError("unbalanced single quote")
            if text[i] == "'":
                if i + 1 < len(text) and text[i + 1] == "'":
                    current.append("'")
                    i += 2
                    continue
                i += 1
                break
            current.append(text[i])
            i += 1
    if in_token:
        args.append("".join(current))
    return args


def split_args_v1(text: str) -> List[str]:
    """Split V1 raw arguments (Unix): whitespace only, no quoting."""
    return text.split()


def _env_pair(entry: str) -> Tuple[str, str]:
    name, sep, value = entry.partition("=")
    if not sep or not name:
        raise ValueError(f"entry {entry!r} is not NAME=VALUE")
    return name, value


def split_env_v2(text: str) -> List[Tuple[str, str]]:
    """Split a V2 environment: V2 argument rules, each token ``NAME=VALUE``."""
    return [_env_pair(token) for token in split_args_v2(text)]


def split_env_v1(text: str, delimiter: str = ";") -> List[Tuple[str, str]]:
    """Split a V1 environment: entries separated by ``delimiter``."""
    return [_env_pair(entry) for entry in text.split(delimiter) if entry.strip()]


# --------------------------------------------------------------------------------------------
# CERequirements: top-level "Name == literal" conjuncts of the expression the gridmanager built.

_CONJUNCT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*==\s*(.+?)\s*$", re.DOTALL)


def _split_top_level_and(text: str) -> Iterator[str]:
    """Split unparsed ClassAd text on ``&&`` outside string literals and brackets."""
    depth, start, i, quote = 0, 0, 0, ""
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "&" and depth == 0 and text.startswith("&&", i):
            yield text[start:i]
            start = i + 2
            i += 1
        i += 1
    yield text[start:]


def _literal(text: str) -> Optional[Scalar]:
    """The value of ``text`` if it is a ClassAd literal (no attribute references), else None."""
    try:
        expr = classad2.ExprTree(text)
    except Exception:  # noqa: BLE001 - the bindings raise a bare exception type on parse errors
        return None
    if any(classad2.ClassAd().externalRefs(expr)):  # a literal gives [''] here
        return None
    value = expr.eval()
    if isinstance(value, (str, int, float, bool)):
        return value
    return None


def ce_requirements(text: str) -> Dict[str, Scalar]:
    """Map each top-level ``Name == literal`` conjunct of ``text`` to its value (names lower-cased)."""
    pairs: Dict[str, Scalar] = {}
    for part in _split_top_level_and(text):
        part = part.strip()
        while part.startswith("(") and part.endswith(")"):
            part = part[1:-1].strip()
        match = _CONJUNCT.match(part)
        if not match:
            continue
        value = _literal(match.group(2))
        if value is not None:
            pairs[match.group(1).lower()] = value
    return pairs


# --------------------------------------------------------------------------------------------
# The submit ad.


class _Ad:
    """Typed, case-insensitive reads of one parsed ad; every failure names the attribute."""

    def __init__(self, ad: classad2.ClassAd) -> None:
        self._ad = ad

    def has(self, name: str) -> bool:
        return name in self._ad and self._value(name) is not None

    def _value(self, name: str) -> object:
        if name not in self._ad:
            return None
        value = self._ad.eval(name)
        if isinstance(value, classad2.Value):  # undefined or error
            if value == classad2.Value.Error:
                raise InvalidJob(f"submit ad attribute {name} evaluates to an error")
            return None
        return value

    def string(self, name: str, required: bool = False) -> Optional[str]:
        value = self._value(name)
        if value is None:
            if required:
                raise InvalidJob(f"submit ad has no {name}")
            return None
        if not isinstance(value, str):
            raise InvalidJob(f"submit ad attribute {name} = {value!r} is not a string")
        if required and not value:
            raise InvalidJob(f"submit ad attribute {name} is empty")
        return value

    def boolean(self, name: str) -> bool:
        value = self._value(name)
        if value is None:
            return False
        if not isinstance(value, (bool, int)):
            raise InvalidJob(f"submit ad attribute {name} = {value!r} is not a boolean")
        return bool(value)

    def integer(self, name: str, minimum: int = 0) -> Optional[int]:
        return whole_number(name, self._value(name), minimum)


def whole_number(name: str, value: object, minimum: int = 0) -> Optional[int]:
    """``value`` as an int >= ``minimum`` (reals rounded up), None if absent; InvalidJob otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidJob(f"{name} = {value!r} is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJob(f"{name} = {value!r} is not a finite number")
        value = math.ceil(value)
    if value < minimum:
        raise InvalidJob(f"{name} = {value} is below the minimum of {minimum}")
    return int(value)


def _resolve(iwd: str, path: Optional[str]) -> Optional[str]:
    if path is None or path == "" or path == "/dev/null":
        return None
    if "://" in path or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(iwd, path))


def _output(iwd: str, name: str, path: Optional[str]) -> Optional[str]:
    """``Out``/``Err`` resolved in ``Iwd``; InvalidJob when it lies outside it (outputs are written only
    inside the job's directory, :mod:`gahp.core.outputs`)."""
    resolved = _resolve(iwd, path)
    if resolved is None:
        return None
    try:
        if "://" in resolved:
            raise OSError(resolved)
        inside(iwd, resolved)
    except OSError:
        raise InvalidJob(f"{name} = {path!r} is not inside the job's directory (Iwd = {iwd!r}): podgahp writes "
                         f"a pilot's outputs only there") from None
    return resolved


#: Most operator characters outside string literals in a submit ad (real ones have a few hundred).
MAX_AD_OPERATORS = 4096
_OPERATOR_CHARS = frozenset("+-*/%&|^!<>=?:~")


def _operator_count(text: str) -> int:
    """Operator characters of a ClassAd's text, string literals skipped."""
    count, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in _OPERATOR_CHARS:
            count += 1
    return count


def parse_submit_ad(text: str) -> PilotJob:
    """Parse the (unescaped) submit ad of ``BLAH_JOB_SUBMIT``; raises :class:`InvalidJob`."""
    parsed = _parse_ad(text)
    ad = _Ad(parsed)
    executable, iwd, sandbox_id = _where(ad)
    arguments, environment = _command_line(ad)

    settings: Dict[str, Scalar] = {}
    if "CERequirements" in parsed:
        settings = ce_requirements(str(parsed.lookup("CERequirements")))
    cpus = whole_number("CERequirements RequestCpus", settings.pop("requestcpus", None), 1)
    disk_kb = whole_number("CERequirements RequestDisk", settings.pop("requestdisk", None), 0)
    if cpus is None:
        for name in ("SMPGranularity", "HostSMPSize", "NodeNumber"):
            cpus = ad.integer(name, minimum=1)
            if cpus is not None:
                break

    transfer_input = tuple(
        _resolve(iwd, entry.strip()) or "" for entry in (ad.string("TransferInput") or "").split(",")
        if entry.strip())
    proxy = ad.string("x509userproxy")

    return PilotJob(
        executable=_resolve(iwd, executable) or executable,
        iwd=iwd,
        sandbox_id=sandbox_id,
        arguments=tuple(arguments),
        environment=tuple(environment),
        stdin=_resolve(iwd, ad.string("In")),
        stdout=_output(iwd, "Out", ad.string("Out")),
        stderr=_output(iwd, "Err", ad.string("Err")),
        transfer_input=transfer_input,
        proxy=_resolve(iwd, proxy) if proxy else None,
        queue=ad.string("Queue") or None,
        cpus=cpus or 1,
        memory_mb=ad.integer("RequestMemory", minimum=1),
        disk_kb=disk_kb,
        gpus=ad.integer("GPUNumber") or 0,
        wall_time_s=ad.integer("BatchRuntime", minimum=1),
        whole_node=ad.boolean("WholeNodes"),
        grid_type=ad.string("gridtype") or None,
        settings=settings,
    )


def _parse_ad(text: str) -> classad2.ClassAd:
    operators = _operator_count(text)
    if operators > MAX_AD_OPERATORS:
        # The ClassAd parser recurses per operator: a hostile ad of ~150,000 of them crashes it.
        raise InvalidJob(f"submit ad has {operators} operators outside strings, more than the "
                         f"{MAX_AD_OPERATORS} a pilot's ad can need")
    try:
        parsed = classad2.parseNext(text) if text.strip().startswith("[") else None
    except (ValueError, RuntimeError) as e:
        raise InvalidJob(f"submit ad is not a valid ClassAd: {str(e)[:200]}") from None
    if parsed is None:
        raise InvalidJob("submit ad is not a valid ClassAd")
    return parsed


def _where(ad: _Ad) -> Tuple[str, str, str]:
    """The pilot's executable, its absolute Iwd, and its sandbox id (from JobDirectory)."""
    executable = ad.string("Cmd", required=True)
    iwd = ad.string("Iwd", required=True)
    job_directory = ad.string("JobDirectory", required=True)
    assert executable is not None and iwd is not None and job_directory is not None
    if not os.path.isabs(iwd):
        raise InvalidJob(f"submit ad attribute Iwd = {iwd!r} is not an absolute path")
    sandbox_id = job_directory[len(JOB_DIRECTORY_PREFIX):] if job_directory.startswith(
        JOB_DIRECTORY_PREFIX) else job_directory
    if not sandbox_id or any(c.isspace() for c in sandbox_id):
        raise InvalidJob(f"submit ad attribute JobDirectory = {job_directory!r} is not a sandbox id")
    return executable, iwd, sandbox_id


def _command_line(ad: _Ad) -> Tuple[List[str], List[Tuple[str, str]]]:
    """Arguments and environment, in whichever of the two syntaxes the ad uses."""
    try:
        if ad.has("Arguments"):
            arguments = split_args_v2(ad.string("Arguments") or "")
        else:
            arguments = split_args_v1(ad.string("Args") or "")
    except ValueError as e:
        raise InvalidJob(f"submit ad attribute Arguments cannot be parsed: {e}") from e
    try:
        if ad.has("Environment"):
            environment = split_env_v2(ad.string("Environment") or "")
        else:
            delimiter = ad.string("EnvDelim") or ";"
            environment = split_env_v1(ad.string("Env") or "", delimiter[:1] or ";")
    except ValueError as e:
        raise InvalidJob(f"submit ad environment cannot be parsed: {e}") from e
    return arguments, environment
