"""The real executable over pipes, byte for byte as the gridmanager drives it."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Callable, List

import pytest

from gahp.program import protocol
from gahp_driver import GahpProcess
from polling import wait_until

Start = Callable[..., GahpProcess]


def submit_ad(tmp_path: Path, sandbox: str = "ce_1.0", env: str = "", **extra: str) -> str:
    attrs = {"Cmd": '"/bin/sleep"', "Args": '"30"', "Iwd": f'"{tmp_path}"', "Out": '"p.out"',
             "Err": '"p.err"', "In": '"/dev/null"', "JobDirectory": f'"home_bl_{sandbox}"',
             "Environment": f'"{env}"', "RequestMemory": "2048", "gridtype": '"k8s"'}
    attrs.update(extra)
    return "[ " + "; ".join(f"{k} = {v}" for k, v in attrs.items()) + " ]"


def check_every_line_parses(gahp: GahpProcess) -> None:
    assert gahp.raw and gahp.raw[0].startswith(b"$GahpVersion")
    for raw in gahp.raw[1:]:
        assert raw.endswith(b"\n"), raw
        fields = protocol.split(raw.decode("utf-8", "surrogateescape")[:-1])
        assert "" not in fields, raw
        assert fields[0] in ("S", "E", "R") or protocol.valid_request_id(fields[0]), raw


def test_startup_order_and_commands(start_gahp: Start) -> None:
    gahp = start_gahp()
    banner = gahp.read_raw()
    assert banner is not None and banner.startswith(b"$GahpVersion: ") and banner.endswith(b"$\n")
    assert len(banner) <= 150
    reply = gahp.command("COMMANDS")
    assert reply[0] == "S" and set(reply[1:]) == set(protocol.SUPPORTED)
    assert gahp.command("VERSION") == ["S", protocol.BANNER]
    assert gahp.command("ASYNC_MODE_ON") == ["S"]
    assert gahp.command("ASYNC_MODE_OFF") == ["S"]
    assert gahp.command("RESULTS") == ["S", "0"]
    assert gahp.command("QUIT") == ["S"]
    assert gahp.close() == 0
    check_every_line_parses(gahp)


def test_submit_status_cancel_round_trip_with_exact_arity(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_IDLE_SECONDS="0.2", PODGAHP_MEMORY_RUN_SECONDS="0.3")
    gahp.start()
    assert gahp.command("BLAH_PING", "2", "k8s") == ["S"]
    assert gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path, env="PODGAHP_SIM_EXIT_CODE=7")) == ["S"]
    results = gahp.wait_results(["2", "3"])
    assert results["2"] == ["0", "NULL"]
    rc, err, job_id = results["3"]
    assert (rc, err) == ("0", "NULL") and job_id.startswith("memory/ce_1.0/")

    seen: List[str] = []
    for request in range(4, 200):
        gahp.command("BLAH_JOB_STATUS", str(request), job_id)
        fields = gahp.wait_results([str(request)])[str(request)]
        assert len(fields) == 4 and fields[:2] == ["0", "NULL"]
        seen.append(fields[2])
        if fields[2] == "4":
            assert "ExitCode = 7" in fields[3] and "JobStatus = 4" in fields[3]
            break
        time.sleep(0.05)
    assert seen[0] in ("1", "2") and seen[-1] == "4" and sorted(seen) == seen  # monotonic
    assert (tmp_path / "p.out").read_text().startswith("memory backend ran: /bin/sleep 30")

    assert gahp.command("BLAH_JOB_CANCEL", "300", job_id) == ["S"]
    assert gahp.command("BLAH_JOB_REFRESH_PROXY", "301", job_id, str(tmp_path / "p.out")) == ["S"]
    results = gahp.wait_results(["300", "301"])
    assert results["300"] == ["0", "NULL"] and results["301"] == ["0", "NULL"]
    gahp.close()
    check_every_line_parses(gahp)


def test_failures_are_results_with_the_right_arity(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp()
    gahp.start()
    gahp.command("BLAH_JOB_SUBMIT", "2", "[ Cmd = ")
    gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path, env="'PODGAHP_SIM_SUBMIT_ERROR=quota exceeded'"))
    gahp.command("BLAH_JOB_SUBMIT", "4", submit_ad(tmp_path, env="PODGAHP_SIM_CRASH=1"))
    gahp.command("BLAH_JOB_STATUS", "5", "k8s/ns/not-mine")
    gahp.command("BLAH_JOB_CANCEL", "6", "garbage")
    gahp.command("BLAH_JOB_REFRESH_PROXY", "7", "memory/a/1/0", "/no/such/proxy")
    results = gahp.wait_results(["2", "3", "4", "5", "6", "7"])
    assert results["2"] == ["1", "submit ad is not a valid ClassAd", "NULL"]
    assert results["3"][0] == "1" and "quota" in results["3"][1] and results["3"][2] == "NULL"
    assert results["4"][0] == "1" and "internal error" in results["4"][1] and len(results["4"]) == 3
    assert results["5"][0] == "1" and results["5"][2:] == ["0", "NULL"]
    assert results["6"][0] == "1" and len(results["6"]) == 2
    assert results["7"][0] == "1" and "/no/such/proxy" in results["7"][1] and len(results["7"]) == 2
    assert gahp.command("RESULTS") == ["S", "0"]  # alive after an unexpected exception
    gahp.close()
    check_every_line_parses(gahp)


def test_a_misconfigured_backend_still_answers(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_RUN_SECONDS="soon")
    gahp.start()
    gahp.command("BLAH_PING", "2", "k8s")
    gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path))
    gahp.command("BLAH_JOB_STATUS", "4", "memory/x/1/0")
    results = gahp.wait_results(["2", "3", "4"])
    for fields in results.values():
        assert fields[0] == "1" and "PODGAHP_MEMORY_RUN_SECONDS = 'soon' is not a finite number" in fields[1]
    assert len(results["2"]) == 2 and len(results["3"]) == 3 and len(results["4"]) == 4


@pytest.mark.parametrize("line, reason", [
    ("FROBNICATE", "unknown"),
    ("", "empty"),
    ("BLAH_JOB_STATUS", "request id"),
    ("BLAH_JOB_STATUS 0 k8s/a/b", "request id"),
    ("BLAH_JOB_STATUS x k8s/a/b", "request id"),
    ("BLAH_JOB_STATUS 5", "arguments"),
    ("BLAH_JOB_STATUS 5 a b", "arguments"),
    ("BLAH_JOB_STATUS 5  k8s/a/b", "arguments"),
    ("BLAH_JOB_SUBMIT 5 [] ", "arguments"),
    ("BLAH_JOB_REFRESH_PROXY 5 job", "arguments"),
    ("RESULTS now", "no arguments"),
    ("COMMANDS please", "no arguments"),
    ("BLAH_JOB_HOLD 5 k8s/a/b", "unknown"),
    ("RESPONSE_PREFIX GAHP:", "unknown"),
], ids=["unknown", "empty", "no-reqid", "zero-reqid", "word-reqid", "too-few", "too-many",
        "double-space", "trailing-space", "refresh-too-few", "results-args", "commands-args",
        "unsupported-hold", "response-prefix"])
def test_malformed_lines_get_e(start_gahp: Start, line: str, reason: str) -> None:
    gahp = start_gahp()
    gahp.start()
    gahp.send(line)
    reply = gahp.read()
    assert reply[0] == "E" and reason in " ".join(reply[1:])
    assert gahp.command("RESULTS") == ["S", "0"]


def test_duplicate_pending_request_id(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_DELAY_SECONDS="1")
    gahp.start()
    assert gahp.command("BLAH_PING", "9", "k8s") == ["S"]
    assert gahp.command("BLAH_PING", "9", "k8s")[0] == "E"
    assert gahp.wait_results(["9"])["9"] == ["0", "NULL"]


def test_garbage_never_kills_it(start_gahp: Start) -> None:
    gahp = start_gahp()
    gahp.start()
    for junk in (b"\x00\x01\x02", b"\xff\xfe invalid utf-8", b"\\", b"\\\\\\", b"\t\t", b"   ",
                 b"BLAH_PING\x00 2 k8s", "ÜNICODE 2 x".encode(), b"R", b"S 1", b"2 0 NULL"):
        gahp.send(junk)
        assert gahp.read()[0] == "E"
    assert gahp.command("BLAH_PING", "2", "NULL") == ["S"]
    assert gahp.wait_results(["2"])["2"] == ["0", "NULL"]
    check_every_line_parses(gahp)


def test_huge_lines(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MAX_LINE_BYTES="1048576")
    gahp.start()
    gahp.send(b"BLAH_JOB_SUBMIT 2 " + b"x" * (5 * 1024 * 1024))
    reply = gahp.read(timeout=30)
    assert reply[0] == "E" and "longer than" in reply[1]
    big_env = " ".join(f"V{i}={'y' * 100}" for i in range(5000))  # ~0.5 MB ad, under the limit
    assert gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path, env=big_env)) == ["S"]
    assert gahp.wait_results(["3"])["3"][0] == "0"


def test_async_mode_r_once_per_batch_and_results_in_completion_order(start_gahp: Start,
                                                                     tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_DELAY_SECONDS="0.3", PODGAHP_WORKERS="4")
    gahp.start()
    assert gahp.command("ASYNC_MODE_ON") == ["S"]
    for request in ("2", "3", "4"):
        assert gahp.command("BLAH_PING", request, "k8s") == ["S"]
    assert gahp.read(timeout=10, skip_r=False) == ["R"]
    # all three answered (the log line comes once a result is queued); no second R before RESULTS
    wait_until(lambda: "".join(p.read_text() for p in tmp_path.glob("PodgahpLog.*")).count("BLAH_PING rc="),
               "all three pings answered", 10, done=lambda answered: answered == 3)
    header = gahp.command("RESULTS")
    assert header == ["S", "3"]
    order = [gahp.read()[0] for _ in range(3)]
    assert sorted(order) == ["2", "3", "4"]
    assert gahp.command("RESULTS") == ["S", "0"]
    assert not any(line == b"R\n" for line in gahp.raw[gahp.raw.index(b"R\n") + 1:])
    assert gahp.command("BLAH_PING", "5", "k8s") == ["S"]
    assert gahp.read(timeout=10, skip_r=False) == ["R"]  # a new batch, a new R
    assert gahp.command("RESULTS") == ["S", "1"] and gahp.read()[0] == "5"


def test_sync_mode_writes_no_r(start_gahp: Start) -> None:
    gahp = start_gahp()
    gahp.start()
    gahp.command("BLAH_PING", "2", "k8s")
    gahp.wait_results(["2"])
    assert b"R\n" not in gahp.raw


def test_a_thousand_submits_in_flight(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_DELAY_SECONDS="0.02", PODGAHP_WORKERS="16")
    gahp.start()
    gahp.command("ASYNC_MODE_ON")
    started = time.monotonic()
    for i in range(1000):
        gahp.send_fields("BLAH_JOB_SUBMIT", str(i + 2), submit_ad(tmp_path, sandbox=f"ce_{i}.0"))
    replies = [gahp.read(skip_r=True) for _ in range(1000)]
    accepted = time.monotonic() - started
    assert replies == [["S"]] * 1000
    results = gahp.wait_results([str(i + 2) for i in range(1000)], timeout=60)
    job_ids = [fields[2] for fields in results.values()]
    assert all(fields[0] == "0" for fields in results.values())
    assert len(set(job_ids)) == 1000
    # every S came back long before the work (1000 × 20 ms / 16 workers) could have finished
    assert accepted < 1000 * 0.02


def test_request_timeout_reports_once(start_gahp: Start) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_DELAY_SECONDS="3", PODGAHP_REQUEST_TIMEOUT_SECONDS="1")
    gahp.start()
    gahp.command("BLAH_PING", "2", "k8s")
    result = gahp.wait_results(["2"], timeout=10)["2"]
    assert result[0] == "1" and "timed out after 1 s" in result[1]
    time.sleep(2.5)
    assert gahp.command("RESULTS") == ["S", "0"]  # the late completion is dropped


@pytest.mark.parametrize("how", ["eof", "sigterm", "quit"])
def test_clean_exits(start_gahp: Start, how: str) -> None:
    gahp = start_gahp(PODGAHP_MEMORY_DELAY_SECONDS="30")
    gahp.start()
    gahp.command("BLAH_PING", "2", "k8s")  # a request still running must not delay the exit
    started = time.monotonic()
    if how == "eof":
        assert gahp.close() == 0
    elif how == "sigterm":
        gahp.proc.send_signal(signal.SIGTERM)
        assert gahp.proc.wait(10) == 0
    else:
        assert gahp.command("QUIT") == ["S"]
        assert gahp.proc.wait(10) == 0
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("program", ["k8s_gahp", "lancium_gahp"])
def test_backend_programs_answer_without_a_configured_service(start_gahp: Start, program: str,
                                                              tmp_path: Path) -> None:
    gahp = start_gahp(program=program)
    reply = gahp.start()
    assert reply[0] == "S" and "BLAH_JOB_SUBMIT" in reply
    gahp.command("BLAH_PING", "2", program.split("_")[0])
    gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path))
    gahp.command("BLAH_JOB_STATUS", "4", f"{program.split('_')[0]}/x/y")
    gahp.command("BLAH_JOB_CANCEL", "5", f"{program.split('_')[0]}/x/y")
    results = gahp.wait_results(["2", "3", "4", "5"], timeout=60)
    assert [len(results[r]) for r in ("2", "3", "4", "5")] == [2, 3, 4, 2]
    assert results["2"][0] == "1" and results["3"][0] == "1"
    assert gahp.command("QUIT") == ["S"]
    assert gahp.proc.wait(10) == 0
    check_every_line_parses(gahp)


def test_log_lines_carry_request_and_job_ids(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp()
    gahp.start()
    gahp.command("BLAH_JOB_SUBMIT", "2", submit_ad(tmp_path, sandbox="logged_1.0"))
    job_id = gahp.wait_results(["2"])["2"][2]
    gahp.command("QUIT")
    gahp.proc.wait(10)
    log = next(tmp_path.glob("PodgahpLog.memory.*")).read_text()
    line = next(line for line in log.splitlines() if f"is {job_id}" in line)  # the submit's own line
    assert "req=2" in line and f"job={job_id}" in line


@pytest.mark.parametrize("backslashes,requests", [(1, 1), (2, 2), (3, 1)], ids=["escaped", "escaped-backslash",
                                                                             "both"])
def test_an_escaped_newline_stays_in_its_field(start_gahp: Start, backslashes: int, requests: int) -> None:
    gahp = start_gahp()
    gahp.start()
    # as the gridmanager's read_argv: a newline after an odd run of backslashes is part of the field
    gahp.send(b"BLAH_JOB_STATUS 2 memory/a" + b"\\" * backslashes + b"\nb/0/1")
    replies = [gahp.read() for _ in range(requests)]
    gahp.send("BLAH_JOB_STATUS 3 memory/x/1/0")
    assert gahp.read() == ["S"]
    assert all(reply[0] in ("S", "E") for reply in replies)
    if requests == 1:
        assert replies == [["S"]]
        results = gahp.wait_results(["2", "3"])
        assert set(results) == {"2", "3"}
    gahp.close()
    check_every_line_parses(gahp)


def test_a_full_queue_refuses_with_the_one_reply_the_gridmanager_takes(start_gahp: Start) -> None:
    gahp = start_gahp(PODGAHP_MAX_PENDING_REQUESTS="3", PODGAHP_WORKERS="1", PODGAHP_MEMORY_DELAY_SECONDS="1")
    gahp.start()
    replies = [gahp.command("BLAH_JOB_STATUS", str(i), f"memory/s{i}/1/0") for i in range(2, 7)]
    assert replies[:3] == [["S"], ["S"], ["S"]]
    assert replies[3:] == [["F", "Threads limit reached"]] * 2  # exactly gahp-client.cpp's GahpOverloadError
    assert set(gahp.wait_results(["2", "3", "4"], timeout=30)) == {"2", "3", "4"}
    assert gahp.command("BLAH_JOB_STATUS", "5", "memory/s5/1/0") == ["S"]  # room again
    gahp.close()


def test_a_lone_request_over_the_byte_limit_gets_an_error_result(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_MAX_PENDING_BYTES="4096")
    gahp.start()
    assert gahp.command("BLAH_JOB_SUBMIT", "2", "[ A = \"" + "x" * 5000 + "\" ]") == ["S"]
    result = gahp.wait_results(["2"])["2"]
    assert result[0] == "1" and "request too large" in result[1] and "PODGAHP_MAX_PENDING_BYTES" in result[1]
    gahp.close()


def test_a_request_that_timed_out_in_the_queue_never_runs(start_gahp: Start, tmp_path: Path) -> None:
    gahp = start_gahp(PODGAHP_WORKERS="1", PODGAHP_MEMORY_DELAY_SECONDS="3", PODGAHP_REQUEST_TIMEOUT_SECONDS="1",
                      PODGAHP_DEBUG="INFO")
    gahp.start()
    gahp.command("BLAH_JOB_STATUS", "2", "memory/a/1/0")
    gahp.command("BLAH_JOB_SUBMIT", "3", submit_ad(tmp_path))  # waits behind 2, times out queued
    results = gahp.wait_results(["2", "3"], timeout=30)
    assert "timed out" in results["3"][1]

    def log_text() -> str:
        return "".join(p.read_text() for p in tmp_path.glob("PodgahpLog.*"))
    # the worker reaches it once request 2 is done
    wait_until(log_text, "the queued request is dropped", 20, 0.1, done=lambda text: "timed out while queued" in text)
    gahp.close()
    assert "BLAH_JOB_SUBMIT timed out while queued; not run" in log_text()
    assert "BLAH_JOB_SUBMIT rc=" not in log_text()
