"""State of the simulated Lancium Compute service: jobs, input uploads, outputs and the clock.

Owns the job object of Lancium's published API (schema ``job_fields``, API 1.5.0), its validation
on create/update/submit, the 2 vCPU : 4 GB round-up, the state machine
``created -> submitted -> queued -> ready -> running -> finished | error`` driven by :meth:`tick`,
chunked input uploads and the output files a finished job leaves behind.

Must not know: HTTP, sockets, headers, tokens (all in :mod:`gahp.sim.lancium`), and nothing of
``gahp.backends`` -- clients meet the simulator only over HTTP.  Every method here expects the
caller to hold one lock around the whole :class:`LanciumState`.

Facts not stated by the published description are marked "sim choice" below.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union, cast

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

_JOB_STR = ("name", "notes", "account", "qos", "image", "command_line", "callback_url")
_JOB_INT = ("expected_run_time", "max_run_time")
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


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _add(errors: Errors, key: str, message: str) -> None:
    errors.setdefault(key, []).append(message)


def unwrap_body(body: object, wrapper: str) -> Tuple[Dict[str, object], Errors]:
    """Accept ``{"<wrapper>": {...}}``, bare fields, ``{}`` or no body (None)."""
    errors: Errors = {}
    if body is None:
        return {}, errors
    if not isinstance(body, dict):
        _add(errors, wrapper, "must be an object")
        return {}, errors
    if set(body) == {wrapper}:
        inner = body[wrapper]
        if not isinstance(inner, dict):
            _add(errors, wrapper, "must be an object")
            return {}, errors
        return cast(Dict[str, object], inner), errors
    return cast(Dict[str, object], body), errors


def check_job_fields(fields: Mapping[str, object]) -> Errors:
    """Unknown keys and wrong types -> errors (``additionalProperties: false`` in ``job_fields``)."""
    errors: Errors = {}
    for key, value in fields.items():
        if key in _JOB_STR:
            if value is not None and not isinstance(value, str):
                _add(errors, key, "must be a string")
            elif key == "qos" and value is not None and value not in QOS_LEVELS:
                _add(errors, key, "must be a valid value")
        elif key in _JOB_INT:
            if value is not None and not _is_int(value):
                _add(errors, key, "must be an integer")
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
                _add(errors, key, "must be an array")
            else:
                for item in value:
                    item_fields, item_errors = unwrap_body(item, "input_file")
                    for k, msgs in item_errors.items():
                        errors.setdefault("input_files", []).extend(msgs)
                    for msg in check_input_fields(item_fields, allow_id=True).values():
                        errors.setdefault("input_files", []).extend(msg)
        else:
            _add(errors, key, "is not a valid attribute")
    return errors


def _check_resources(value: object, errors: Errors) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        _add(errors, "resources", "must be an object")
        return
    for key, v in cast(Dict[str, object], value).items():
        if key in _RES_INT:
            if v is not None and not _is_int(v):
                _add(errors, key, "must be an integer")
        elif key in _RES_BOOL:
            if v is not None and not isinstance(v, bool):
                _add(errors, key, "must be a boolean")
        elif key in _RES_STR:
            if v is not None and not isinstance(v, str):
                _add(errors, key, "must be a string")
        else:
            _add(errors, key, "is not a valid attribute")


def _check_environment(value: object, errors: Errors) -> None:
    if not isinstance(value, list):
        _add(errors, "environment", "must be an array")
        return
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) != {"variable", "value"}
            or not isinstance(item["variable"], str)
            or not isinstance(item["value"], str)
        ):
            _add(errors, "environment", "entries must be {\"variable\": string, \"value\": string}")
            return


def _check_outputs(key: str, value: object, errors: Errors) -> None:
    if not isinstance(value, list):
        _add(errors, key, "must be an array")
        return
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item.get("name"):
            _add(errors, key, "entries need a name")
            return
        extra = set(item) - {"name", "destination", "size", "available"}
        dest = item.get("destination")
        if extra or (dest is not None and not isinstance(dest, str)):
            _add(errors, key, "entries are {\"name\": string, \"destination\": string}")
            return


def check_input_fields(fields: Mapping[str, object], allow_id: bool = False) -> Errors:
    """Validate ``input_file_fields`` of a request (``size`` only with ``source_type`` file)."""
    errors: Errors = {}
    for key in fields:
        if key not in _INPUT_KEYS or (key == "id" and not allow_id):
            _add(errors, key, "is not a valid attribute")
    if "id" in fields and allow_id:
        if not _is_int(fields["id"]):
            _add(errors, "id", "must be an integer")
        return errors  # a reference to an existing record
    source_type = fields.get("source_type")
    if source_type not in SOURCE_TYPES:
        _add(errors, "source_type", "must be one of file, data, url")
    name = fields.get("name")
    if not isinstance(name, str) or not name:
        _add(errors, "name", "must be present")
    source = fields.get("source")
    if source is not None and not isinstance(source, str):
        _add(errors, "source", "must be a string")
    if source_type in ("data", "url") and not isinstance(source, str):
        _add(errors, "source", "must be present")
    cache = fields.get("cache", False)
    if not isinstance(cache, bool):
        _add(errors, "cache", "must be a boolean")
    size = fields.get("size")
    if source_type == "file":
        if not _is_int(size) or cast(int, size) < 0:
            _add(errors, "size", "must be a non-negative integer")
    elif "size" in fields:
        _add(errors, "size", "is only valid for source_type file")
    return errors


# --------------------------------------------------------------------------------------------
# Internal records
# --------------------------------------------------------------------------------------------


@dataclass
class SimInput:
    record: InputFileJSON
    size: int
    content: bytearray
    ranges: List[Tuple[int, int]] = field(default_factory=list)
    """Received byte ranges, ``[start, end)`` (sim choice: 0-based, end exclusive), merged."""

    def complete(self) -> bool:
        return self.record["source_type"] != "file" or self.ranges == [(0, self.size)] or self.size == 0

    def publish(self) -> None:
        if self.record["source_type"] == "file":
            self.record["upload_complete"] = self.complete()
            self.record["chunks_received"] = [[a, b] for a, b in self.ranges]


@dataclass
class SimJob:
    data: JobJSON
    status_since: float
    inputs: Dict[int, SimInput] = field(default_factory=dict)
    cores_held: int = 0
    hold: bool = False
    """Set by :meth:`LanciumState.advance`: the clock no longer moves this job."""
    never_start: bool = False
    terminate_requested: bool = False
    terminated: bool = False
    started: Optional[float] = None
    delete_at: Optional[float] = None
    outputs: Dict[str, bytes] = field(default_factory=dict)
    output_polls: Dict[str, int] = field(default_factory=dict)
    output_time: float = 0.0

    @property
    def status(self) -> str:
        return self.data["status"]

    def env(self) -> Dict[str, str]:
        return {e["variable"]: e["value"] for e in self.data["environment"]}


@dataclass(frozen=True)
class OutputFile:
    """What ``GET /jobs/{id}/output/{path}`` can answer."""

    progress: Optional[int]
    """Not None: still being prepared, answer 202 with this percentage."""
    content: bytes
    created: float


def _new_resources() -> ResourcesJSON:
    return ResourcesJSON(
        node_exclusive=None, core_count=None, gpu_count=None, memory=None, gpu=None,
        scratch=None, mpi=None, tasks=None, tasks_per_node=None, mpi_version=None,
    )


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------


class LanciumState:
    """All jobs of the one simulated account, and the operations of the jobs API."""

    def __init__(self, settings: LanciumSimSettings) -> None:
        self.settings = settings
        self.jobs: Dict[int, SimJob] = {}
        self._next_job_id = 1000
        self._next_input_id = 1

    # -- helpers -------------------------------------------------------------------------------

    def _job(self, job_id: int) -> SimJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ApiError(404, ["Job %d not found" % job_id])
        return job

    def _set_status(self, job: SimJob, status: str, now: float) -> None:
        job.data["status"] = status
        job.data["updated_at"] = iso(now)
        job.status_since = now

    def _release(self, job: SimJob) -> None:
        job.cores_held = 0

    def cores_in_use(self) -> int:
        return sum(j.cores_held for j in self.jobs.values())

    def _apply(self, job: SimJob, fields: Mapping[str, object]) -> None:
        data = cast(Dict[str, object], job.data)
        for key in _JOB_STR + _JOB_INT:
            if key in fields:
                data[key] = fields[key]
        res = fields.get("resources")
        if isinstance(res, dict):
            target = cast(Dict[str, object], job.data["resources"])
            for key, value in cast(Dict[str, object], res).items():
                target[key] = value
        if "environment" in fields:
            job.data["environment"] = [
                EnvVarJSON(variable=str(e["variable"]), value=str(e["value"]))
                for e in cast(List[Dict[str, object]], fields["environment"])
            ]
        for key in ("output_files", "output_fies"):
            if key in fields:
                job.data["output_files"] = [
                    OutputFileJSON(
                        name=str(o["name"]),
                        destination=cast(Optional[str], o.get("destination")),
                    )
                    for o in cast(List[Dict[str, object]], fields[key])
                ]
        if isinstance(fields.get("input_files"), list):
            for item in cast(List[object], fields["input_files"]):
                item_fields = unwrap_body(item, "input_file")[0]
                if "id" in item_fields:
                    self._update_input(job, item_fields)
                else:
                    self._add_input(job, item_fields)
        if self.settings.round_up:
            r = job.data["resources"]
            r["core_count"], r["memory"] = round_up_resources(r["core_count"], r["memory"])

    def _check_input_refs(self, job: Optional[SimJob], fields: Mapping[str, object], errors: Errors) -> None:
        items = fields.get("input_files")
        if not isinstance(items, list):
            return
        for item in items:
            ref = unwrap_body(item, "input_file")[0].get("id")
            if ref is not None and (job is None or ref not in job.inputs):
                _add(errors, "input_files", "input file %s does not belong to this job" % ref)

    def _add_input(self, job: SimJob, fields: Mapping[str, object]) -> SimInput:
        source_type = str(fields["source_type"])
        name = str(fields["name"])
        source = fields.get("source")
        record = InputFileJSON(
            id=self._next_input_id,
            source_type=source_type,
            source=str(source) if source is not None else (name if source_type == "file" else None),
            cache=bool(fields.get("cache", False)),
            name=name,
        )
        self._next_input_id += 1
        size = cast(int, fields["size"]) if source_type == "file" else 0
        sim_input = SimInput(record=record, size=size, content=bytearray(size))
        sim_input.publish()
        job.inputs[record["id"]] = sim_input
        self._publish_inputs(job)
        return sim_input

    def _update_input(self, job: SimJob, fields: Mapping[str, object]) -> None:
        sim_input = job.inputs[cast(int, fields["id"])]
        if isinstance(fields.get("name"), str):
            sim_input.record["name"] = cast(str, fields["name"])
        if isinstance(fields.get("cache"), bool):
            sim_input.record["cache"] = cast(bool, fields["cache"])

    def _publish_inputs(self, job: SimJob) -> None:
        job.data["input_files"] = [i.record for i in job.inputs.values()]

    # -- jobs ----------------------------------------------------------------------------------

    def create_job(self, body: object, now: float) -> JobJSON:
        fields, errors = unwrap_body(body, "job")
        errors.update(check_job_fields(fields))
        self._check_input_refs(None, fields, errors)
        if errors:
            raise ApiError(400, errors)
        job_id = self._next_job_id
        self._next_job_id += 1
        stamp = iso(now)
        data = JobJSON(
            id=job_id, name=None, status="created", notes=None, account=None,
            created_at=stamp, updated_at=stamp, submitted_at=None, completed_at=None,
            qos=None, image=None, command_line=None, expected_run_time=None, max_run_time=None,
            callback_url=None, error_string=None, resources=_new_resources(),
            input_files=[], output_files=[], environment=[],
        )
        job = SimJob(data=data, status_since=now)
        self._apply(job, fields)
        self.jobs[job_id] = job
        return copy.deepcopy(job.data)

    def update_job(self, job_id: int, body: object, now: float) -> JobJSON:
        job = self._job(job_id)
        if job.status != "created":
            raise ApiError(409, ["Unable to perform on a job that has already been submitted"])
        fields, errors = unwrap_body(body, "job")
        errors.update(check_job_fields(fields))
        self._check_input_refs(job, fields, errors)
        if errors:
            raise ApiError(400, errors)
        self._apply(job, fields)
        job.data["updated_at"] = iso(now)
        return copy.deepcopy(job.data)

    def show_job(self, job_id: int) -> JobJSON:
        return copy.deepcopy(self._job(job_id).data)

    def list_jobs(self) -> List[JobSummaryJSON]:
        # The list schema types ``name`` as a plain (non-nullable) string.
        return [
            JobSummaryJSON(id=j.data["id"], name=j.data["name"] or "", status=j.status)
            for j in self.jobs.values()
        ]

    def submit_errors(self, job: SimJob) -> Errors:
        """Why a job cannot be submitted (empty = it can)."""
        d = job.data
        r = d["resources"]
        errors: Errors = {}
        for key in ("name", "image", "command_line"):
            if not cast(Dict[str, object], d)[key]:
                _add(errors, key, "must be present")
        if d["qos"] is None:
            _add(errors, "qos", "must be present")
        elif d["qos"] not in QOS_LEVELS:
            _add(errors, "qos", "must be a valid value")
        mrt = d["max_run_time"]
        if mrt is None:
            _add(errors, "max_run_time", "must be present")
        elif not MAX_RUN_TIME_RANGE[0] <= mrt <= MAX_RUN_TIME_RANGE[1]:
            _add(errors, "max_run_time", "must be between %d and %d" % MAX_RUN_TIME_RANGE)
        cores = r["core_count"]
        if cores is None:
            _add(errors, "core_count", "must be present")
        else:
            if cores % 2:
                _add(errors, "core_count", "must be an even number")
            if not 1 <= cores <= MAX_CORES:
                _add(errors, "core_count", "must be between 1 and %d" % MAX_CORES)
        memory = r["memory"]
        if memory is None:
            _add(errors, "memory", "must be present")
        elif not 1 <= memory <= MAX_MEMORY_GB:
            _add(errors, "memory", "must be between 1 and %d" % MAX_MEMORY_GB)
        if r["gpu"] is not None:
            if r["gpu"] not in [g["id"] for g in GPU_CATALOGUE]:
                _add(errors, "gpu", "must be a valid value")
            if r["gpu_count"] is None:
                _add(errors, "gpu_count", "must be present when a gpu type is requested")
        if r["gpu_count"] is not None and not GPU_COUNT_RANGE[0] <= r["gpu_count"] <= GPU_COUNT_RANGE[1]:
            _add(errors, "gpu_count", "must be between %d and %d" % GPU_COUNT_RANGE)
        if r["scratch"] is not None and not SCRATCH_RANGE[0] <= r["scratch"] <= SCRATCH_RANGE[1]:
            _add(errors, "scratch", "must be between %d and %d" % SCRATCH_RANGE)
        for sim_input in job.inputs.values():
            if not sim_input.complete():
                _add(errors, "input_files", "%s has not been completely uploaded" % sim_input.record["name"])
        env = job.env()
        for var in (ENV_RUN_SECONDS, ENV_QUEUE_SECONDS):
            if var in env and _float(env[var]) is None:
                _add(errors, "environment", "%s must be a number of seconds" % var)
        for var in (ENV_EXIT_CODE, ENV_MEMORY_USED):
            if var in env and _int(env[var]) is None:
                _add(errors, "environment", "%s must be an integer" % var)
        return errors

    def submit_job(self, job_id: int, now: float) -> None:
        job = self._job(job_id)
        if job.status != "created":
            raise ApiError(409, ["Unable to perform on a job that has already been submitted"])
        errors = self.submit_errors(job)
        if errors:
            raise ApiError(400, errors)
        if not self.settings.billing_ok:
            raise ApiError(402, ["Account billing information required before submitting"])
        job.never_start = job.never_start or job.env().get(ENV_NEVER_START, "") not in ("", "0")
        job.data["submitted_at"] = iso(now)
        self._set_status(job, "submitted", now)

    def terminate_job(self, job_id: int, now: float) -> None:
        job = self._job(job_id)
        if job.status not in ACTIVE_STATUSES:
            raise ApiError(409, ["Unable to terminate a job that in not queued or running"])
        # Takes effect on the next tick: 202 only says the request was accepted.
        job.terminate_requested = True

    def delete_job(self, job_id: int, now: float) -> None:
        job = self._job(job_id)
        if job.status == "delete pending":
            return
        self._release(job)
        job.hold = False
        job.delete_at = now + self.settings.delete_seconds
        self._set_status(job, "delete pending", now)

    # -- input files ---------------------------------------------------------------------------

    def _input(self, job_id: int, data_id: int) -> Tuple[SimJob, SimInput]:
        job = self._job(job_id)
        sim_input = job.inputs.get(data_id)
        if sim_input is None:
            raise ApiError(404, ["Input file %d of job %d not found" % (data_id, job_id)])
        return job, sim_input

    def create_input(self, job_id: int, body: object) -> InputFileJSON:
        job = self._job(job_id)
        if job.status != "created":
            raise ApiError(409, ["Unable to perform on a job that has already been submitted"])
        fields, errors = unwrap_body(body, "input_file")
        errors.update(check_input_fields(fields))
        if errors:
            raise ApiError(400, errors)
        return copy.deepcopy(self._add_input(job, fields).record)

    def show_input(self, job_id: int, data_id: int) -> InputFileJSON:
        return copy.deepcopy(self._input(job_id, data_id)[1].record)

    def delete_input(self, job_id: int, data_id: int) -> None:
        job, _ = self._input(job_id, data_id)
        if job.status != "created":
            raise ApiError(409, ["Unable to perform on a job that has already been submitted"])
        del job.inputs[data_id]
        self._publish_inputs(job)

    def reupload_input(self, job_id: int, data_id: int) -> InputFileJSON:
        job, sim_input = self._input(job_id, data_id)
        if sim_input.record["source_type"] != "file":
            raise ApiError(400, ["Can't re-upload an input file with a source type of 'data' or 'url'"])
        if job.status != "created":
            raise ApiError(400, ["Unable to perform on a job that has already been submitted"])
        sim_input.ranges = []
        sim_input.content = bytearray(sim_input.size)
        sim_input.publish()
        return copy.deepcopy(sim_input.record)

    def upload_chunk(
        self, job_id: int, data_id: int, offset_header: Optional[str], chunk: Optional[bytes],
        checksum: Optional[str],
    ) -> UploadJSON:
        """One ``PATCH`` chunk; ``chunk`` is None when the request had no Content-Length."""
        job, sim_input = self._input(job_id, data_id)
        if sim_input.record["source_type"] != "file":
            raise ApiError(422, ["Unable to upload an input file with source type %s" % sim_input.record["source_type"]])
        if job.status != "created":
            raise ApiError(409, ["Unable to perform on a job that has already been submitted"])
        if sim_input.complete():
            raise ApiError(409, ["Unable to modify an already completed upload"])
        if chunk is None:
            raise ApiError(411, ["Content-Length header not included in request"])
        offset = _int(offset_header) if offset_header is not None else None
        if offset is None or offset < 0:
            raise ApiError(400, ["Upload-Offset header must be a non-negative integer"])
        if offset + len(chunk) > sim_input.size:
            raise ApiError(400, ["Chunk ends at byte %d beyond the declared size %d" % (offset + len(chunk), sim_input.size)])
        digest = hashlib.md5(chunk).hexdigest()
        if checksum is not None and checksum.strip().lower() != digest:
            raise ApiError(412, ["Checksum mismatch: chunk discarded"])
        sim_input.content[offset:offset + len(chunk)] = chunk
        if chunk:
            sim_input.ranges = _merge(sim_input.ranges + [(offset, offset + len(chunk))])
        sim_input.publish()
        return UploadJSON(
            checksum=digest,
            upload_complete=sim_input.complete(),
            chunks_received=[[a, b] for a, b in sim_input.ranges],
        )

    # -- outputs -------------------------------------------------------------------------------

    def output(self, job_id: int, path: str) -> OutputFile:
        job = self._job(job_id)
        if job.status not in ("finished", "error") or path not in job.outputs:
            raise ApiError(404, ["Output %s of job %d not available" % (path, job_id)])
        left = job.output_polls.get(path, 0)
        if left > 0:
            job.output_polls[path] = left - 1
            total = max(self.settings.output_prepare_polls, 1)
            return OutputFile(progress=100 * (total - left) // total, content=b"", created=job.output_time)
        return OutputFile(progress=None, content=job.outputs[path], created=job.output_time)

    # -- the clock -----------------------------------------------------------------------------

    def _finish(
        self, job: SimJob, now: float, status: str, *, exit_code: Optional[int] = None,
        error_string: Optional[str] = None, outputs: bool = True,
        cost: Optional[str] = None, execution_time: Optional[int] = None,
        memory_used: Optional[int] = None,
    ) -> None:
        env = job.env()
        cores = job.data["resources"]["core_count"] or 0
        ran = (now - job.started) if job.started is not None else 0.0
        self._release(job)
        d = job.data
        d["completed_at"] = iso(now)
        d["execution_time"] = execution_time if execution_time is not None else int(round(ran))
        d["cost"] = cost if cost is not None else "%.4f" % (cores * ran / 3600.0 * COST_PER_CORE_HOUR)
        used = _int(env.get(ENV_MEMORY_USED))
        if memory_used is not None:
            d["memory_used"] = memory_used
        elif used is not None:
            d["memory_used"] = used
        else:
            d["memory_used"] = (d["resources"]["memory"] or 0) * 1024 // 4  # sim choice: MB
        if exit_code is not None:
            d["exit_code"] = exit_code
        if error_string is not None:
            d["error_string"] = error_string
        if outputs:
            command = d["command_line"] or ""
            job.outputs["stdout.txt"] = env.get(
                ENV_STDOUT, "lancium sim job %d ran: %s\n" % (d["id"], command)
            ).encode()
            job.outputs["stderr.txt"] = env.get(ENV_STDERR, "").encode()
            for out in d["output_files"]:
                content = ("output file %s of job %d\n" % (out["name"], d["id"])).encode()
                job.outputs.setdefault(out["name"], content)
                out["available"] = True
                out["size"] = len(job.outputs[out["name"]])
            job.output_polls = {name: self.settings.output_prepare_polls for name in job.outputs}
        else:
            for out in d["output_files"]:
                out["available"] = False
                out["size"] = None
        job.output_time = now
        self._set_status(job, status, now)

    def _terminate_now(self, job: SimJob, now: float) -> None:
        job.terminate_requested = False
        job.terminated = True
        state = self.settings.terminate_state
        if state == "finished":
            self._finish(job, now, "finished", outputs=False)
        else:
            self._finish(job, now, "error", error_string=self.settings.terminate_error, outputs=False)

    def _complete_run(self, job: SimJob, now: float) -> None:
        env = job.env()
        exit_code = _int(env.get(ENV_EXIT_CODE))
        if ENV_ERROR in env:
            self._finish(job, now, "error", exit_code=exit_code, error_string=env[ENV_ERROR])
        else:
            self._finish(job, now, "finished", exit_code=exit_code if exit_code is not None else 0)

    def tick(self, now: float) -> None:
        """Move every job as far as the clock allows (one step per job per tick)."""
        s = self.settings
        for job_id in list(self.jobs):
            job = self.jobs[job_id]
            status = job.status
            age = now - job.status_since
            env = job.env()
            if status == "delete pending":
                if job.delete_at is not None and now >= job.delete_at:
                    del self.jobs[job_id]
                continue
            if job.terminate_requested and status in ACTIVE_STATUSES:
                self._terminate_now(job, now)
                continue
            if job.hold:
                continue
            if status == "submitted" and age >= s.submit_seconds:
                self._set_status(job, "queued", now)
            elif status == "queued":
                queue = _float(env.get(ENV_QUEUE_SECONDS))
                wait = queue if queue is not None else s.queue_seconds
                cores = job.data["resources"]["core_count"] or 0
                if (
                    age >= wait
                    and not job.never_start
                    and self.cores_in_use() + cores <= s.total_cores
                ):
                    job.cores_held = cores
                    self._set_status(job, "ready", now)
            elif status == "ready" and age >= s.ready_seconds:
                job.started = now
                self._set_status(job, "running", now)
            elif status == "running":
                run = _float(env.get(ENV_RUN_SECONDS))
                if age >= (run if run is not None else s.run_seconds):
                    self._complete_run(job, now)

    def advance(
        self, job_id: int, status: str, now: float, *, exit_code: Optional[int] = None,
        error_string: Optional[str] = None, cost: Optional[str] = None,
        execution_time: Optional[int] = None, memory_used: Optional[int] = None,
        hold: bool = True,
    ) -> JobJSON:
        """Force a job into ``status``; with ``hold`` the clock leaves it there afterwards."""
        if status not in STATUSES or status in ("created", "delete pending"):
            raise ValueError("cannot advance a job to %r" % status)
        job = self._job(job_id)
        job.hold = hold
        if job.data["submitted_at"] is None:
            job.data["submitted_at"] = iso(now)
        if status in ("submitted", "queued"):
            self._release(job)
            self._set_status(job, status, now)
        elif status in ("ready", "running"):
            job.cores_held = job.data["resources"]["core_count"] or 0
            if status == "running":
                job.started = now
            self._set_status(job, status, now)
        elif status == "finished":
            self._finish(
                job, now, "finished", exit_code=exit_code if exit_code is not None else 0,
                error_string=error_string, cost=cost, execution_time=execution_time,
                memory_used=memory_used,
            )
        else:
            self._finish(
                job, now, "error", exit_code=exit_code,
                error_string=error_string if error_string is not None else "failed",
                cost=cost, execution_time=execution_time, memory_used=memory_used,
            )
        return copy.deepcopy(job.data)


def _merge(ranges: Sequence[Tuple[int, int]]) -> List[Tuple[int, int]]:
    merged: List[Tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _float(text: Optional[str]) -> Optional[float]:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is None or math.isfinite(value) and value >= 0 else None
