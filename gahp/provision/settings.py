"""Knobs of ``podgahp provision`` (``PODGAHP_PROVISION_*``, documented in
``condor_config.d/40-podgahp-provision-defaults.conf``)."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Optional, Tuple

from gahp.core.config import Knobs, user_name
from gahp.core.errors import ConfigError
from gahp.provision.plan import Policy
from gahp.provision.shape import Shape

PREFIX = "PODGAHP_PROVISION_"

#: The pilot kinds: one pilot per job shape, or partitionable pilots of one fixed shape.
KINDS = ("shaped", "partitionable")

#: What a job ad may name in GROUP_BY beyond the shape: attribute names only.
ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: A collector's address as pilots are told it (CONDOR_HOST): host[:port] or a sinful string, with
#: nothing a configuration or a shell would read as more than a name (no blank, quote, backslash, $).
ADDRESS = re.compile(r"[^\s$\"'\\]+")

#: The provisioner's name as pilots advertise it (``PodgahpProvisioner``): text a startd's configuration
#: takes as it is.
NAME = re.compile(r"[^\x00-\x1f\x7f\"'\\$]{1,128}")

#: Defaults of the decision's knobs (chosen with benchmarks/provision_scenarios.py).
DEFAULTS = {
    "MAX_PILOTS": 2000,
    "MAX_PILOTS_PER_GROUP": 1000,
    "MAX_STARTING": 1000,
    "RAMP_START": 5,
    "RAMP_FACTOR": 200,
    "PRESSURE_PERCENT": 100,
    "START_SECONDS": 120,
    "BOOT_SECONDS": 300,
    "UNMATCHED_SECONDS": 300,
    "IDLE_SECONDS": 120,
    "RETRY_SECONDS": 3600,
    "BACKOFF_MAX_SECONDS": 300,
    "INTERVAL_SECONDS": 60,
    "REMOVE_IDLE_AFTER_SECONDS": 7200,
    "PILOT_IDLE_MINUTES": 20,
}

#: The shape attributes: always part of a group.
SHAPE_ATTRIBUTES = ("RequestCpus", "RequestMemory", "RequestGPUs", "RequestDisk")


@dataclass(frozen=True)
class ProvisionSettings:
    name: str
    """``PODGAHP_PROVISION_NAME``: marks this provisioner's pilots (``PodgahpProvisioner``); default
    ``podgahp@<host>``."""
    pool: Optional[str]
    """``PODGAHP_PROVISION_POOL``: collector of the pool whose idle jobs make demand; default the
    local pool."""
    job_filter: str
    """``PODGAHP_PROVISION_JOB_FILTER``: which idle jobs pilots are for (a ClassAd expression)."""
    group_by: Tuple[str, ...]
    """``PODGAHP_PROVISION_GROUP_BY``: job attributes that split groups beyond the shape."""
    max_jobs_read: int
    """``PODGAHP_PROVISION_MAX_JOBS_READ``: most idle jobs read per schedd and cycle."""
    max_groups: int
    """``PODGAHP_PROVISION_MAX_GROUPS``: most groups served in a cycle (those with most jobs waiting);
    the jobs of the others wait for a later cycle."""
    ce_schedd: Optional[str]
    """``PODGAHP_PROVISION_CE_SCHEDD``: the CE's schedd (name), default the local schedd."""
    ce_pool: Optional[str]
    """``PODGAHP_PROVISION_CE_POOL``: the collector that knows ``ce_schedd``."""
    ce_owner: str
    """``PODGAHP_PROVISION_CE_OWNER``: the Owner the CE gives this provisioner's pilots; only its jobs
    are counted as pilots and removed (another user's job that claims the provisioner's name is not)."""
    policy: Policy
    """Caps, ramp and tolerances (``MAX_PILOTS``, ``MAX_PILOTS_PER_GROUP``, ``MAX_STARTING``,
    ``RAMP_START``, ``RAMP_FACTOR``, ``PRESSURE_PERCENT``, ``START_SECONDS``, ``BOOT_SECONDS``,
    ``UNMATCHED_SECONDS``, ``IDLE_SECONDS``, ``RETRY_SECONDS``, ``BACKOFF_MAX_SECONDS``, ``INTERVAL_SECONDS``, ``REMOVE_IDLE_AFTER_SECONDS``)."""
    kind: str
    partitionable: Shape
    """The shape of partitionable pilots (``PODGAHP_PROVISION_PARTITIONABLE_*``)."""
    pilot_executable: str
    pilot_queue: Optional[str]
    pilot_wall_minutes: int
    pilot_idle_minutes: int
    pilot_environment: str
    pilot_token_file: Optional[str]
    """``PODGAHP_PROVISION_PILOT_TOKEN_FILE``: the pool's token, sent with each pilot as an input file."""
    log_file: str

    @property
    def interval_s(self) -> int:
        return self.policy.interval_s

    @property
    def max_pilots(self) -> int:
        return self.policy.max_pilots

    @classmethod
    def from_knobs(cls, knobs: Knobs) -> ProvisionSettings:
        name, group_by, kind, queue = _name(knobs), _group_by(knobs), _kind(knobs), _queue(knobs)
        environment, pool = _environment(knobs), _pool(knobs)
        job_filter = knobs.string(PREFIX + "JOB_FILTER", "true")
        _check_expression(PREFIX + "JOB_FILTER", job_filter)
        # As the GAHP's log: $(USER_LOG) (an HTCondor-CE's $(LOG)/user, mode 1777) is where the account
        # that owns the pilots can write; $(LOG) belongs to condor there.
        log_dir = knobs.raw("USER_LOG") or knobs.raw("LOG") or "/tmp"
        return cls(
            name=name,
            pool=pool,
            job_filter=job_filter,
            group_by=group_by,
            max_jobs_read=knobs.integer(PREFIX + "MAX_JOBS_READ", 100_000, minimum=1),
            max_groups=knobs.integer(PREFIX + "MAX_GROUPS", 200, minimum=1),
            ce_schedd=knobs.optional(PREFIX + "CE_SCHEDD"),
            ce_pool=knobs.optional(PREFIX + "CE_POOL"),
            ce_owner=knobs.string(PREFIX + "CE_OWNER", user_name()),
            policy=policy(knobs),
            kind=kind,
            partitionable=Shape(
                cpus=knobs.integer(PREFIX + "PARTITIONABLE_CPUS", 8, minimum=1),
                memory_mb=knobs.integer(PREFIX + "PARTITIONABLE_MEMORY_MB", 16384, minimum=1),
                gpus=knobs.integer(PREFIX + "PARTITIONABLE_GPUS", 0, minimum=0),
                disk_kb=knobs.integer(PREFIX + "PARTITIONABLE_DISK_KB", 0, minimum=0)),
            pilot_executable=knobs.string(PREFIX + "PILOT_EXECUTABLE", _shipped_pilot()),
            pilot_queue=queue,
            pilot_wall_minutes=knobs.integer(PREFIX + "PILOT_WALL_MINUTES", 1440, minimum=1),
            pilot_idle_minutes=knobs.integer(PREFIX + "PILOT_IDLE_MINUTES", DEFAULTS["PILOT_IDLE_MINUTES"], minimum=1),
            pilot_environment=environment,
            pilot_token_file=knobs.optional(PREFIX + "PILOT_TOKEN_FILE"),
            log_file=knobs.string(PREFIX + "LOG", os.path.join(log_dir, f"PodgahpProvisionLog.{user_name()}")),
        )


def _name(knobs: Knobs) -> str:
    name = knobs.string(PREFIX + "NAME", f"podgahp@{socket.getfqdn()}")
    if not NAME.fullmatch(name):
        raise ConfigError(f"{PREFIX}NAME = {name!r}: at most 128 printable characters, without quotes, "
                          "backslash or $ (pilots advertise it in the pool)")
    return name


def _group_by(knobs: Knobs) -> Tuple[str, ...]:
    group_by = tuple(knobs.names(PREFIX + "GROUP_BY", []))
    for attribute in group_by:
        if not ATTRIBUTE.fullmatch(attribute) or len(attribute) > 64:
            raise ConfigError(f"{PREFIX}GROUP_BY: {attribute!r} is not a job attribute name")
    return group_by


def _kind(knobs: Knobs) -> str:
    kind = knobs.string(PREFIX + "PILOT_KIND", "shaped").lower()
    if kind not in KINDS:
        raise ConfigError(f"{PREFIX}PILOT_KIND = {kind!r} is not one of {', '.join(KINDS)}")
    return kind


def _queue(knobs: Knobs) -> Optional[str]:
    queue = knobs.optional(PREFIX + "PILOT_QUEUE")
    if queue is not None and not ATTRIBUTE.fullmatch(queue):
        raise ConfigError(f"{PREFIX}PILOT_QUEUE = {queue!r} is not a queue name")
    return queue


def _environment(knobs: Knobs) -> str:
    environment = knobs.string(PREFIX + "PILOT_ENVIRONMENT", "")
    if any(c in environment for c in "\"'\n$") or not all(
            ATTRIBUTE.fullmatch(item.partition("=")[0]) and "=" in item for item in environment.split()):
        raise ConfigError(f"{PREFIX}PILOT_ENVIRONMENT: NAME=value pairs separated by blanks, without quotes or $")
    return environment


def _pool(knobs: Knobs) -> Optional[str]:
    pool = knobs.optional(PREFIX + "POOL")
    if pool is not None and not ADDRESS.fullmatch(pool):
        raise ConfigError(f"{PREFIX}POOL = {pool!r} is not a collector address "
                          "(host[:port] or <sinful>, without blanks, quotes or $)")
    return pool


def policy(knobs: Knobs) -> Policy:
    """The decision's knobs, with the defaults the scenario benchmark chose
    (``benchmarks/provision_scenarios.py``; trade-offs in docs/provision.md)."""
    max_pilots = knobs.integer(PREFIX + "MAX_PILOTS", DEFAULTS["MAX_PILOTS"], minimum=0)
    return Policy(
        max_pilots=max_pilots,
        max_pilots_per_group=knobs.integer(PREFIX + "MAX_PILOTS_PER_GROUP", DEFAULTS["MAX_PILOTS_PER_GROUP"],
                                           minimum=0),
        max_starting=knobs.integer(PREFIX + "MAX_STARTING", DEFAULTS["MAX_STARTING"], minimum=0),
        ramp_start=knobs.integer(PREFIX + "RAMP_START", DEFAULTS["RAMP_START"], minimum=1),
        ramp_factor=knobs.integer(PREFIX + "RAMP_FACTOR", DEFAULTS["RAMP_FACTOR"], minimum=1),
        pressure_percent=knobs.integer(PREFIX + "PRESSURE_PERCENT", DEFAULTS["PRESSURE_PERCENT"], minimum=1,
                                       maximum=1000),
        start_s=knobs.integer(PREFIX + "START_SECONDS", DEFAULTS["START_SECONDS"], minimum=1),
        boot_s=knobs.integer(PREFIX + "BOOT_SECONDS", DEFAULTS["BOOT_SECONDS"], minimum=1),
        unmatched_s=knobs.integer(PREFIX + "UNMATCHED_SECONDS", DEFAULTS["UNMATCHED_SECONDS"], minimum=1),
        idle_s=knobs.integer(PREFIX + "IDLE_SECONDS", DEFAULTS["IDLE_SECONDS"], minimum=1),
        retry_s=knobs.integer(PREFIX + "RETRY_SECONDS", DEFAULTS["RETRY_SECONDS"], minimum=1),
        backoff_max_s=knobs.integer(PREFIX + "BACKOFF_MAX_SECONDS", DEFAULTS["BACKOFF_MAX_SECONDS"], minimum=1),
        interval_s=knobs.integer(PREFIX + "INTERVAL_SECONDS", DEFAULTS["INTERVAL_SECONDS"], minimum=1),
        remove_idle_after_s=knobs.integer(PREFIX + "REMOVE_IDLE_AFTER_SECONDS", DEFAULTS["REMOVE_IDLE_AFTER_SECONDS"],
                                          minimum=0),
        pilot_idle_s=60 * knobs.integer(PREFIX + "PILOT_IDLE_MINUTES", DEFAULTS["PILOT_IDLE_MINUTES"], minimum=1),
    )


def _check_expression(knob: str, text: str) -> None:
    """A ClassAd expression an admin wrote, checked once: it parses, and holds no ``$`` (it becomes part
    of each pilot's START, which a startd's configuration would expand; write ``\\044`` in a string)."""
    import classad2

    if "$" in text or "\n" in text:
        raise ConfigError(f"{knob} = {text!r}: one line without $ (write \\044 for a $ in a string)")
    try:
        classad2.ExprTree(text)
    except Exception as e:  # noqa: BLE001 - the bindings raise plain exceptions on parse errors
        raise ConfigError(f"{knob} = {text!r} is not a ClassAd expression: {e}") from None


def _shipped_pilot() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                        "podgahp-pilot-startup.sh")
