"""Checks of the Lancium simulator against Lancium's published OpenAPI description (1.5.0), and of
the validator (``lancium_api``) that the other ``test_lancium_sim_*`` modules rely on.

Known differences between the description and the service, applied to the loaded copy or
accepted by the checks, each with its reason, are in ``SPEC_PATCHES`` and ``UNDECLARED_STATUSES``
(``lancium_api``).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Dict

import pytest

from podgahp_sim.lancium import API_VERSION, BASE_PATH, ROUTES

from lancium_api import BLANK, PUBLISHED, find_operation, validate


# ------------------------------------------------------------------------------------------------
# Tests of the description copy and of the validator itself
# ------------------------------------------------------------------------------------------------


def test_description_is_the_published_1_5_0() -> None:
    assert PUBLISHED["openapi"] == "3.0.2"
    assert PUBLISHED["info"]["version"] == API_VERSION == "1.5.0"
    assert PUBLISHED["servers"][0]["url"].endswith(BASE_PATH)


@pytest.mark.parametrize(
    "method, pattern, operation", [(m, p.pattern, name) for m, p, name in ROUTES], ids=[n for _, _, n in ROUTES]
)
def test_every_sim_route_is_an_operation_of_the_description(method: str, pattern: str, operation: str) -> None:
    example = re.sub(r"\(\\d\+\)", "7", pattern).replace("(.+)", "stdout.txt").replace("\\Z", "")
    template, op = find_operation(method, example)
    expected = "show_gpus" if operation == "show_qos" else operation  # the description reuses it
    assert op["operationId"] == expected, template


JOB = {"$ref": "#/components/schemas/job"}
FIELDS = {"$ref": "#/components/schemas/job_fields"}
VALID_JOB = {
    "id": 1, "name": "a", "status": "created", "notes": None, "account": None,
    "created_at": "2022-07-01T14:00:07.137Z", "updated_at": "2022-07-01T14:00:07.137Z",
    "submitted_at": None, "completed_at": None, "qos": "high", "image": None, "command_line": None,
    "expected_run_time": None, "max_run_time": 600, "callback_url": None, "error_string": None,
    "resources": {"core_count": 2, "gpu_count": None, "memory": 4}, "input_files": [], "output_files": [],
    "environment": [],
}


def _job(**changes: Any) -> Dict[str, Any]:
    job = copy.deepcopy(VALID_JOB)
    job.update(changes)
    return job


@pytest.mark.parametrize(
    "instance, schema, direction, valid",
    [
        ({"job": VALID_JOB}, JOB, "response", True),
        ({"job": _job(status="deleted")}, JOB, "response", False),
        ({"job": _job(id="1")}, JOB, "response", False),
        ({"job": _job(cost=None)}, JOB, "response", False),
        ({"job": _job(cost="0.1", exit_code=0)}, JOB, "response", True),
        ({"job": _job(extra=1)}, JOB, "response", False),
        ({"job": _job(created_at="yesterday")}, JOB, "response", False),
        ({"job": _job(max_run_time=599)}, JOB, "response", False),
        ({"job": _job(resources={"core_count": 3, "gpu_count": None, "memory": 6})}, JOB, "response", False),
        ({"job": _job(resources={"core_count": 2, "memory": 4})}, JOB, "response", False),
        ({"job": _job(environment=[{"variable": "A"}])}, JOB, "response", False),
        ({"job": _job(input_files=[{"id": 1, "source_type": "file", "source": "a", "name": "a", "size": 3}])},
         JOB, "response", False),
        ({"name": "a", "status": "created"}, FIELDS, "request", False),
        ({"name": "a", "resources": {"core_count": 2}}, FIELDS, "request", True),
        ({"name": 5}, FIELDS, "request", False),
        ({}, {"$ref": "#/components/schemas/blank_body"}, "request", True),
        (BLANK, {"$ref": "#/components/schemas/blank_body"}, "request", True),
        ({"a": 1}, {"$ref": "#/components/schemas/blank_body"}, "request", False),
        ({"errors": ["x"]}, {"$ref": "#/components/schemas/error_array"}, "response", True),
        ({"errors": [1]}, {"$ref": "#/components/schemas/error_array"}, "response", False),
        ({"checksum": "x", "upload_complete": True, "chunks_received": [[0, 1, 2]]},
         {"$ref": "#/components/schemas/file_upload"}, "response", False),
    ],
    ids=[
        "job-ok", "job-bad-status", "job-string-id", "job-null-cost", "job-results", "job-extra-key",
        "job-bad-date", "job-run-time-below-min", "job-odd-cores", "job-resources-missing-gpu_count",
        "env-missing-value", "input-size-write-only", "request-read-only-status", "request-partial-ok",
        "request-name-int", "blank-empty-object", "blank-nothing", "blank-non-empty",
        "errors-ok", "errors-non-string", "upload-range-of-three",
    ],
)
def test_validator(instance: Any, schema: Any, direction: str, valid: bool) -> None:
    errors = validate(instance, schema, direction=direction)
    assert (not errors) == valid, errors
