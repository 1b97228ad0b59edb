"""Lancium's published OpenAPI description (1.5.0), and a client that holds the simulator to it.

What the ``test_lancium_sim_*`` modules share: a small OpenAPI 3.0 schema validator (``$ref``,
``nullable``, ``readOnly``/``writeOnly``, the JSON-Schema keywords the description uses), and
:class:`ApiClient`, which validates every request it sends and every response it receives against the
operation of the description it belongs to. The ``sim`` and ``api`` fixtures are in ``conftest.py``.

Known differences between the description and the service, applied to the loaded copy or
accepted by the checks, each with its reason, are in ``SPEC_PATCHES`` and ``UNDECLARED_STATUSES``.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import requests

from podgahp_sim.lancium import API_VERSION, LanciumSim, LanciumSimSettings
from paths import DATA
from polling import wait_until

SPEC_FILE = DATA / "lancium-openapi.json"
PUBLISHED: Dict[str, Any] = json.loads(SPEC_FILE.read_text())

BLANK = object()
"""Stands for an absent request/response body (the description's ``"type": "Blank Body"``)."""

# Differences between the published description and the service's documented behaviour.
SPEC_PATCHES = [
    (
        # Real responses (lancium-compute-api docstrings) and clients use ``output_files``; the
        # description misspells the property ``output_fies`` under additionalProperties: false.
        ("components", "schemas", "job_fields", "properties", "output_files"),
        {"$ref": "#/components/schemas/job_fields/properties/output_fies"},
    ),
    (
        # ``size`` is "only required (or valid) for input files with a source_type of 'file'";
        # the simulator enforces that condition, the schema cannot express it.
        ("components", "schemas", "input_file_fields", "required"),
        ["source_type", "source", "name"],
    ),
]

UNDECLARED_STATUSES: Set[Tuple[str, str, int]] = {
    # Malformed input-file fields: create_input_file declares no 400 (only 201/401/404/409).
    ("POST", "/jobs/{id}/data", 400),
    # Missing or non-integer Upload-Offset, or a chunk past the declared size: no 400 declared.
    ("PATCH", "/jobs/{id}/data/{data-id}", 400),
}

SPEC: Dict[str, Any] = copy.deepcopy(PUBLISHED)
for _where, _value in SPEC_PATCHES:
    _node = SPEC
    for _key in _where[:-1]:
        _node = _node[_key]
    _node[_where[-1]] = _value

DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")


# ------------------------------------------------------------------------------------------------
# Validator
# ------------------------------------------------------------------------------------------------


def resolve(node: Any) -> Any:
    """Follow ``$ref`` (local JSON pointers only) until a schema without one."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        node = SPEC
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        seen += 1
        assert seen < 20, "reference loop at %s" % ref
    return node


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    # Non-standard types of the description's ``blank_body`` and ``job_request``.
    "Empty JSON object": lambda v: v == {},
    "Blank Body": lambda v: v is BLANK,
}


def validate(
    instance: Any, schema: Any, *, direction: str = "response", ignore_required: bool = False,
    skip: Sequence[str] = (), where: str = "$",
) -> List[str]:
    """Errors of ``instance`` against an OpenAPI 3.0 schema (empty list = valid).

    ``direction`` is ``request`` or ``response``: read-only properties must not be sent and count
    as required only in responses; write-only ones the reverse.  ``oneOf`` is checked as
    ``anyOf`` because the description's alternatives overlap (``{}`` is both a ``job`` and an
    "Empty JSON object").  Keywords in ``skip`` are not checked.  Unknown keywords (such as the
    description's lower-case ``multipleof``) are ignored, as JSON Schema does.

    Job attributes listed as required "are only required for the job to be submitted" (description
    of create_job/update_job): in requests, ``required`` is not enforced inside ``job_fields``
    (``ignore_required``, reset by every other ``$ref``).
    """
    if isinstance(schema, dict) and "$ref" in schema:
        ignore_required = direction == "request" and schema["$ref"].endswith("/job_fields")
    schema = resolve(schema)
    errors: List[str] = []
    if not isinstance(schema, dict):
        return errors
    if instance is None and instance is not BLANK:
        if schema.get("nullable"):
            return errors
        if "type" in schema or "properties" in schema:
            return ["%s: null where %s is not nullable" % (where, schema.get("type", "object"))]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            alternatives = [
                validate(instance, alt, direction=direction, ignore_required=ignore_required, skip=skip, where=where)
                for alt in schema[key]
            ]
            if all(alternatives):
                errors.append("%s: matches no alternative of %s: %s" % (where, key, alternatives))
    for alt in schema.get("allOf", []):
        errors += validate(instance, alt, direction=direction, ignore_required=ignore_required, skip=skip, where=where)
    kind = schema.get("type")
    if kind is not None and "type" not in skip:
        check = _TYPES.get(kind)
        assert check is not None, "unknown type %r in the description at %s" % (kind, where)
        if not check(instance):
            return errors + ["%s: %r is not of type %s" % (where, instance, kind)]
    if "enum" in schema and "enum" not in skip and instance not in schema["enum"]:
        errors.append("%s: %r not in %s" % (where, instance, schema["enum"]))
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        if "minimum" in schema and "minimum" not in skip and instance < schema["minimum"]:
            errors.append("%s: %r < minimum %r" % (where, instance, schema["minimum"]))
        if "maximum" in schema and "maximum" not in skip and instance > schema["maximum"]:
            errors.append("%s: %r > maximum %r" % (where, instance, schema["maximum"]))
        if "multipleOf" in schema and "multipleOf" not in skip and instance % schema["multipleOf"]:
            errors.append("%s: %r is not a multiple of %r" % (where, instance, schema["multipleOf"]))
    if isinstance(instance, str) and schema.get("format") == "date-time" and not DATE_TIME.match(instance):
        errors.append("%s: %r is not an ISO 8601 date-time" % (where, instance))
    if isinstance(instance, list):
        if "minItems" in schema and len(instance) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (where, schema["minItems"]))
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (where, schema["maxItems"]))
        if "items" in schema:
            for i, item in enumerate(instance):
                errors += validate(item, schema["items"], direction=direction, ignore_required=ignore_required,
                                   skip=skip, where="%s[%d]" % (where, i))
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []) if not ignore_required else []:
            prop = resolve(props.get(name, {}))
            if direction == "request" and prop.get("readOnly") or direction == "response" and prop.get("writeOnly"):
                continue
            if name not in instance:
                errors.append("%s: required property %r missing" % (where, name))
        for name, value in instance.items():
            if name in props:
                prop = resolve(props[name])
                if direction == "request" and prop.get("readOnly"):
                    errors.append("%s.%s: read-only property sent in a request" % (where, name))
                if direction == "response" and prop.get("writeOnly"):
                    errors.append("%s.%s: write-only property returned in a response" % (where, name))
                errors += validate(value, props[name], direction=direction, ignore_required=ignore_required,
                                   skip=skip, where="%s.%s" % (where, name))
            elif schema.get("additionalProperties") is False:
                errors.append("%s: unexpected property %r" % (where, name))
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(value, schema["additionalProperties"], direction=direction,
                                   ignore_required=ignore_required, skip=skip, where="%s.%s" % (where, name))
    return errors


# ------------------------------------------------------------------------------------------------
# Operations
# ------------------------------------------------------------------------------------------------


def _template_regex(template: str) -> "re.Pattern[str]":
    parts = re.split(r"(\{[^}]+\})", template)
    out = "".join(
        ("(.+)" if p == "{file-path}" else "([^/]+)") if p.startswith("{") else re.escape(p) for p in parts
    )
    return re.compile(out + r"\Z")


_TEMPLATES = sorted(SPEC["paths"], key=lambda t: (t.count("{"), -len(t)))


def find_operation(method: str, path: str) -> Tuple[str, Dict[str, Any]]:
    """(path template, operation) of the description that ``method path`` (below /api/v1) calls."""
    for template in _TEMPLATES:
        if _template_regex(template).match(path) and method.lower() in SPEC["paths"][template]:
            return template, SPEC["paths"][template][method.lower()]
    raise AssertionError("%s %s is no operation of the description" % (method, path))


def request_errors(method: str, path: str, body: Any, skip: Sequence[str] = ()) -> List[str]:
    """Errors of a JSON request body (BLANK = none sent) against the operation's requestBody."""
    _, op = find_operation(method, path)
    request_body = op.get("requestBody")
    if request_body is None:
        return [] if body is BLANK else ["%s %s takes no body" % (method, path)]
    if body is BLANK:
        return ["%s %s requires a body" % (method, path)] if request_body.get("required") else []
    schema = request_body.get("content", {}).get("application/json", {}).get("schema")
    if schema is None:
        return []
    return validate(body, schema, direction="request", skip=skip)


def response_errors(method: str, path: str, resp: requests.Response, *, skip: Sequence[str] = (),
                    injected: bool = False) -> List[str]:
    """What about ``resp`` the description does not allow for this operation."""
    template, op = find_operation(method, path)
    errors: List[str] = []
    if resp.headers.get("X-Current-API-Version") != API_VERSION:
        errors.append("X-Current-API-Version is %r" % resp.headers.get("X-Current-API-Version"))
    if resp.headers.get("X-Deprecated-API-Used") != "false":
        errors.append("X-Deprecated-API-Used is %r" % resp.headers.get("X-Deprecated-API-Used"))
    declared = op["responses"].get(str(resp.status_code))
    if declared is None:
        if not injected and (method, template, resp.status_code) not in UNDECLARED_STATUSES:
            errors.append("%s %s answered %d, declared: %s" % (method, template, resp.status_code, sorted(op["responses"])))
        if resp.status_code >= 400 and not _is_error_body(resp):
            errors.append("undeclared error %d without an {\"errors\": ...} body" % resp.status_code)
        return errors
    declared = resolve(declared)
    for name, header in declared.get("headers", {}).items():
        value = resp.headers.get(name)
        if value is None:
            continue
        schema = resolve(header.get("schema", {}))
        if schema.get("type") == "integer" and not re.fullmatch(r"\d+", value):
            errors.append("header %s=%r is not an integer" % (name, value))
        if schema.get("format") == "date-time" and not DATE_TIME.match(value):
            errors.append("header %s=%r is not a date-time" % (name, value))
    content = declared.get("content", {})
    media = resp.headers.get("Content-Type", "").split(";")[0].strip()
    if resp.status_code == 204 or not resp.content:
        if resp.content:
            errors.append("204 with a body")
        return errors
    if content and media not in content:
        errors.append("Content-Type %r, declared: %s" % (media, sorted(content)))
        return errors
    if media == "application/json":
        schema = content.get("application/json", {}).get("schema")
        if schema is not None:
            errors += validate(resp.json(), schema, direction="response", skip=skip)
    elif resp.status_code >= 400:
        errors.append("error %d without a JSON body" % resp.status_code)
    return errors


def _is_error_body(resp: requests.Response) -> bool:
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and set(body) == {"errors"} and isinstance(body["errors"], (list, dict))


# ------------------------------------------------------------------------------------------------
# Client and fixtures
# ------------------------------------------------------------------------------------------------


class ApiClient:
    """``requests`` against the simulator; every exchange is checked against the description."""

    def __init__(self, sim: LanciumSim) -> None:
        self.sim = sim
        self.http = requests.Session()
        self.token: Optional[str] = None
        self.calls: List[Tuple[str, str, int]] = []
        self.skip: Sequence[str] = ()
        """Schema keywords not checked (both ways) unless a call says otherwise."""

    def close(self) -> None:
        self.http.close()

    def login(self) -> str:
        resp = self.call("POST", "/access_tokens", auth="key")
        assert resp.status_code == 201, resp.text
        self.token = resp.headers["Authorization"].split(" ", 1)[1]
        return self.token

    def call(
        self, method: str, path: str, body: Any = BLANK, *, auth: str = "token",
        headers: Optional[Dict[str, str]] = None, data: Any = None, request_valid: bool = True,
        skip: Optional[Sequence[str]] = None, injected: bool = False, timeout: float = 10.0,
    ) -> requests.Response:
        """One request; ``auth`` is ``token``, ``key`` or ``none``.

        ``request_valid`` says whether the body is meant to satisfy the description (tests of
        400s send invalid ones on purpose; the description must reject those too).
        """
        skip = self.skip if skip is None else skip
        if data is None and body is not BLANK:
            problems = request_errors(method, path, body, skip)
            assert bool(not problems) == request_valid, (
                "request %s %s %r: %s" % (method, path, body, problems or "valid, but sent as invalid")
            )
        all_headers = dict(headers or {})
        if auth == "token":
            if self.token is None:
                self.login()
            all_headers["Authorization"] = "Bearer %s" % self.token
        elif auth == "key":
            all_headers["Authorization"] = "Bearer %s" % self.sim.api_key
        kwargs: Dict[str, Any] = {"headers": all_headers, "timeout": timeout}
        if data is not None:
            kwargs["data"] = data
        elif body is not BLANK:
            kwargs["json"] = body
        resp = self.http.request(method, self.sim.url + path, **kwargs)
        problems = response_errors(method, path, resp, skip=skip, injected=injected)
        assert not problems, "%s %s -> %d %s: %s" % (method, path, resp.status_code, resp.text[:300], problems)
        self.calls.append((method, path, resp.status_code))
        return resp

    # -- conveniences --------------------------------------------------------------------------

    def create(self, body: Any = BLANK, **kw: Any) -> Dict[str, Any]:
        resp = self.call("POST", "/jobs", body, **kw)
        assert resp.status_code == 201, resp.text
        job: Dict[str, Any] = resp.json()["job"]
        return job

    def show(self, job_id: int) -> Dict[str, Any]:
        resp = self.call("GET", "/jobs/%d" % job_id)
        assert resp.status_code == 200, resp.text
        job: Dict[str, Any] = resp.json()["job"]
        return job

    def submit(self, job_id: int) -> requests.Response:
        return self.call("POST", "/jobs/%d/submit" % job_id)

    def wait(self, job_id: int, statuses: Sequence[str], timeout: float = 5.0) -> Tuple[Dict[str, Any], List[str]]:
        """Poll ``GET /jobs/{id}`` until one of ``statuses``; returns the job and the states seen."""
        seen: List[str] = []
        def show() -> Dict[str, Any]:
            job = self.show(job_id)
            if not seen or seen[-1] != job["status"]:
                seen.append(job["status"])
            return job

        job = wait_until(show, "job %d in %s" % (job_id, statuses), timeout, 0.01,
                         done=lambda job: job["status"] in statuses)
        return job, seen


def pilot_job(**overrides: Any) -> Dict[str, Any]:
    """Fields of a submittable job, as the lancium backend would send them."""
    job: Dict[str, Any] = {
        "name": "pilot-1",
        "image": "lancium/ubuntu",
        "command_line": "/bin/pilot --run",
        "qos": "high",
        "max_run_time": 600,
        "resources": {"core_count": 2, "memory": 4},
        "environment": [],
    }
    for key, value in overrides.items():
        if key in ("core_count", "memory", "gpu", "gpu_count", "scratch"):
            job["resources"][key] = value
        else:
            job[key] = value
    return job


def env(**variables: Any) -> List[Dict[str, str]]:
    return [{"variable": "PODGAHP_SIM_" + k.upper(), "value": str(v)} for k, v in variables.items()]


def fast_settings(**overrides: Any) -> LanciumSimSettings:
    values: Dict[str, Any] = dict(
        tick=0.01, submit_seconds=0.03, queue_seconds=0.03, run_seconds=0.15, delete_seconds=0.15,
    )
    values.update(overrides)
    return LanciumSimSettings(**values)
