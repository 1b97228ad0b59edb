"""HTCondor configuration: the one module that reads knobs, and the server's own settings.

Knobs come from the configuration the GAHP inherits through ``CONDOR_CONFIG`` (on a CE,
``/etc/condor-ce/condor_config``), read with the ``htcondor2`` bindings. Every read names the knob,
so a bad value fails with the knob, the value and the expected form. Backends build their own
settings from a :class:`Knobs` in their own modules; nothing else calls ``htcondor2.param``.
"""

from __future__ import annotations

import logging
import math
import os
import pwd
import sys
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional, TypeVar

from gahp.core.errors import ConfigError

T = TypeVar("T")

_TRUE = {"true", "yes", "1", "t", "y", "on"}
_FALSE = {"false", "no", "0", "f", "n", "off"}


def _condor_param() -> Mapping[str, str]:
    import htcondor2  # imported lazily: reading the config is the only thing we need it for

    param: Mapping[str, str] = htcondor2.param
    return param


#: Largest value of any numeric knob (seconds, bytes, counts): larger ones are typing mistakes, and
#: would overflow timeouts and sleeps.
MAX_KNOB_VALUE = 10 ** 12


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


#: The HTCondor-CE's configuration: its ``condor_ce_*`` tools set ``CONDOR_CONFIG`` to it.
CE_CONDOR_CONFIG = "/etc/condor-ce/condor_config"

#: Where HTCondor reads its configuration when ``CONDOR_CONFIG`` is not set, in its order
#: (the HTCondor manual, "Ordered Evaluation to Set the Configuration"; ``~condor`` is added at run time).
HTCONDOR_CONFIGS = ("/etc/condor/condor_config", "/usr/local/etc/condor_config")


@dataclass(frozen=True)
class ConfigSource:
    """Which HTCondor configuration a command reads, and why: said in every error that may come
    from reading the wrong one."""

    path: Optional[str]
    """The file (or ``ONLY_ENV``); None when there is none."""
    why: str
    """How it was chosen: ``--condor-config``, ``CONDOR_CONFIG``, the CE's, HTCondor's default."""

    def describe(self) -> str:
        if self.path is None:
            return f"no HTCondor configuration ({self.why})"
        return f"HTCondor configuration {self.path} ({self.why})"

    @property
    def is_ce(self) -> bool:
        return self.why.startswith("the HTCondor-CE's")


def find_config(explicit: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
                exists: Callable[[str], bool] = os.path.isfile) -> ConfigSource:
    """The configuration a CE-side tool (``podgahp q``, ``reap``, ``health``, ``provision``, ``trace``)
    reads, found as the ``condor_ce_*`` tools find theirs: ``explicit`` (``--condor-config``), else
    ``CONDOR_CONFIG`` from the environment (what the CE's daemons pass to their cron jobs), else the
    HTCondor-CE's (``PODGAHP_CE_CONDOR_CONFIG``, else :data:`CE_CONDOR_CONFIG` where it exists),
    else HTCondor's own default files."""
    environ = os.environ if environ is None else environ
    if explicit:
        return ConfigSource(explicit, "--condor-config")
    if environ.get("CONDOR_CONFIG"):
        return ConfigSource(environ["CONDOR_CONFIG"], "CONDOR_CONFIG in the environment")
    if environ.get("PODGAHP_CE_CONDOR_CONFIG"):
        return ConfigSource(environ["PODGAHP_CE_CONDOR_CONFIG"], "the HTCondor-CE's, from PODGAHP_CE_CONDOR_CONFIG")
    if exists(CE_CONDOR_CONFIG):
        return ConfigSource(CE_CONDOR_CONFIG, "the HTCondor-CE's, as condor_ce_* tools read it")
    candidates = HTCONDOR_CONFIGS + (os.path.expanduser("~condor/condor_config"),)
    for path in candidates:
        if exists(path):
            return ConfigSource(path, "HTCondor's default; CONDOR_CONFIG is not set")
    return ConfigSource(None, "CONDOR_CONFIG is not set and none of " + ", ".join(
        (CE_CONDOR_CONFIG,) + candidates) + " exists; set CONDOR_CONFIG or pass --condor-config")


def use_config(source: ConfigSource) -> None:
    """Make ``source`` the configuration this process reads (the bindings re-read it if loaded)."""
    if source.path is None or os.environ.get("CONDOR_CONFIG") == source.path:
        return
    os.environ["CONDOR_CONFIG"] = source.path
    bindings = sys.modules.get("htcondor2")
    if bindings is not None:
        bindings.reload_config()


def gahp_config(environ: Optional[Mapping[str, str]] = None,
                exists: Callable[[str], bool] = os.path.isfile) -> Optional[str]:
    """Why a GAHP started by hand has no HTCondor configuration to read, or None when it has one
    (``CONDOR_CONFIG`` set, which the gridmanager always passes on, or one of HTCondor's default
    files). Without one, HTCondor's built-in defaults would send the log to ``/log``."""
    environ = os.environ if environ is None else environ
    if environ.get("CONDOR_CONFIG"):
        return None
    candidates = HTCONDOR_CONFIGS + (os.path.expanduser("~condor/condor_config"),)
    if any(exists(path) for path in candidates):
        return None
    ce = f"; on an HTCondor-CE, CONDOR_CONFIG={CE_CONDOR_CONFIG}" if exists(CE_CONDOR_CONFIG) else ""
    return ("no HTCondor configuration: CONDOR_CONFIG is not set and none of " + ", ".join(candidates)
            + f" exists. Set CONDOR_CONFIG to the configuration the gridmanager reads{ce}, or "
            "CONDOR_CONFIG=ONLY_ENV with _CONDOR_<KNOB> variables (e.g. _CONDOR_LOG=/tmp/gahp-log) for a try")


class Knobs:
    """Typed reads of configuration knobs; ``source`` defaults to the inherited HTCondor config."""

    def __init__(self, source: Optional[Mapping[str, str]] = None) -> None:
        self._source = source

    def _lookup(self) -> Mapping[str, str]:
        if self._source is None:
            self._source = _condor_param()
        return self._source

    def raw(self, name: str) -> Optional[str]:
        """The knob's value with surrounding blanks removed; None when unset or empty."""
        try:
            value = self._lookup().get(name)
        except Exception as e:  # noqa: BLE001 - the bindings raise plain exceptions on bad macros
            raise ConfigError(f"{name}: cannot be read from the HTCondor configuration: {e}") from e
        if value is None:
            return None
        value = str(value).strip()
        return value or None

    def _typed(self, name: str, default: T, convert: Callable[[str], T], form: str) -> T:
        value = self.raw(name)
        if value is None:
            return default
        try:
            return convert(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} = {value!r} is not {form}") from None

    def string(self, name: str, default: str) -> str:
        return self._typed(name, default, str, "a string")

    def optional(self, name: str) -> Optional[str]:
        return self.raw(name)

    def integer(self, name: str, default: int, minimum: Optional[int] = None,
                maximum: Optional[int] = None) -> int:
        value = self._typed(name, default, int, "an integer")
        self._check_range(name, value, minimum, MAX_KNOB_VALUE if maximum is None else maximum)
        return value

    def number(self, name: str, default: float, minimum: Optional[float] = None,
               maximum: Optional[float] = None) -> float:
        """A finite number: ``nan`` and ``inf`` would disable timeouts or overflow them."""
        value = self._typed(name, default, _finite, "a finite number")
        self._check_range(name, value, minimum, MAX_KNOB_VALUE if maximum is None else maximum)
        return value

    def boolean(self, name: str, default: bool) -> bool:
        def convert(text: str) -> bool:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(text)

        return self._typed(name, default, convert, "a boolean (true or false)")

    def names(self, name: str, default: List[str]) -> List[str]:
        """A list of names separated by commas and/or spaces."""
        value = self.raw(name)
        if value is None:
            return list(default)
        return [n for n in value.replace(",", " ").split() if n]

    def _check_range(self, name: str, value: float, minimum: Optional[float],
                     maximum: Optional[float]) -> None:
        if minimum is not None and value < minimum:
            raise ConfigError(f"{name} = {value} is below the minimum of {minimum}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{name} = {value} is above the maximum of {maximum}")


def user_name() -> str:
    """The user this process runs as (by uid: the environment may name another, as under a gridmanager)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


@dataclass(frozen=True)
class ServerSettings:
    """Knobs of the protocol server itself (section "server" of the podgahp config files)."""

    log_file: str
    """``PODGAHP_LOG``: log file; default ``$(LOG)/PodgahpLog.<backend>.<user>``."""
    log_max_bytes: int
    """``PODGAHP_LOG_MAX_BYTES``: size at which the log is rotated; default 10000000, 0 = never."""
    log_backups: int
    """``PODGAHP_LOG_BACKUPS``: rotated logs kept; default 2."""
    log_level: int
    """``PODGAHP_DEBUG``: ``INFO`` (default) or ``DEBUG`` (one more line per API call)."""
    workers: int
    """``PODGAHP_WORKERS``: threads serving requests; default 50."""
    request_timeout_s: float
    """``PODGAHP_REQUEST_TIMEOUT_SECONDS``: a request not done by then gets an error result.

    Default: 60 s below ``GRIDMANAGER_GAHP_CALL_TIMEOUT`` (300), so the gridmanager always gets an
    answer from us rather than its own "timed out"; values at or above that knob are lowered to it.
    """
    max_line_bytes: int
    """``PODGAHP_MAX_LINE_BYTES``: longest request line accepted; default 16777216."""
    max_pending: int
    """``PODGAHP_MAX_PENDING_REQUESTS``: most requests queued or running; default 1000."""
    max_pending_bytes: int
    """``PODGAHP_MAX_PENDING_BYTES``: most bytes of arguments queued or running; default 67108864."""

    @staticmethod
    def default_log(knobs: Knobs, backend: str, user: str) -> str:
        """``PODGAHP_LOG`` when unset, for a GAHP of ``backend`` run by ``user``."""
        # On an HTCondor-CE, $(USER_LOG) ($(LOG)/user, mode 1777) is where processes running as a job
        # owner can write; $(LOG) itself belongs to condor.
        log_dir = knobs.raw("USER_LOG") or knobs.raw("LOG") or "/tmp"
        return os.path.join(log_dir, f"PodgahpLog.{backend}.{user}")

    @classmethod
    def from_knobs(cls, knobs: Knobs, backend: str) -> ServerSettings:
        call_timeout = knobs.number("GRIDMANAGER_GAHP_CALL_TIMEOUT", 300.0, minimum=1)
        timeout = knobs.number("PODGAHP_REQUEST_TIMEOUT_SECONDS", max(call_timeout - 60, call_timeout / 2),
                               minimum=1)
        if timeout >= call_timeout:
            logging.getLogger(__name__).warning(
                "PODGAHP_REQUEST_TIMEOUT_SECONDS = %s is not below GRIDMANAGER_GAHP_CALL_TIMEOUT = %s; "
                "using %s", timeout, call_timeout, call_timeout * 0.9)
            timeout = call_timeout * 0.9
        level_name = knobs.string("PODGAHP_DEBUG", "INFO").upper()
        if level_name not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ConfigError(f"PODGAHP_DEBUG = {level_name!r} is not one of DEBUG, INFO, WARNING, ERROR")
        return cls(
            log_file=knobs.string("PODGAHP_LOG", cls.default_log(knobs, backend, user_name())),
            log_max_bytes=knobs.integer("PODGAHP_LOG_MAX_BYTES", 10_000_000, minimum=0),
            log_backups=knobs.integer("PODGAHP_LOG_BACKUPS", 2, minimum=0),
            log_level=getattr(logging, level_name),
            workers=knobs.integer("PODGAHP_WORKERS", 50, minimum=1, maximum=1024),
            request_timeout_s=timeout,
            max_line_bytes=knobs.integer("PODGAHP_MAX_LINE_BYTES", 16 * 1024 * 1024, minimum=4096),
            max_pending=knobs.integer("PODGAHP_MAX_PENDING_REQUESTS", 1000, minimum=1),
            max_pending_bytes=knobs.integer("PODGAHP_MAX_PENDING_BYTES", 64 * 1024 * 1024, minimum=4096),
        )
