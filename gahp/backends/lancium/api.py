"""The Lancium Compute REST API's client calls (``lancium-api.md``, API 1.5.0): a small blocking client.

Owns the HTTP session, the key -> access-token exchange and its refresh, each operation the backend
uses as one attempt sent through the kit's HTTP door (:mod:`gahp.backends.http`: retries, which
requests may be repeated, ``Retry-After``, the error tree), and reading Lancium's error bodies
(:func:`error_text`). Knows nothing about pilots, job ids or the BLAHP protocol; the official client
libraries are not used because they call the network at import time or hard-code hosts.

Secrets: the API key and access tokens never appear in a log line or an exception message; error
bodies are cut to :data:`~gahp.backends.http.MESSAGE_MAX` characters before they are logged or raised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypedDict, Union

import requests
import urllib3

from gahp.backends.http import Door, Failed, Failure, Service, truncate
from gahp.backends.lancium.credentials import jwt_expiry, read_api_key
from gahp.backends.lancium.settings import ClientSettings
from gahp.core.errors import Conflict, Missing, Unauthorized, Unavailable, refusal
from gahp.core.retry import Backoff

log = logging.getLogger(__name__)

#: What an admin should fix, by status.
HINTS = {401: "credentials refused", 403: "credentials refused",
         402: "billing required — the Lancium account has no billing information; an administrator must add "
              "it on the Lancium portal before pilots can run"}

#: Lifetime assumed for an access token whose ``exp`` cannot be read (the service says 60 min).
DEFAULT_TOKEN_LIFETIME_S = 3600.0


# --------------------------------------------------------------------------------------------
# Raw JSON shapes of the parts of the API podgahp uses.


class ResourcesJSON(TypedDict, total=False):
    core_count: Optional[int]
    memory: Optional[int]
    gpu: Optional[str]
    gpu_count: Optional[int]
    scratch: Optional[int]
    node_exclusive: Optional[bool]


class EnvVarJSON(TypedDict):
    variable: str
    value: str


class JobSummaryJSON(TypedDict):
    """One entry of ``GET /jobs``: only these three keys."""

    id: int
    name: Optional[str]
    status: str


class JobJSON(TypedDict, total=False):
    """``job_fields`` as ``GET /jobs/{id}`` returns it (read-only result keys may be absent)."""

    id: int
    name: Optional[str]
    status: str
    notes: Optional[str]
    qos: Optional[str]
    image: Optional[str]
    command_line: Optional[str]
    max_run_time: Optional[int]
    resources: ResourcesJSON
    environment: List[EnvVarJSON]
    exit_code: Optional[int]
    error_string: Optional[str]
    execution_time: Optional[int]
    memory_used: Optional[int]
    cost: Optional[str]
    submitted_at: Optional[str]
    completed_at: Optional[str]


class InputFileJSON(TypedDict, total=False):
    id: int
    name: str
    source_type: str
    upload_complete: bool


def inputs_by_name(job: Mapping[str, Any]) -> Dict[str, InputFileJSON]:
    """A job's ``input_files`` by name (the last of a name wins); empty when absent or malformed."""
    records = job.get("input_files")
    found: Dict[str, InputFileJSON] = {}
    for record in records if isinstance(records, list) else []:
        if isinstance(record, dict) and isinstance(record.get("id"), int) and isinstance(record.get("name"), str):
            found[record["name"]] = record  # type: ignore[assignment]  # keys checked above
    return found


# --------------------------------------------------------------------------------------------
# The client.


Sleep = Callable[[float], None]


def error_text(response: requests.Response) -> str:
    """The ``errors`` of a Lancium error body as one short line (the raw body if not JSON)."""
    try:
        body: object = response.json()
    except ValueError:
        return truncate(response.text or "")
    errors = body.get("errors", body) if isinstance(body, dict) else body
    if isinstance(errors, dict):
        parts = []
        for key, messages in errors.items():
            if isinstance(messages, list):
                parts.append(f"{key}: {', '.join(str(m) for m in messages)}")
            else:
                parts.append(f"{key}: {messages}")
        return truncate("; ".join(parts))
    if isinstance(errors, list):
        return truncate("; ".join(str(e) for e in errors))
    return truncate(json.dumps(errors))


def _retry_after(response: requests.Response) -> Optional[float]:
    """The answer's ``Retry-After`` in seconds, if it has a usable one."""
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _not_sent(error: requests.RequestException) -> bool:
    """True when the request surely never reached the server (no connection was made)."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    if not isinstance(error, requests.ConnectionError):
        return False
    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


class LanciumClient:
    """Thread-safe: one ``requests.Session`` and one access token shared by all worker threads."""

    def __init__(self, settings: ClientSettings, sleep: Sleep = time.sleep) -> None:
        self.settings = settings
        self._base = settings.base_url.rstrip("/")
        self._session = requests.Session()
        self._session.headers["Accept"] = "application/json"
        self._session.headers["User-Agent"] = "podgahp-lancium"
        self._token_lock = threading.Lock()
        self._token: Optional[str] = None
        self._token_expiry = 0.0
        self.door = Door(Service(f"the Lancium API at {settings.base_url}", settings.retries,
                                 Backoff(settings.backoff_s, settings.backoff_max_s), HINTS), sleep=sleep)

    def close(self) -> None:
        self._session.close()

    # -- tokens --------------------------------------------------------------------------------

    def _fetch_token(self) -> None:
        """``POST /access_tokens`` with the key; the token comes back in the Authorization header."""
        key = read_api_key(self.settings.api_key_file)
        try:
            response = self._send("POST", "/access_tokens", {"Authorization": f"Bearer {key}"},
                                  idempotent=True, what="token exchange", ok=(200, 201))
        except Unauthorized as e:
            raise refusal(
                Unauthorized,
                f"Lancium refused the API key in {self.settings.api_key_file} (HTTP "
                f"{e.status}{': ' + e.body if e.body else ''}); create a new key on the "
                f"Lancium portal and store it there", e.status, e.body) from None
        header = response.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise refusal(Unavailable,
                              "Lancium answered POST /access_tokens without a bearer token in its "
                              "Authorization header", response.status_code, "")
        token = token.strip()
        now = time.time()
        expiry = jwt_expiry(token)
        if expiry is None:
            log.warning("Lancium access token has no readable exp; assuming %d s", DEFAULT_TOKEN_LIFETIME_S)
            expiry = now + DEFAULT_TOKEN_LIFETIME_S
        self._token, self._token_expiry = token, expiry
        log.debug("new Lancium access token, valid for %.0f s", expiry - now)

    def _current_token(self, stale: Optional[str] = None) -> str:
        """A token valid for at least the refresh margin; ``stale`` is one the server refused."""
        with self._token_lock:
            if (self._token is None or self._token == stale
                    or time.time() + self.settings.token_margin_s >= self._token_expiry):
                self._fetch_token()
            assert self._token is not None
            return self._token

    def check_credentials(self) -> None:
        """Force a token exchange (``ping``): proves the key file and the key itself are good."""
        with self._token_lock:
            self._fetch_token()

    # -- requests ------------------------------------------------------------------------------

    def _send(self, method: str, path: str, headers: Mapping[str, str], *, idempotent: bool, what: str,
              ok: Sequence[int], json_body: Any = None, data: Optional[bytes] = None,
              allow_redirects: bool = True) -> requests.Response:
        """One request through the door (:meth:`gahp.backends.http.Door.call`): the answer if its
        status is in ``ok``, else the error of the tree. A request that is not idempotent (creating a
        job or an input) is repeated only when the server cannot have acted on it."""
        url = self._base + path

        def attempt() -> requests.Response:
            try:
                response = self._session.request(
                    method, url, headers=dict(headers), json=json_body, data=data, timeout=self.settings.timeout_s,
                    verify=self.settings.verify, allow_redirects=allow_redirects)
            except requests.RequestException as e:
                raise Failed(Failure(0, f"{type(e).__name__}: {e}", sent=not _not_sent(e))) from None
            if response.status_code in ok:
                return response
            raise Failed(Failure(response.status_code, error_text(response), retry_after=_retry_after(response)))

        return self.door.call(f"{what} ({method} {path})", attempt, idempotent=idempotent)

    def request(self, method: str, path: str, *, ok: Sequence[int] = (200,), idempotent: bool = True,
                what: str = "", json_body: Any = None, data: Optional[bytes] = None,
                headers: Optional[Mapping[str, str]] = None,
                allow_redirects: bool = True) -> requests.Response:
        """An authenticated request; returns the response if its status is in ``ok``, else raises.

        A 401 makes one fresh token exchange and one more attempt (tokens can be revoked early).
        """
        token = self._current_token()
        for first in (True, False):
            all_headers = {"Authorization": f"Bearer {token}"}
            if headers:
                all_headers.update(headers)
            try:
                return self._send(method, path, all_headers, idempotent=idempotent, what=what or path, ok=ok,
                                  json_body=json_body, data=data, allow_redirects=allow_redirects)
            except Unauthorized as e:
                if e.status != 401 or not first:
                    raise
                log.info("%s %s: access token refused, fetching a new one", method, path)
                token = self._current_token(stale=token)
        raise AssertionError("unreachable")  # pragma: no cover

    def request_json(self, method: str, path: str, **kwargs: Any) -> Dict[str, Any]:
        """:meth:`request`, then the body as a JSON object (empty bodies give ``{}``)."""
        response = self.request(method, path, **kwargs)
        if not response.content:
            return {}
        try:
            body = response.json()
        except ValueError:
            raise refusal(Unavailable,
                              f"Lancium answered {method} {path} with a body that is not JSON: "
                              f"{truncate(response.text)}", response.status_code, "") from None
        if not isinstance(body, dict):
            raise refusal(Unavailable,
                              f"Lancium answered {method} {path} with JSON that is not an object",
                              response.status_code, "")
        return body

    # -- the operations the backend uses -------------------------------------------------------

    def list_jobs(self) -> List[JobSummaryJSON]:
        body = self.request_json("GET", "/jobs", what="list jobs")
        jobs = body.get("jobs")
        if not isinstance(jobs, list):
            raise refusal(Unavailable, "Lancium answered GET /jobs without a jobs list", 200, "")
        result: List[JobSummaryJSON] = []
        for item in jobs:
            if isinstance(item, dict) and isinstance(item.get("id"), int) and isinstance(item.get("status"), str):
                name = item.get("name")
                result.append(JobSummaryJSON(id=item["id"], name=name if isinstance(name, str) else None,
                                             status=item["status"]))
        return result

    def show_job(self, job_id: int) -> JobJSON:
        body = self.request_json("GET", f"/jobs/{job_id}", what="show job")
        job = body.get("job")
        if not isinstance(job, dict):
            raise refusal(Unavailable, f"Lancium answered GET /jobs/{job_id} without a job", 200, "")
        return job  # type: ignore[return-value]  # shape checked by the readers of each key

    def create_job(self, fields: Mapping[str, Any]) -> JobJSON:
        body = self.request_json("POST", "/jobs", ok=(200, 201), idempotent=False, what="create job",
                                 json_body={"job": dict(fields)})
        job = body.get("job")
        if not isinstance(job, dict) or not isinstance(job.get("id"), int):
            raise refusal(Unavailable, "Lancium answered POST /jobs without a job id", 201, "")
        return job  # type: ignore[return-value]

    def submit_job(self, job_id: int) -> None:
        self.request("POST", f"/jobs/{job_id}/submit", ok=(200, 202), what="submit job",
                     headers={"Content-Type": "application/json"})

    def terminate_job(self, job_id: int) -> None:
        self.request("POST", f"/jobs/{job_id}/terminate", ok=(200, 202), what="terminate job")

    def delete_job(self, job_id: int) -> None:
        self.request("DELETE", f"/jobs/{job_id}", ok=(200, 202, 204), what="delete job")

    def update_job(self, job_id: int, fields: Mapping[str, Any]) -> JobJSON:
        """``PUT /jobs/{id}``: set the fields of a job not yet submitted (409 once it is)."""
        body = self.request_json("PUT", f"/jobs/{job_id}", what="update job", json_body={"job": dict(fields)})
        job = body.get("job")
        if not isinstance(job, dict) or not isinstance(job.get("id"), int):
            raise refusal(Unavailable, f"Lancium answered PUT /jobs/{job_id} without a job", 200, "")
        return job  # type: ignore[return-value]

    def create_input(self, job_id: int, name: str, *, size: Optional[int] = None,
                     url: Optional[str] = None) -> int:
        """``POST /jobs/{id}/data``: a ``file`` input of ``size`` bytes, or a ``url`` input; its id.

        Not retried after the request may have reached the service: a retry could add the input
        twice. The caller looks for it by name (:func:`inputs_by_name`) instead.
        """
        record: Dict[str, Any] = {"name": name, "cache": False}
        if url is not None:
            record.update(source_type="url", source=url)
        else:
            record.update(source_type="file", size=size or 0)
        body = self.request_json("POST", f"/jobs/{job_id}/data", ok=(200, 201), idempotent=False,
                                 what=f"add input {name}", json_body={"input_file": record})
        created = body.get("input_file", body)
        data_id = created.get("id") if isinstance(created, dict) else None
        if not isinstance(data_id, int):
            raise refusal(Unavailable,
                              f"Lancium answered POST /jobs/{job_id}/data without an input file id", 201, "")
        return data_id

    def delete_input(self, job_id: int, data_id: int) -> None:
        """``DELETE /jobs/{id}/data/{data-id}``; an input already gone is success."""
        try:
            self.request("DELETE", f"/jobs/{job_id}/data/{data_id}", ok=(200, 202, 204), what="delete input")
        except Missing:
            pass

    def upload(self, job_id: int, data_id: int, name: str, content: bytes, chunk_bytes: int) -> None:
        """Send ``content`` to a ``file`` input in MD5-checked ``PATCH`` chunks.

        A chunk sent again writes the same bytes at the same offset, so each ``PATCH`` is retried
        like a read; a 409 "already completed" after a lost answer is success once the service
        confirms the upload is complete. A zero-byte file is complete on creation.
        """
        for offset in range(0, len(content), chunk_bytes):
            chunk = content[offset:offset + chunk_bytes]
            try:
                self.request(
                    "PATCH", f"/jobs/{job_id}/data/{data_id}", ok=(200, 201, 202), what=f"upload {name}",
                    data=chunk, headers={"Content-Type": "application/offset+octet-stream",
                                         "Upload-Offset": str(offset),
                                         "Upload-Checksum": hashlib.md5(chunk).hexdigest()})
            except Conflict:
                if not self.input_complete(job_id, data_id):
                    raise
                log.info("upload of %s to job %d: complete after a lost answer", name, job_id)
                return

    def input_complete(self, job_id: int, data_id: int) -> bool:
        """Whether the service holds every byte of an input (``GET /jobs/{id}/data/{data-id}``)."""
        body = self.request_json("GET", f"/jobs/{job_id}/data/{data_id}", what="input status")
        record = body.get("input_file", body)
        return isinstance(record, dict) and record.get("upload_complete") is True

    def output(self, job_id: int, path: str) -> Optional[bytes]:
        """An output file's bytes; None while the service is still preparing it (202).

        204 (exists, empty) gives ``b""``; 404 raises :class:`~gahp.core.errors.Missing`.
        """
        response = self.request("GET", f"/jobs/{job_id}/output/{path}", ok=(200, 202, 204),
                                what=f"output {path}")
        if response.status_code == 202:
            return None
        if response.status_code == 204:
            return b""
        return response.content
