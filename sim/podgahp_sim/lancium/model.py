"""State of the simulated Lancium Compute service: jobs, input uploads, outputs and the clock.

Owns the jobs of the simulated account: submit checks, the state machine
``created -> submitted -> queued -> ready -> running -> finished | error`` driven by :meth:`tick`,
chunked input uploads and the output files a finished job leaves behind.

Must not know: HTTP, sockets, headers, tokens (all in :mod:`podgahp_sim.lancium`), and nothing of
``gahp.backends`` -- clients meet the simulator only over HTTP.  Every method here expects the
caller to hold one lock around the whole :class:`LanciumState`.

Facts not stated by the published description are marked "sim choice" below.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, cast

from .fields import (
    ACTIVE_STATUSES,
    COST_PER_CORE_HOUR,
    ENV_ERROR,
    ENV_EXIT_CODE,
    ENV_MEMORY_USED,
    ENV_NEVER_START,
    ENV_QUEUE_SECONDS,
    ENV_RUN_SECONDS,
    ENV_STDERR,
    ENV_STDOUT,
    GPU_CATALOGUE,
    GPU_COUNT_RANGE,
    JOB_INT_FIELDS,
    JOB_STR_FIELDS,
    MAX_CORES,
    MAX_MEMORY_GB,
    MAX_RUN_TIME_RANGE,
    QOS_LEVELS,
    SCRATCH_RANGE,
    STATUSES,
    ApiError,
    EnvVarJSON,
    Errors,
    InputFileJSON,
    JobJSON,
    JobSummaryJSON,
    LanciumSimSettings,
    OutputFileJSON,
    ResourcesJSON,
    UploadJSON,
    add_error,
    check_input_fields,
    check_job_fields,
    iso,
    round_up_resources,
    unwrap_body,
)


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

    # -- internals -----------------------------------------------------------------------------

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
        for key in JOB_STR_FIELDS + JOB_INT_FIELDS:
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
                add_error(errors, "input_files", "input file %s does not belong to this job" % ref)

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
                add_error(errors, key, "must be present")
        if d["qos"] is None:
            add_error(errors, "qos", "must be present")
        elif d["qos"] not in QOS_LEVELS:
            add_error(errors, "qos", "must be a valid value")
        mrt = d["max_run_time"]
        if mrt is None:
            add_error(errors, "max_run_time", "must be present")
        elif not MAX_RUN_TIME_RANGE[0] <= mrt <= MAX_RUN_TIME_RANGE[1]:
            add_error(errors, "max_run_time", "must be between %d and %d" % MAX_RUN_TIME_RANGE)
        cores = r["core_count"]
        if cores is None:
            add_error(errors, "core_count", "must be present")
        else:
            if cores % 2:
                add_error(errors, "core_count", "must be an even number")
            if not 1 <= cores <= MAX_CORES:
                add_error(errors, "core_count", "must be between 1 and %d" % MAX_CORES)
        memory = r["memory"]
        if memory is None:
            add_error(errors, "memory", "must be present")
        elif not 1 <= memory <= MAX_MEMORY_GB:
            add_error(errors, "memory", "must be between 1 and %d" % MAX_MEMORY_GB)
        if r["gpu"] is not None:
            if r["gpu"] not in [g["id"] for g in GPU_CATALOGUE]:
                add_error(errors, "gpu", "must be a valid value")
            if r["gpu_count"] is None:
                add_error(errors, "gpu_count", "must be present when a gpu type is requested")
        if r["gpu_count"] is not None and not GPU_COUNT_RANGE[0] <= r["gpu_count"] <= GPU_COUNT_RANGE[1]:
            add_error(errors, "gpu_count", "must be between %d and %d" % GPU_COUNT_RANGE)
        if r["scratch"] is not None and not SCRATCH_RANGE[0] <= r["scratch"] <= SCRATCH_RANGE[1]:
            add_error(errors, "scratch", "must be between %d and %d" % SCRATCH_RANGE)
        for sim_input in job.inputs.values():
            if not sim_input.complete():
                add_error(errors, "input_files", "%s has not been completely uploaded" % sim_input.record["name"])
        env = job.env()
        for var in (ENV_RUN_SECONDS, ENV_QUEUE_SECONDS):
            if var in env and _float(env[var]) is None:
                add_error(errors, "environment", "%s must be a number of seconds" % var)
        for var in (ENV_EXIT_CODE, ENV_MEMORY_USED):
            if var in env and _int(env[var]) is None:
                add_error(errors, "environment", "%s must be an integer" % var)
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
        if job.status == "delete pending":
            raise ValueError("job %d is being deleted" % job_id)
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
