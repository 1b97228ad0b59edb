"""What a pilot becomes on Lancium: the job fields, the input files and the correlation record.

Owns the CPU:memory rounding, the choice of image / QOS / run time from route settings and knobs,
the small launcher script that starts the pilot's executable in the Lancium job, and the ``notes`` a
Lancium job carries for people reading the account (never read back: anyone with a key to the account
can write them; the job's name is :mod:`gahp.backends.lancium.identity`'s). Pure functions of a
:class:`~gahp.core.job.PilotJob`: no HTTP here.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from gahp.backends.lancium.settings import MAX_RUN_TIME_S, MIN_RUN_TIME_S, QOS_LEVELS, SpecDefaults
from gahp.core.errors import InvalidJob
from gahp.core.files import read_input
from gahp.core.job import PilotJob

#: Version of the JSON kept in a Lancium job's ``notes`` (for people: podgahp never reads it).
NOTES_VERSION = 2

#: Resource limits of ``job_fields.resources``.
MAX_CORES = 72
MAX_MEMORY_GB = 128
GB_PER_CORE = 2  # "vCPUs and memory are currently allocated in 2:4 ratio"
MAX_GPUS = 8
MAX_SCRATCH_GB = 1024

#: Name of the launcher script uploaded with every pilot (reserved among input names).
LAUNCHER = "podgahp_launch.sh"
COMMAND_LINE = "/bin/sh " + LAUNCHER

#: Names of the route settings (``CERequirements`` conjuncts, lower-cased) this backend reads.
SETTING_IMAGE = "lancium_image"
SETTING_QOS = "lancium_qos"
SETTING_GPU = "lancium_gpu"


# --------------------------------------------------------------------------------------------
# Shape: cores and memory under the 2 vCPU : 4 GB rule.


def _ceil_even(n: int) -> int:
    return n + (n % 2)


def lancium_shape(cpus: int, memory_mb: Optional[int]) -> Tuple[int, int]:
    """Cores and memory (GB) Lancium will provision for a request, rounded up, or InvalidJob.

    Lancium allocates 2 vCPUs with 4 GB, so cores are even and memory is 2 GB per core:
    ``mem_gb = ceil(memory_mb / 1024)``, ``cores = max(ceil_even(cpus), ceil_even(ceil(mem_gb / 2)), 2)``,
    ``memory = 2 * cores``. The largest shape is therefore 64 cores / 128 GB.
    """
    mem_gb = math.ceil(memory_mb / 1024) if memory_mb else 0
    cores = max(_ceil_even(max(cpus, 1)), _ceil_even(math.ceil(mem_gb / GB_PER_CORE)), 2)
    memory = GB_PER_CORE * cores
    if cores > MAX_CORES or memory > MAX_MEMORY_GB:
        raise InvalidJob(
            f"Lancium cannot provision {cpus} cores with {memory_mb or 0} MiB: with 2 GB per core "
            f"(rounded up to {cores} cores / {memory} GB) the request exceeds the limit of "
            f"{MAX_MEMORY_GB} GB ({MAX_MEMORY_GB // GB_PER_CORE} cores)")
    return cores, memory


def run_time(wall_time_s: Optional[int], default_s: int) -> int:
    """``max_run_time`` from ``BatchRuntime`` (else the default), clamped to what Lancium accepts."""
    value = wall_time_s if wall_time_s is not None else default_s
    return max(MIN_RUN_TIME_S, min(MAX_RUN_TIME_S, value))


def notes_text(job: PilotJob, ce_name: str, user: str) -> str:
    """The ``notes`` of a pilot's job: which CE, user and sandbox it serves, for people reading the
    account. Never read back (see the module docstring)."""
    return json.dumps({"podgahp": NOTES_VERSION, "ce": ce_name, "user": user, "sandbox": job.sandbox_id},
                      separators=(",", ":"))


# --------------------------------------------------------------------------------------------
# Inputs and the launcher.


@dataclass(frozen=True)
class InputFile:
    """One entry of the Lancium job's ``input_files``."""

    name: str
    """File name in the job's working directory."""
    content: Optional[bytes] = None
    """Bytes to upload (``source_type: file``); None for a URL input."""
    url: Optional[str] = None
    """``source_type: url``: the service fetches it."""


def _read(path: str, what: str, limit: int) -> bytes:
    return read_input(path, what, limit, "PODGAHP_LANCIUM_MAX_INPUT_BYTES")


def launcher(executable: str, arguments: Tuple[str, ...], stdin: Optional[str],
             proxy: Optional[str]) -> bytes:
    """A POSIX shell script that starts the pilot in the job's working directory.

    Lancium runs ``command_line`` without a shell and does not promise to keep file modes of
    inputs, so the script makes the executable runnable, points ``X509_USER_PROXY`` at the
    shipped proxy, and ``exec``s the executable with its arguments (quoted here, once).
    """
    lines = [
        "#!/bin/sh",
        "# Written by podgahp: starts the pilot with its arguments in the job's working directory.",
        f"chmod u+x {shlex.quote(executable)} 2>/dev/null",
    ]
    if proxy:
        lines.append(f"X509_USER_PROXY=\"$PWD\"/{shlex.quote(proxy)}; export X509_USER_PROXY")
    command = " ".join(["exec", shlex.quote("./" + executable)] + [shlex.quote(a) for a in arguments])
    if stdin:
        command += " < " + shlex.quote(stdin)
    lines.append(command)
    return ("\n".join(lines) + "\n").encode()


def input_files(job: PilotJob, max_bytes: int) -> List[InputFile]:
    """The launcher, executable, stdin, proxy and ``TransferInput`` files, uniquely named.

    Local files are read here so a missing or unreadable one fails the submit before anything is
    created on Lancium; URLs become ``url`` inputs. InvalidJob on duplicate names or too many bytes.
    """
    files: List[InputFile] = []
    names: Dict[str, str] = {LAUNCHER: "the podgahp launcher"}
    total = 0

    def add(path: str, what: str) -> str:
        nonlocal total
        if "://" in path:
            name = os.path.basename(path.split("?", 1)[0].rstrip("/")) or "input"
            content = None
        else:
            name = os.path.basename(path.rstrip("/"))
            content = _read(path, what, max_bytes - total)
            total += len(content)
        if name in names:
            raise InvalidJob(f"{what} {path} and {names[name]} would both be named {name!r} in the "
                             f"Lancium job; rename one of them")
        names[name] = f"{what} {path}"
        files.append(InputFile(name=name, content=content, url=path if content is None else None))
        return name

    exe = add(job.executable, "executable")
    stdin = add(job.stdin, "standard input") if job.stdin else None
    proxy = add(job.proxy, "X.509 proxy") if job.proxy else None
    for path in job.transfer_input:
        add(path, "input file")
    script = launcher(exe, job.arguments, stdin, proxy)
    return [InputFile(name=LAUNCHER, content=script)] + files


# --------------------------------------------------------------------------------------------
# The job fields.


def _text_setting(job: PilotJob, name: str) -> Optional[str]:
    value = job.setting(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"route setting {name} = {value!r} is not a non-empty string")
    return value.strip()


def job_fields(job: PilotJob, defaults: SpecDefaults, name: str, notes: str) -> Dict[str, Any]:
    """The ``job`` object of ``POST /jobs`` for ``job``; InvalidJob when it cannot be described."""
    image = _text_setting(job, SETTING_IMAGE) or defaults.image
    qos_setting = _text_setting(job, SETTING_QOS)
    qos, source = ((qos_setting, f"route setting {SETTING_QOS}") if qos_setting
                   else (job.queue, "Queue (the route's BatchQueue)") if job.queue
                   else (defaults.qos, "PODGAHP_LANCIUM_QOS"))
    if qos not in QOS_LEVELS:
        raise InvalidJob(f"{source} = {qos!r} is not a Lancium QOS (one of {', '.join(QOS_LEVELS)})")
    cores, memory = lancium_shape(job.cpus, job.memory_mb)
    resources: Dict[str, Any] = {"core_count": cores, "memory": memory}
    if job.gpus:
        if job.gpus > MAX_GPUS:
            raise InvalidJob(f"Lancium jobs can have at most {MAX_GPUS} GPUs, the pilot asks for {job.gpus}")
        resources["gpu_count"] = job.gpus
        gpu = _text_setting(job, SETTING_GPU) or defaults.gpu_type
        if gpu:
            resources["gpu"] = gpu
    if job.disk_kb:
        scratch = max(1, math.ceil(job.disk_kb / (1024 * 1024)))
        if scratch > MAX_SCRATCH_GB:
            raise InvalidJob(f"RequestDisk = {job.disk_kb} KiB is more than Lancium's scratch limit "
                             f"of {MAX_SCRATCH_GB} GB")
        resources["scratch"] = scratch
    if job.whole_node:
        resources["node_exclusive"] = True
    fields: Dict[str, Any] = {
        "name": name,
        "notes": notes,
        "qos": qos,
        "image": image,
        "command_line": COMMAND_LINE,
        "max_run_time": run_time(job.wall_time_s, defaults.max_run_time_s),
        "resources": resources,
        "environment": [{"variable": k, "value": v} for k, v in job.environment],
    }
    if defaults.account:
        fields["account"] = defaults.account
    return fields
