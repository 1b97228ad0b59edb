"""What a pilot must be to run a job: its shape (cores, memory, GPUs, disk) and the group a job
belongs to (the shape plus the values of ``PODGAHP_PROVISION_GROUP_BY``).

Job ads are user input: a value that is missing, not a number, or beyond what any pilot could be
makes the job no demand at all (counted and logged by the caller), never an error of the cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple, Union
from urllib.parse import quote


#: Disk is rounded up to whole GiB (in KiB, as RequestDisk): jobs' disk requests are rarely round,
#: and a group per KiB would make a pilot per job.
DISK_STEP_KB = 1024 * 1024
#: Beyond these a job is not demand (no pilot could be that large).
MAX_CPUS = 1024
MAX_MEMORY_MB = 16 * 1024 * 1024
MAX_GPUS = 64
MAX_DISK_KB = 1024 ** 3  # 1 TiB
#: Longest value of a GROUP_BY attribute kept (it becomes part of a pilot's START expression).
MAX_VALUE_CHARS = 128

Scalar = Union[str, int, float, bool]


class Invalid:
    """A job attribute that is there but unusable: it evaluates to ``error`` (or, for a request, to
    ``undefined``), or to a list or an ad. Such a job is no demand."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID = Invalid()

#: Characters of a GROUP_BY value kept as they are in a group's label; every other one is
#: percent-encoded, so that the label holds no quote, backslash, ``$`` or separator: it travels through
#: a submit description, a pilot's environment and a startd's configuration as plain text.
LABEL_SAFE = "-_.:/@+~ "


@dataclass(frozen=True, order=True)
class Shape:
    cpus: int
    memory_mb: int
    gpus: int = 0
    disk_kb: int = 0

    def __str__(self) -> str:
        text = f"{self.cpus}c/{self.memory_mb}MiB"
        if self.gpus:
            text += f"/{self.gpus}gpu"
        if self.disk_kb:
            text += f"/{self.disk_kb // DISK_STEP_KB}GiB"
        return text


@dataclass(frozen=True, order=True)
class Group:
    """Jobs one kind of pilot serves: a shape and the values of the extra grouping attributes."""

    shape: Shape
    extra: Tuple[Tuple[str, Optional[Scalar]], ...] = ()
    """Values of the GROUP_BY attributes (None: undefined in the job ad)."""

    def __str__(self) -> str:
        return str(self.shape) + "".join(f",{k}={_label(v)}" for k, v in self.extra)


def _label(value: Optional[Scalar]) -> str:
    """A GROUP_BY value in a group's label: strings single-quoted and percent-encoded (so no two values
    share a label and no label holds a character any later reader interprets), others as ClassAd
    writes them."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + quote(value, safe=LABEL_SAFE) + "'"
    return repr(value)


def _whole(value: object, minimum: int, maximum: int) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    number = math.ceil(value)
    return number if minimum <= number <= maximum else None


def _given(job: Mapping[str, object], name: str, default: int) -> object:
    value = job.get(name)
    return default if value is None else value


def shape_of(job: Mapping[str, object]) -> Optional[Shape]:
    """The shape of a job (evaluated RequestCpus, RequestMemory, RequestGPUs, RequestDisk, each rounded
    up); None when one is unusable (:data:`INVALID`, not a number, out of range). Missing cores count
    as one, missing GPUs and disk as none; missing memory is unusable."""
    cpus = _whole(_given(job, "RequestCpus", 1), 1, MAX_CPUS)
    memory = _whole(job.get("RequestMemory"), 1, MAX_MEMORY_MB)
    gpus = _whole(_given(job, "RequestGPUs", 0), 0, MAX_GPUS)
    disk = _whole(_given(job, "RequestDisk", 0), 0, MAX_DISK_KB)
    if cpus is None or memory is None or gpus is None or disk is None:
        return None
    return Shape(cpus, memory, gpus, -(-disk // DISK_STEP_KB) * DISK_STEP_KB)


def group_of(job: Mapping[str, object], group_by: Tuple[str, ...]) -> Optional[Group]:
    shape = shape_of(job)
    if shape is None:
        return None
    extra = []
    for name in group_by:
        value = job.get(name)
        if isinstance(value, str) and (len(value) > MAX_VALUE_CHARS or not value.isprintable()):
            return None
        if value is not None and not isinstance(value, (str, int, float, bool)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return None
        extra.append((name, value))
    return Group(shape, tuple(extra))


def fits(shape: Shape, pilot: Shape) -> bool:
    return (shape.cpus <= pilot.cpus and shape.memory_mb <= pilot.memory_mb and shape.gpus <= pilot.gpus
            and (not pilot.disk_kb or shape.disk_kb <= pilot.disk_kb))


def pilots_for(total: Shape, pilot: Shape) -> int:
    """Partitionable pilots needed for jobs whose shapes add up to ``total`` (by the scarcest resource)."""
    needs = [total.cpus / pilot.cpus, total.memory_mb / pilot.memory_mb]
    if pilot.gpus:
        needs.append(total.gpus / pilot.gpus)
    if pilot.disk_kb:
        needs.append(total.disk_kb / pilot.disk_kb)
    return math.ceil(max(needs))
