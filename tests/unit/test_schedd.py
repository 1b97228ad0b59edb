"""gahp.core.schedd: which GAHP the gridmanager starts for a GridResource, the job ids a GridJobId names,
and when an answer of the schedd is trusted as whole (podgahp reap deletes nothing otherwise)."""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

import classad2
import pytest

from gahp.core import schedd
from gahp.core.schedd import (Expression, IncompleteAnswer, QueryProcess, ScheddUnavailable, check_whole, gahp_job_ids,
                         gahp_type)


@pytest.mark.parametrize("grid_resource, expected", [
    ("batch k8s", "k8s"),
    ("batch K8S", "k8s"),          # the gridmanager lower-cases the type and reads K8S_GAHP
    ("batch lancium", "lancium"),
    ("batch Lancium", "lancium"),
    ("batch  k8s", None),          # two spaces: an empty type, then an argument (REMOTE_GAHP)
    ("batch k8s ", None),          # a trailing space is an (empty) argument: REMOTE_GAHP
    (" batch k8s", None),          # not a batch resource
    ("Batch k8s", None),           # "Batch" is not "batch": type "batch", argument k8s (REMOTE_GAHP)
    ("batch\tk8s", None),          # words are split at spaces only
    ("batch k8s remote.example.org", None),
    ("batch", None),
    ("condor ce.example.org ce.example.org:9619", None),
    (None, None),
    (42, None),
], ids=["plain", "upper-type", "lancium", "lancium-capital", "two-spaces", "trailing-space", "leading-space",
        "capital-batch", "tab", "remote", "no-type", "condor", "undefined", "not-a-string"])
def test_the_gahp_is_picked_as_the_gridmanager_picks_it(grid_resource: object, expected: Optional[str]) -> None:
    assert gahp_type(grid_resource) == expected


@pytest.mark.parametrize("grid_job_id, expected", [
    ("batch k8s sb k8s/ns/pilot-0-1", ["k8s/ns/pilot-0-1"]),
    ("batch K8S sb k8s/ns/pilot-0-1", ["k8s/ns/pilot-0-1"]),
    ("batch k8s sb", []),
    ("batch k8s sb k8s/ns/pilot-0-1 extra", ["k8s/ns/pilot-0-1", "extra"]),
    (None, []),
], ids=["plain", "upper", "no-job-yet", "more-words", "undefined"])
def test_job_ids_are_the_fourth_word_of_grid_job_id(grid_job_id: object, expected: List[str]) -> None:
    assert gahp_job_ids(grid_job_id) == expected


def ads(*ids: str) -> List[Dict[str, object]]:
    return [{"GridJobId": f"batch k8s sb{i} {job_id}"} for i, job_id in enumerate(ids)]


@pytest.mark.parametrize("answer, counted, queue_total, advertised, refused", [
    (ads("k8s/ns/a"), 1, 3, 3, None),
    (ads("k8s/ns/a"), 2, 3, 3, "answered with 1 grid jobs but counts 2"),
    (ads(), 0, 0, 5, "answers with an empty queue but its ad counted 5"),
    (ads(), 0, 0, 0, None),
    (ads("k8s/ns/a"), 1, 1, None, "collector has no ad"),
    (ads("k8s/ns/a"), None, None, 1, "no job counts"),
    (ads("k8s/ns/a", "k8s/ns/b"), 1, 2, 2, None),   # a job submitted between the count and the answer
], ids=["whole", "truncated", "emptied-since-advertised", "empty-and-advertised-empty", "no-schedd-ad",
        "no-summary", "grew"])
def test_an_answer_is_trusted_only_when_shown_whole(answer: List[Dict[str, object]], counted: Optional[int],
                                                    queue_total: Optional[int], advertised: Optional[int],
                                                    refused: Optional[str]) -> None:
    if refused is None:
        jobs = check_whole("the local schedd", "ce.example.org", answer, counted, queue_total, advertised)
        assert jobs.jobs == len(answer) and jobs.schedd_name == "ce.example.org"
        assert jobs.job_ids == {str(ad["GridJobId"]).split()[-1] for ad in answer}
    else:
        with pytest.raises(IncompleteAnswer, match=refused):
            check_whole("the local schedd", "ce.example.org", answer, counted, queue_total, advertised)


#: A stand-in for ``python -m gahp.core.schedd``: answers each request line with the ads of a file named in
#: the constraint ("sleep" waits first, "die" exits), and records its pid.
FAKE = """
import json, os, sys, time
open(sys.argv[1], "a").write(f"{os.getpid()}\\n")
for line in sys.stdin:
    request = json.loads(line)
    if request["constraint"] == "die":
        sys.exit(3)
    if request["constraint"] == "sleep":
        time.sleep(30)
    sys.stdout.write(json.dumps({"ads": [{"Constraint": request["constraint"], "Routed": {"expression": "x + 1"}}]}) + "\\n")
    sys.stdout.flush()
"""


@pytest.fixture
def fake(tmp_path: Path) -> "tuple[List[str], Path]":
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    pids = tmp_path / "pids"
    return [sys.executable, str(script), str(pids)], pids


def test_queries_are_answered_by_one_process_and_values_keep_their_kind(fake: "tuple[List[str], Path]") -> None:
    argv, pids = fake
    queries = QueryProcess(argv=argv)
    try:
        for i in range(3):
            assert queries.query(f"ClusterId == {i}", ["Constraint", "Routed"]) == [
                {"Constraint": f"ClusterId == {i}", "Routed": Expression("x + 1")}]
        assert len(pids.read_text().split()) == 1
    finally:
        queries.close()


def test_a_process_that_fails_or_hangs_is_replaced_and_the_query_is_unavailable(fake: "tuple[List[str], Path]") -> None:
    argv, pids = fake
    # long enough for a process to start and answer on a busy machine, and far below the hang (30 s)
    queries = QueryProcess(timeout=8, argv=argv)
    try:
        with pytest.raises(ScheddUnavailable, match="query process ended .exit code 3"):
            queries.query("die", [])
        started = time.monotonic()
        with pytest.raises(ScheddUnavailable, match="no answer in 8 s"):
            queries.query("sleep", [])
        assert time.monotonic() - started < 25
        assert queries.query("true", [])[0]["Constraint"] == "true"
        assert len(pids.read_text().split()) == 3
    finally:
        queries.close()


def test_a_query_waiting_for_the_process_leaves_the_other_threads_running(fake: "tuple[List[str], Path]") -> None:
    """The point of the process: while it waits for the schedd, this process's threads run (the bindings
    would hold the interpreter's lock all that time)."""
    argv, _ = fake
    queries = QueryProcess(timeout=1.0, argv=argv)
    counted = [0]
    done = threading.Event()

    def count() -> None:
        while not done.is_set():
            counted[0] += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with pytest.raises(ScheddUnavailable):
            queries.query("sleep", [])
    finally:
        done.set()
        counter.join(10)
        queries.close()
    assert counted[0] > 100


def test_the_process_answers_what_the_schedd_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def query(constraint: str, projection: List[str], name: Optional[str], pool: Optional[str]) -> List[Dict[str, object]]:
        asked.append((constraint, projection, name, pool))
        if constraint == "down":
            raise ScheddUnavailable("the local schedd cannot be queried: refused")
        return [{"ClusterId": 7, "GridJobId": "batch k8s s", "Expr": classad2.ExprTree("a + b"), "None": None}]

    monkeypatch.setattr(schedd, "query", query)
    requests = io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in [
        {"constraint": "ClusterId == 7", "projection": ["ClusterId"], "name": "s@x", "pool": "x:9618"},
        {"constraint": "down", "projection": []}, {"nothing": 1}]))
    answers = io.BytesIO()
    schedd.serve(requests, answers)
    first, second, third = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert first == {"ads": [{"ClusterId": 7, "GridJobId": "batch k8s s", "Expr": {"expression": "a + b"}, "None": None}]}
    assert second == {"error": "the local schedd cannot be queried: refused"}
    assert "cannot read" in third["error"]
    assert asked[0] == ("ClusterId == 7", ["ClusterId"], "s@x", "x:9618")


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An HTCondor configuration with no schedd and no collector to ask."""
    for name, value in {"CONDOR_CONFIG": "ONLY_ENV", "_CONDOR_LOG": str(tmp_path),
                        "_CONDOR_SCHEDD_ADDRESS_FILE": str(tmp_path / "none"),
                        "_CONDOR_COLLECTOR_HOST": "127.0.0.1:1"}.items():
        monkeypatch.setenv(name, value)


def test_the_real_process_says_when_there_is_no_schedd(nowhere: None) -> None:
    queries = QueryProcess(timeout=120)
    try:
        with pytest.raises(ScheddUnavailable, match="the local schedd cannot be queried"):
            queries.query("true", ["ClusterId"])
    finally:
        queries.close()


def test_the_process_answers_when_the_schedd_started(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def start_time(name: Optional[str], pool: Optional[str]) -> Optional[float]:
        asked.append((name, pool))
        if name == "down":
            raise ScheddUnavailable("schedd down's ad cannot be read from the collector: refused")
        return 1795297304.0 if name else None

    monkeypatch.setattr(schedd, "start_time", start_time)
    requests = io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in [
        {"kind": "start", "name": "s@x", "pool": "x:9618"}, {"kind": "start"}, {"kind": "start", "name": "down"}]))
    answers = io.BytesIO()
    schedd.serve(requests, answers)
    assert [json.loads(line) for line in answers.getvalue().splitlines()] == [
        {"start": 1795297304.0}, {"start": None}, {"error": "schedd down's ad cannot be read from the collector: refused"}]
    assert asked == [("s@x", "x:9618"), (None, None), ("down", None)]


def test_the_real_process_says_when_the_schedds_start_cannot_be_read(nowhere: None) -> None:
    queries = QueryProcess(timeout=120)
    try:
        with pytest.raises(ScheddUnavailable, match="ad cannot be read from the collector"):
            queries.start_time()
    finally:
        queries.close()


class _EditingSchedd:
    """A schedd that refuses the edits ``refuse`` names ("ids", "constraint") and answers queries with ``left``."""

    def __init__(self, refuse: "tuple[str, ...]", left: List[Dict[str, object]]) -> None:
        self.refuse, self.left = refuse, left
        self.calls: List[object] = []

    def edit(self, spec: object, attribute: str, value: str) -> int:
        kind = "ids" if isinstance(spec, list) else "constraint"
        self.calls.append((kind, spec, attribute, value))
        if kind in self.refuse:
            raise RuntimeError("Unable to edit jobs")
        return len(spec) if isinstance(spec, list) else 1

    def query(self, constraint: str, projection: List[str]) -> List[Dict[str, object]]:
        self.calls.append(("query", constraint))
        return self.left


@pytest.mark.parametrize("refuse, left, expected", [
    ((), [], 2),                                        # one transaction naming the jobs
    (("ids",), [], 1),                                  # a job gone: the constraint passes over it
    (("ids", "constraint"), [], 0),                     # every job gone: nothing to write, no error
    (("ids", "constraint"), [{"ClusterId": 7}], None),  # refused while the jobs are there: an error
], ids=["named", "one-gone", "all-gone", "refused"])
def test_an_edit_names_its_jobs_and_passes_over_the_jobs_gone(monkeypatch: pytest.MonkeyPatch, refuse: "tuple[str, ...]",
                                                              left: List[Dict[str, object]],
                                                              expected: Optional[int]) -> None:
    fake = _EditingSchedd(refuse, left)
    monkeypatch.setattr(schedd, "locate", lambda name=None, pool=None: fake)
    if expected is None:
        with pytest.raises(schedd.EditRefused, match="did not set PodgahpNode in 1 jobs"):
            schedd.edit_jobs(["7.0", "8.1"], "PodgahpNode", '"cpu-1"')
    else:
        assert schedd.edit_jobs(["7.0", "8.1"], "PodgahpNode", '"cpu-1"') == expected
    assert fake.calls[0] == ("ids", ["7.0", "8.1"], "PodgahpNode", '"cpu-1"')
    if refuse:
        constraint = 'JobUniverse == 9 && member(strcat(ClusterId, ".", ProcId), {"7.0", "8.1"})'
        assert fake.calls[1] == ("constraint", constraint, "PodgahpNode", '"cpu-1"')


@pytest.mark.parametrize("job, attribute", [("7", "A"), ("7.0 || true", "A"), ("7.0", "A = 1; B"), ("7.0", "")])
def test_an_edit_takes_only_job_ids_and_attribute_names(job: str, attribute: str) -> None:
    with pytest.raises(ValueError):
        schedd.edit_jobs([job], attribute or "", '"x"')
