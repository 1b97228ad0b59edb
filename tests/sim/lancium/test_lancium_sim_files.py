"""Lancium simulator: job input files with chunked uploads, and output downloads."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterator, Optional

import pytest

from podgahp_sim.lancium import LanciumSim

from lancium_api import ApiClient, env, pilot_job


def _job(api: ApiClient, **overrides: Any) -> int:
    job_id: int = api.create({"job": pilot_job(**overrides)})["id"]
    return job_id


def _add_file(api: ApiClient, job_id: int, size: int, name: str = "pilot.token") -> int:
    resp = api.call("POST", "/jobs/%d/data" % job_id,
                    {"input_file": {"source_type": "file", "source": name, "name": name, "size": size}})
    assert resp.status_code == 201, resp.text
    data_id: int = resp.json()["input_file"]["id"]
    return data_id


def _patch(api: ApiClient, job_id: int, data_id: int, chunk: bytes, offset: Optional[int],
           checksum: Optional[str] = None) -> Any:
    headers = {"Content-Type": "application/octet-stream"}
    if offset is not None:
        headers["Upload-Offset"] = str(offset)
    if checksum is not None:
        headers["Upload-Checksum"] = checksum
    return api.call("PATCH", "/jobs/%d/data/%d" % (job_id, data_id), data=chunk, headers=headers)


# -- input files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, uploadable",
    [
        ({"input_file": {"source_type": "file", "source": "t", "name": "t", "size": 10}}, True),
        ({"source_type": "file", "source": "t", "name": "t", "size": 10, "cache": True}, True),
        ({"input_file": {"source_type": "data", "source": "datasets/x.npz", "name": "x.npz"}}, False),
        ({"input_file": {"source_type": "url", "source": "https://example.org/p.sh", "name": "p.sh"}}, False),
    ],
    ids=["file-wrapped", "file-bare", "data", "url"],
)
def test_create_input_file(api: ApiClient, body: Dict[str, Any], uploadable: bool) -> None:
    job_id = _job(api)
    resp = api.call("POST", "/jobs/%d/data" % job_id, body)
    assert resp.status_code == 201
    record = resp.json()["input_file"]
    fields = body.get("input_file", body)
    assert isinstance(record["id"], int) and record["name"] == fields["name"]
    assert "size" not in record  # write-only
    assert record["cache"] == fields.get("cache", False)
    if uploadable:
        assert (record["upload_complete"], record["chunks_received"]) == (False, [])
    else:
        assert "upload_complete" not in record and "chunks_received" not in record
    assert api.show(job_id)["input_files"] == [record]
    got = api.call("GET", "/jobs/%d/data/%d" % (job_id, record["id"]))
    assert got.status_code == 200 and got.json() == {"input_file": record}


@pytest.mark.parametrize(
    "fields, schema_valid, field",
    [
        ({"source_type": "ftp", "source": "a", "name": "a"}, False, "source_type"),
        ({"source_type": "file", "source": "a", "size": 1}, False, "name"),
        ({"source_type": "url", "name": "a"}, False, "source"),
        ({"source_type": "file", "source": "a", "name": "a", "size": 1, "mode": "0755"}, False, "mode"),
        ({"source_type": "file", "source": "a", "name": "a"}, True, "size"),
        ({"source_type": "file", "source": "a", "name": "a", "size": -1}, True, "size"),
        ({"source_type": "url", "source": "https://x/a", "name": "a", "size": 1}, True, "size"),
    ],
    ids=["unknown-source-type", "no-name", "url-without-source", "unknown-key", "file-without-size",
         "negative-size", "url-with-size"],
)
def test_create_input_file_refuses_bad_fields(api: ApiClient, fields: Dict[str, Any], schema_valid: bool,
                                             field: str) -> None:
    # The description declares no 400 here; see UNDECLARED_STATUSES.
    job_id = _job(api)
    resp = api.call("POST", "/jobs/%d/data" % job_id, {"input_file": fields}, request_valid=schema_valid)
    assert resp.status_code == 400
    assert field in resp.json()["errors"]


def test_input_files_inline_in_create(api: ApiClient, sim: LanciumSim) -> None:
    inline = [{"source_type": "url", "source": "https://example.org/p.sh", "name": "p.sh"}]
    job = api.create({"job": pilot_job(input_files=inline)})
    (record,) = job["input_files"]
    assert record["source"] == "https://example.org/p.sh" and isinstance(record["id"], int)
    assert api.submit(job["id"]).status_code == 202


def test_create_input_file_unknown_job_or_submitted(api: ApiClient) -> None:
    body = {"input_file": {"source_type": "file", "source": "a", "name": "a", "size": 1}}
    assert api.call("POST", "/jobs/777/data", body).status_code == 404
    job_id = _job(api)
    api.submit(job_id)
    assert api.call("POST", "/jobs/%d/data" % job_id, body).status_code == 409


def test_chunked_upload_out_of_order_with_checksums(api: ApiClient, sim: LanciumSim) -> None:
    content = os.urandom(3000)
    job_id = _job(api)
    data_id = _add_file(api, job_id, len(content))
    tail, head = content[1800:], content[:1800]
    resp = _patch(api, job_id, data_id, tail, 1800, hashlib.md5(tail).hexdigest())
    assert resp.status_code == 202
    assert resp.json() == {"checksum": hashlib.md5(tail).hexdigest(), "upload_complete": False,
                           "chunks_received": [[1800, 3000]]}
    assert api.submit(job_id).status_code == 400  # not uploaded yet
    resp = _patch(api, job_id, data_id, head, 0)
    assert resp.status_code == 201
    assert resp.json() == {"checksum": hashlib.md5(head).hexdigest(), "upload_complete": True,
                           "chunks_received": [[0, 3000]]}
    assert sim.input_bytes(job_id, data_id) == content
    record = api.call("GET", "/jobs/%d/data/%d" % (job_id, data_id)).json()["input_file"]
    assert record["upload_complete"] is True
    assert api.submit(job_id).status_code == 202


def test_submit_refuses_incomplete_upload(api: ApiClient) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 10)
    _patch(api, job_id, data_id, b"12345", 0)
    resp = api.submit(job_id)
    assert resp.status_code == 400 and "input_files" in resp.json()["errors"]


def test_empty_file_needs_no_upload(api: ApiClient) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 0)
    record = api.call("GET", "/jobs/%d/data/%d" % (job_id, data_id)).json()["input_file"]
    assert record["upload_complete"] is True
    assert api.submit(job_id).status_code == 202


def test_checksum_mismatch_is_412_and_discards_chunk(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 4)
    resp = _patch(api, job_id, data_id, b"abcd", 0, hashlib.md5(b"abce").hexdigest())
    assert resp.status_code == 412
    assert sim.input_bytes(job_id, data_id) == b"\0\0\0\0"
    assert sim.input_files(job_id)[0]["chunks_received"] == []
    assert _patch(api, job_id, data_id, b"abcd", 0, hashlib.md5(b"abcd").hexdigest().upper()).status_code == 201


def test_upload_without_content_length_is_411(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 4)

    def body() -> Iterator[bytes]:  # requests sends a generator with chunked transfer coding
        yield b"ab"
        yield b"cd"

    resp = api.call("PATCH", "/jobs/%d/data/%d" % (job_id, data_id), data=body(), headers={"Upload-Offset": "0"})
    assert resp.status_code == 411
    assert sim.input_files(job_id)[0]["chunks_received"] == []


def test_upload_conflicts_are_409(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 2)
    assert _patch(api, job_id, data_id, b"ok", 0).status_code == 201
    assert _patch(api, job_id, data_id, b"ok", 0).status_code == 409  # already complete
    other = _job(api)
    other_data = _add_file(api, other, 2)
    sim.advance(other, "running")  # submitted behind the upload's back
    assert _patch(api, other, other_data, b"ok", 0).status_code == 409


@pytest.mark.parametrize("source_type", ["data", "url"])
def test_upload_to_non_file_source_is_422(api: ApiClient, source_type: str) -> None:
    job_id = _job(api)
    resp = api.call("POST", "/jobs/%d/data" % job_id,
                    {"input_file": {"source_type": source_type, "source": "https://x/y", "name": "y"}})
    data_id = resp.json()["input_file"]["id"]
    assert _patch(api, job_id, data_id, b"x", 0).status_code == 422


@pytest.mark.parametrize(
    "offset, chunk",
    [(None, b"ab"), (-1, b"ab"), (3, b"ab")],
    ids=["no-offset", "negative-offset", "past-declared-size"],
)
def test_upload_bad_offset_is_400(api: ApiClient, offset: Optional[int], chunk: bytes) -> None:
    # The description declares no 400 here; see UNDECLARED_STATUSES.
    job_id = _job(api)
    data_id = _add_file(api, job_id, 4)
    resp = _patch(api, job_id, data_id, chunk, offset)
    assert resp.status_code == 400 and resp.json()["errors"]


def test_upload_unknown_ids_are_404(api: ApiClient) -> None:
    job_id = _job(api)
    assert _patch(api, job_id, 999, b"x", 0).status_code == 404
    assert _patch(api, 999, 1, b"x", 0).status_code == 404
    assert api.call("GET", "/jobs/%d/data/999" % job_id).status_code == 404


def test_delete_input_file(api: ApiClient) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 5)
    resp = api.call("DELETE", "/jobs/%d/data/%d" % (job_id, data_id))
    assert resp.status_code == 202 and resp.json() == {}
    assert api.call("GET", "/jobs/%d/data/%d" % (job_id, data_id)).status_code == 404
    assert api.call("DELETE", "/jobs/%d/data/%d" % (job_id, data_id)).status_code == 404
    assert api.show(job_id)["input_files"] == []
    assert api.submit(job_id).status_code == 202  # the incomplete file is gone
    kept = _job(api)
    kept_data = _add_file(api, kept, 0)
    api.submit(kept)
    assert api.call("DELETE", "/jobs/%d/data/%d" % (kept, kept_data)).status_code == 409


def test_reupload_restarts_an_upload(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _job(api)
    data_id = _add_file(api, job_id, 4)
    _patch(api, job_id, data_id, b"ab", 0)
    resp = api.call("POST", "/jobs/%d/data/%d/reupload" % (job_id, data_id))
    assert resp.status_code == 202
    assert resp.json()["input_file"]["chunks_received"] == []
    url = api.call("POST", "/jobs/%d/data" % job_id,
                   {"input_file": {"source_type": "url", "source": "https://x/y", "name": "y"}})
    url_id = url.json()["input_file"]["id"]
    assert api.call("POST", "/jobs/%d/data/%d/reupload" % (job_id, url_id)).status_code == 400


# -- outputs --------------------------------------------------------------------------------------


def _finished(api: ApiClient, sim: LanciumSim, **variables: Any) -> int:
    extra: Dict[str, Any] = {}
    if "output_files" in variables:
        extra["output_files"] = variables.pop("output_files")
    job_id = _job(api, environment=env(run_seconds=0.05, **variables), **extra)
    api.submit(job_id)
    api.wait(job_id, ["finished", "error"])
    return job_id


def _download(api: ApiClient, job_id: int, name: str, headers: Optional[Dict[str, str]] = None) -> Any:
    return api.call("GET", "/jobs/%d/output/%s" % (job_id, name), headers=headers)


def test_output_not_available_before_the_job_ends(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _job(api, environment=env(run_seconds=30))
    assert _download(api, job_id, "stdout.txt").status_code == 404
    api.submit(job_id)
    api.wait(job_id, ["running"])
    assert _download(api, job_id, "stdout.txt").status_code == 404
    assert _download(api, 4711, "stdout.txt").status_code == 404


def test_output_202_then_200(api: ApiClient, sim: LanciumSim) -> None:
    job_id = _finished(api, sim)
    first = _download(api, job_id, "stdout.txt")
    assert first.status_code == 202 and isinstance(first.json()["progress"], int)
    resp = _download(api, job_id, "stdout.txt")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "application/octet-stream"
    assert int(resp.headers["X-File-Size"]) == len(resp.content)
    assert "X-Last-Modified" in resp.headers and "x-Date-Created" in resp.headers
    assert b"/bin/pilot --run" in resp.content  # names what ran
    assert _download(api, job_id, "stdout.txt").content == resp.content  # repeatable
    assert _download(api, job_id, "stderr.txt").status_code == 202
    empty = _download(api, job_id, "stderr.txt")
    assert empty.status_code == 204 and empty.content == b""


def test_output_prepare_polls_are_configurable(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.output_prepare_polls = 3
    job_id = _finished(api, sim)
    answers = [_download(api, job_id, "stdout.txt") for _ in range(4)]
    assert [a.status_code for a in answers] == [202, 202, 202, 200]
    progress = [a.json()["progress"] for a in answers[:3]]
    assert progress == sorted(progress) and all(0 <= p < 100 for p in progress)
    sim.settings.output_prepare_polls = 0
    assert _download(api, _finished(api, sim), "stdout.txt").status_code == 200


def test_output_content_from_environment(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.output_prepare_polls = 0
    job_id = _finished(api, sim, stdout="hello\n", stderr="warning: x\n")
    assert _download(api, job_id, "stdout.txt").content == b"hello\n"
    assert _download(api, job_id, "stderr.txt").content == b"warning: x\n"
    assert sim.outputs(job_id) == {"stdout.txt": b"hello\n", "stderr.txt": b"warning: x\n"}


def test_failed_job_keeps_its_outputs(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.output_prepare_polls = 0
    job_id = _finished(api, sim, error="pilot crashed", stderr="Traceback\n")
    assert api.show(job_id)["status"] == "error"
    assert _download(api, job_id, "stderr.txt").content == b"Traceback\n"


@pytest.mark.parametrize(
    "header, status, expected, content_range",
    [
        ("bytes=0-4", 206, slice(0, 5), "bytes 0-4/{n}"),
        ("bytes=5-", 206, slice(5, None), "bytes 5-{last}/{n}"),
        ("bytes=-3", 206, slice(-3, None), "bytes {m3}-{last}/{n}"),
        ("bytes=2-100000", 206, slice(2, None), "bytes 2-{last}/{n}"),
        ("bytes=100000-", 416, None, "bytes */{n}"),
        ("lines=1-2", 200, slice(None), None),
    ],
    ids=["first-5", "from-5", "last-3", "clipped", "unsatisfiable", "other-unit-ignored"],
)
def test_output_ranges(api: ApiClient, sim: LanciumSim, header: str, status: int,
                       expected: Optional[slice], content_range: Optional[str]) -> None:
    sim.settings.output_prepare_polls = 0
    text = b"0123456789abcdefghij\n"
    job_id = _finished(api, sim, stdout=text.decode())
    resp = _download(api, job_id, "stdout.txt", headers={"Range": header})
    assert resp.status_code == status
    if expected is not None:
        assert resp.content == text[expected]
    if content_range is not None:
        n = len(text)
        assert resp.headers["Content-Range"] == content_range.format(n=n, last=n - 1, m3=n - 3)


def test_declared_output_files(api: ApiClient, sim: LanciumSim) -> None:
    sim.settings.output_prepare_polls = 0
    job_id = _finished(api, sim, output_files=[{"name": "result.txt", "destination": None}])
    (out,) = api.show(job_id)["output_files"]
    resp = _download(api, job_id, "result.txt")
    assert resp.status_code == 200
    assert out == {"name": "result.txt", "destination": None, "available": True, "size": len(resp.content)}
    assert _download(api, job_id, "nope.txt").status_code == 404


def test_misspelled_output_key_is_accepted(api: ApiClient) -> None:
    # The description names the job attribute ``output_fies``; requests using it still work.
    job = api.create({"job": {"output_fies": [{"name": "a.out"}]}})
    assert job["output_files"] == [{"name": "a.out", "destination": None}]
