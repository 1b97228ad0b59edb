"""Wire shapes of the simulated Lancium Compute API: JSON types, settings, catalogues, validation.

Owns the job object of Lancium's published API (schema ``job_fields``, API 1.5.0) as TypedDicts,
the simulator's knobs (:class:`LanciumSimSettings`), the canned ``/resources`` catalogues, the
2 vCPU : 4 GB round-up, and the type checks of create/update/input-file request bodies.

Must not know: HTTP (:mod:`podgahp_sim.lancium`), job state (:mod:`podgahp_sim.lancium.model`), and
nothing of ``gahp.backends``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, List, Mapping, Optional, Tuple, TypedDict, Union, cast

API_VERSION = "1.5.0"
"""Value of the ``X-Current-API-Version`` header (``info.version`` of the description)."""

STATUSES = ("created", "submitted", "queued", "ready", "running", "error", "finished", "delete pending")
ACTIVE_STATUSES = ("submitted", "queued", "ready", "running")
"""States in which ``POST /jobs/{id}/terminate`` is accepted."""

QOS_LEVELS = ("high", "medium", "low", "best-effort")
MAX_RUN_TIME_RANGE = (600, 2592000)
MAX_CORES = 72
MAX_MEMORY_GB = 128
GPU_COUNT_RANGE = (1, 8)
SCRATCH_RANGE = (1, 1024)
COST_PER_CORE_HOUR = 0.025
"""Sim choice: price used to fill ``cost`` (a string, as in the schema)."""

ENV_RUN_SECONDS = "PODGAHP_SIM_RUN_SECONDS"
ENV_QUEUE_SECONDS = "PODGAHP_SIM_QUEUE_SECONDS"
ENV_EXIT_CODE = "PODGAHP_SIM_EXIT_CODE"
ENV_ERROR = "PODGAHP_SIM_ERROR"
ENV_STDOUT = "PODGAHP_SIM_STDOUT"
ENV_STDERR = "PODGAHP_SIM_STDERR"
ENV_NEVER_START = "PODGAHP_SIM_NEVER_START"
ENV_MEMORY_USED = "PODGAHP_SIM_MEMORY_USED"

Errors = Dict[str, List[str]]
"""Body of a 400 ``invalid_job``: attribute name -> messages."""


# --------------------------------------------------------------------------------------------
# Raw JSON shapes (what goes over the wire)
# --------------------------------------------------------------------------------------------


class ResourcesJSON(TypedDict):
    node_exclusive: Optional[bool]
    core_count: Optional[int]
    gpu_count: Optional[int]
    memory: Optional[int]
    gpu: Optional[str]
    scratch: Optional[int]
    mpi: Optional[bool]
    tasks: Optional[int]
    tasks_per_node: Optional[int]
    mpi_version: Optional[str]


class EnvVarJSON(TypedDict):
    variable: str
    value: str


class _OutputFileResult(TypedDict, total=False):
    size: Optional[int]
    available: bool


class OutputFileJSON(_OutputFileResult):
    name: str
    destination: Optional[str]


class _UploadState(TypedDict, total=False):
    upload_complete: bool
    chunks_received: List[List[int]]


class InputFileJSON(_UploadState):
    """``input_file_fields`` as returned; ``size`` is write-only and never returned."""

    id: int
    source_type: str
    source: Optional[str]
    cache: bool
    name: str


class _JobResults(TypedDict, total=False):
    # Not nullable in the schema and "only available for jobs with a status of finished or
    # error", so these keys appear only once they have a value.
    cost: str
    memory_used: int
    execution_time: int
    exit_code: int


class JobJSON(_JobResults):
    id: int
    name: Optional[str]
    status: str
    notes: Optional[str]
    account: Optional[str]
    created_at: str
    updated_at: str
    submitted_at: Optional[str]
    completed_at: Optional[str]
    qos: Optional[str]
    image: Optional[str]
    command_line: Optional[str]
    expected_run_time: Optional[int]
    max_run_time: Optional[int]
    callback_url: Optional[str]
    error_string: Optional[str]
    resources: ResourcesJSON
    input_files: List[InputFileJSON]
    output_files: List[OutputFileJSON]
    environment: List[EnvVarJSON]


class JobSummaryJSON(TypedDict):
    id: int
    name: str
    status: str


class UploadJSON(TypedDict):
    checksum: str
    upload_complete: bool
    chunks_received: List[List[int]]


class ApiError(Exception):
    """A request the service refuses: HTTP status plus the ``errors`` member of the body."""

    def __init__(self, status: int, errors: Union[List[str], Errors]) -> None:
        super().__init__(status, errors)
        self.status = status
        self.errors = errors


# --------------------------------------------------------------------------------------------
# Settings and canned catalogues
# --------------------------------------------------------------------------------------------


@dataclass
class LanciumSimSettings:
    """Knobs of the simulator; may be changed on a running simulator (under its lock)."""

    token_lifetime: float = 3600.0
    """Seconds an access token stays valid (the service says 60 minutes)."""
    tick: float = 0.05
    """Seconds between two steps of the background state machine."""
    submit_seconds: float = 0.1
    """Seconds a job stays ``submitted`` before it is ``queued``."""
    queue_seconds: float = 0.2
    """Minimum seconds a job stays ``queued``; per job: ``PODGAHP_SIM_QUEUE_SECONDS``."""
    ready_seconds: float = 0.0
    """Seconds a job stays ``ready`` (cores held, not yet running); 0 = one tick."""
    run_seconds: float = 1.0
    """Seconds a job runs; per job: ``PODGAHP_SIM_RUN_SECONDS``."""
    delete_seconds: float = 1.0
    """Seconds a deleted job stays ``delete pending`` before it vanishes."""
    total_cores: int = 1024
    """Cores of the simulated grid; jobs that do not fit stay ``queued``."""
    output_prepare_polls: int = 1
    """How many 202 ``{"progress": N}`` answers each output file gives before its 200."""
    terminate_state: str = "error"
    """State a terminated job ends in: ``error`` (with ``terminate_error``) or ``finished``."""
    terminate_error: str = "terminated by user"
    """``error_string`` of a terminated job."""
    round_up: bool = True
    """Apply the 2 vCPU : 4 GB round-up on create/update."""
    billing_ok: bool = True
    """False: every submit answers 402 (no billing information)."""


GPU_CATALOGUE: List[Dict[str, str]] = [
    {"id": "k80", "name": "NVIDIA Tesla K80", "description": "12 GB, Kepler"},
    {"id": "p100", "name": "NVIDIA Tesla P100", "description": "16 GB, Pascal"},
    {"id": "v100", "name": "NVIDIA Tesla V100", "description": "32 GB, Volta"},
]
QOS_CATALOGUE: List[Dict[str, str]] = [
    {"id": "high", "description": "Scheduled and running at least 90% of the time"},
    {"id": "medium", "description": "Scheduled and running about 50% of the time"},
    {"id": "low", "description": "Scheduled and running about 25% of the time"},
    {"id": "best-effort", "description": "Runs only on otherwise free resources"},
]
MPI_CATALOGUE: List[Dict[str, str]] = [
    {"id": "openmpi4", "description": "Open MPI 4.x"},
]
RESOURCE_CATALOGUE: List[Dict[str, str]] = [
    {"name": "core_count", "description": "vCPUs, even, allocated 2 vCPU : 4 GB"},
    {"name": "memory", "description": "Memory in GB, allocated 2 vCPU : 4 GB"},
    {"name": "gpu", "description": "GPU type, see /resources/gpus"},
    {"name": "gpu_count", "description": "Number of GPUs"},
    {"name": "scratch", "description": "Scratch space"},
]
DEFAULTS_CATALOGUE: List[Dict[str, str]] = [
    {"resource": "core_count", "value": "2"},
    {"resource": "memory", "value": "4"},
    {"resource": "max_run_time", "value": "259200"},
    {"resource": "qos", "value": "high"},
]
LIMITS_CATALOGUE: List[List[Dict[str, str]]] = [
    [
        {"resource": "core_count", "type": "cpu", "value": str(MAX_CORES)},
        {"resource": "memory", "type": "cpu", "value": str(MAX_MEMORY_GB)},
    ],
    [{"resource": "gpu_count", "type": g["id"], "value": str(GPU_COUNT_RANGE[1])} for g in GPU_CATALOGUE],
    [{"resource": "max_run_time", "type": "job", "value": str(MAX_RUN_TIME_RANGE[1])}],
]


def iso(t: float) -> str:
    """ISO 8601 in UTC with milliseconds, as in real responses (``2022-07-01T14:00:07.137Z``)."""
    dt = datetime.fromtimestamp(t, timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (dt.microsecond // 1000)


def ceil_even(n: int) -> int:
    return n + (n % 2)


def round_up_resources(cores: Optional[int], memory: Optional[int]) -> Tuple[Optional[int], Optional[int]]:
    """The 2 vCPU : 4 GB rule, rounding up (lancium-api.md §5).

    With both values: ``cores = max(ceil_even(cores), ceil_even(ceil(memory / 2)))`` and
    ``memory = 2 * cores``.  Sim choice with one value only: cores are made even, memory goes up
    to a multiple of 4; the missing one stays unset so submit still reports it.  Values below 1
    are left for submit to reject.
    """
    if cores is not None and cores < 1 or memory is not None and memory < 1:
        return cores, memory
    if cores is not None and memory is not None:
        c = max(ceil_even(cores), ceil_even(math.ceil(memory / 2)))
        return c, 2 * c
    if cores is not None:
        return ceil_even(cores), None
    if memory is not None:
        return None, 4 * math.ceil(memory / 4)
    return None, None


# --------------------------------------------------------------------------------------------
# Request validation (types only; ranges and presence are checked at submit)
# --------------------------------------------------------------------------------------------

JOB_STR_FIELDS = ("name", "notes", "account", "qos", "image", "command_line", "callback_url")
JOB_INT_FIELDS = ("expected_run_time", "max_run_time")
_JOB_READ_ONLY = (
    "id", "status", "created_at", "updated_at", "submitted_at", "completed_at",
    "cost", "memory_used", "execution_time", "exit_code", "error_string",
)
_JOB_LISTS = ("resources", "input_files", "output_files", "output_fies", "environment")
_RES_INT = ("core_count", "gpu_count", "memory", "scratch", "tasks", "tasks_per_node")
_RES_BOOL = ("node_exclusive", "mpi")
_RES_STR = ("gpu", "mpi_version")
_INPUT_KEYS = ("id", "source_type", "source", "cache", "name", "size")
SOURCE_TYPES = ("file", "data", "url")


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def add_error(errors: Errors, key: str, message: str) -> None:
    errors.setdefault(key, []).append(message)


def unwrap_body(body: object, wrapper: str) -> Tuple[Dict[str, object], Errors]:
    """Accept ``{"<wrapper>": {...}}``, bare fields, ``{}`` or no body (None)."""
    errors: Errors = {}
    if body is None:
        return {}, errors
    if not isinstance(body, dict):
        add_error(errors, wrapper, "must be an object")
        return {}, errors
    if set(body) == {wrapper}:
        inner = body[wrapper]
        if not isinstance(inner, dict):
            add_error(errors, wrapper, "must be an object")
            return {}, errors
        return cast(Dict[str, object], inner), errors
    return cast(Dict[str, object], body), errors


def check_job_fields(fields: Mapping[str, object]) -> Errors:
    """Unknown keys and wrong types -> errors (``additionalProperties: false`` in ``job_fields``)."""
    errors: Errors = {}
    for key, value in fields.items():
        if key in JOB_STR_FIELDS:
            if value is not None and not isinstance(value, str):
                add_error(errors, key, "must be a string")
            elif key == "qos" and value is not None and value not in QOS_LEVELS:
                add_error(errors, key, "must be a valid value")
        elif key in JOB_INT_FIELDS:
            if value is not None and not is_int(value):
                add_error(errors, key, "must be an integer")
        elif key in _JOB_READ_ONLY:
            pass  # read-only attributes are ignored in requests
        elif key == "resources":
            _check_resources(value, errors)
        elif key == "environment":
            _check_environment(value, errors)
        elif key in ("output_files", "output_fies"):
            _check_outputs(key, value, errors)
        elif key == "input_files":
            if not isinstance(value, list):
                add_error(errors, key, "must be an array")
            else:
                for item in value:
                    item_fields, item_errors = unwrap_body(item, "input_file")
                    for k, msgs in item_errors.items():
                        errors.setdefault("input_files", []).extend(msgs)
                    for msg in check_input_fields(item_fields, allow_id=True).values():
                        errors.setdefault("input_files", []).extend(msg)
        else:
            add_error(errors, key, "is not a valid attribute")
    return errors


def _check_resources(value: object, errors: Errors) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        add_error(errors, "resources", "must be an object")
        return
    for key, v in cast(Dict[str, object], value).items():
        if key in _RES_INT:
            if v is not None and not is_int(v):
                add_error(errors, key, "must be an integer")
        elif key in _RES_BOOL:
            if v is not None and not isinstance(v, bool):
                add_error(errors, key, "must be a boolean")
        elif key in _RES_STR:
            if v is not None and not isinstance(v, str):
                add_error(errors, key, "must be a string")
        else:
            add_error(errors, key, "is not a valid attribute")


def _check_environment(value: object, errors: Errors) -> None:
    if not isinstance(value, list):
        add_error(errors, "environment", "must be an array")
        return
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) != {"variable", "value"}
            or not isinstance(item["variable"], str)
            or not isinstance(item["value"], str)
        ):
            add_error(errors, "environment", "entries must be {\"variable\": string, \"value\": string}")
            return


def _check_outputs(key: str, value: object, errors: Errors) -> None:
    if not isinstance(value, list):
        add_error(errors, key, "must be an array")
        return
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item.get("name"):
            add_error(errors, key, "entries need a name")
            return
        extra = set(item) - {"name", "destination", "size", "available"}
        dest = item.get("destination")
        if extra or (dest is not None and not isinstance(dest, str)):
            add_error(errors, key, "entries are {\"name\": string, \"destination\": string}")
            return


def check_input_fields(fields: Mapping[str, object], allow_id: bool = False) -> Errors:
    """Validate ``input_file_fields`` of a request (``size`` only with ``source_type`` file)."""
    errors: Errors = {}
    for key in fields:
        if key not in _INPUT_KEYS or (key == "id" and not allow_id):
            add_error(errors, key, "is not a valid attribute")
    if "id" in fields and allow_id:
        if not is_int(fields["id"]):
            add_error(errors, "id", "must be an integer")
        return errors  # a reference to an existing record
    source_type = fields.get("source_type")
    if source_type not in SOURCE_TYPES:
        add_error(errors, "source_type", "must be one of file, data, url")
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        add_error(errors, "name", "must be present")
    source = fields.get("source")
    if source is not None and not isinstance(source, str):
        add_error(errors, "source", "must be a string")
    if source_type in ("data", "url") and not isinstance(source, str):
        add_error(errors, "source", "must be present")
    cache = fields.get("cache", False)
    if not isinstance(cache, bool):
        add_error(errors, "cache", "must be a boolean")
    size = fields.get("size")
    if source_type == "file":
        if not is_int(size) or cast(int, size) < 0:
            add_error(errors, "size", "must be a non-negative integer")
    elif "size" in fields:
        add_error(errors, "size", "is only valid for source_type file")
    return errors
