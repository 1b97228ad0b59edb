"""The real ``lancium_gahp`` executable over pipes, against the simulated Lancium service."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, List

from podgahp_sim.lancium import LanciumSim
from gahp_driver import GahpProcess
from polling import wait_until


Start = Callable[..., GahpProcess]


def _submit_ad(iwd: Path, sandbox: str, env: str) -> str:
    exe = iwd / "pilot.sh"
    exe.write_text("#!/bin/sh\necho pilot\n")
    os.chmod(exe, 0o755)
    attrs = {"Cmd": f'"{exe}"', "Args": '"-v 30"', "Iwd": f'"{iwd}"', "Out": '"p.out"', "Err": '"p.err"',
             "In": '"/dev/null"', "JobDirectory": f'"home_bl_{sandbox}"', "Environment": f'"{env}"',
             "RequestMemory": "5000", "BatchRuntime": "7200", "gridtype": '"lancium"',
             "GridResource": '"batch lancium"',
             "CERequirements": 'RequestCpus == 3 && lancium_qos == "medium"'}
    return "[ " + "; ".join(f"{k} = {v}" for k, v in attrs.items()) + " ]"


def test_gridmanager_conversation(start_gahp: Start, sim: LanciumSim, key_file: Path, tmp_path: Path) -> None:
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    gahp = start_gahp(program="lancium_gahp", PODGAHP_LANCIUM_BASE_URL=sim.url,
                      PODGAHP_LANCIUM_API_KEY_FILE=str(key_file), PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="0")
    try:
        gahp.start()
        ad = _submit_ad(iwd, "ce.example.org_ce_7.0_1700000000",
                        "PODGAHP_SIM_STDOUT=hello PODGAHP_SIM_EXIT_CODE=2")
        assert gahp.command("BLAH_PING", "2", "lancium") == ["S"]
        assert gahp.command("BLAH_JOB_SUBMIT", "3", ad) == ["S"]
        results = gahp.wait_results(["2", "3"])
        assert results["2"] == ["0", "NULL"]
        rc, err, job_id = results["3"]
        assert (rc, err) == ("0", "NULL") and job_id.startswith("lancium/")
        job = sim.job(int(job_id.split("/")[1]))
        assert job["qos"] == "medium" and job["resources"]["core_count"] == 4 and job["max_run_time"] == 7200

        codes: List[str] = []
        for request in range(4, 400):
            gahp.command("BLAH_JOB_STATUS", str(request), job_id)
            fields = gahp.wait_results([str(request)])[str(request)]
            assert fields[:2] == ["0", "NULL"], fields
            codes.append(fields[2])
            if fields[2] == "4":
                assert "ExitCode = 2" in fields[3] and "CpusProvisioned = 4" in fields[3]
                assert "MemoryProvisioned = 8192" in fields[3]
                break
            time.sleep(0.03)
        assert codes[-1] == "4" and sorted(codes) == codes
        assert (iwd / "p.out").read_text() == "hello"

        assert gahp.command("BLAH_JOB_CANCEL", "500", job_id) == ["S"]
        assert gahp.command("BLAH_JOB_CANCEL", "501", "lancium/99999") == ["S"]
        results = gahp.wait_results(["500", "501"])
        assert results["500"] == ["0", "NULL"]
        # A job this GAHP never made: an error result saying why (the gridmanager keeps the job), no request.
        assert results["501"][0] == "1" and "was not made by this CE" in results["501"][1]
    finally:
        gahp.close()
    assert sim.api_key.encode() not in b"".join(gahp.raw)


def test_bad_key_file_mode_fails_ping_with_the_fix(start_gahp: Start, sim: LanciumSim, key_file: Path) -> None:
    os.chmod(key_file, 0o644)
    gahp = start_gahp(program="lancium_gahp", PODGAHP_LANCIUM_BASE_URL=sim.url,
                      PODGAHP_LANCIUM_API_KEY_FILE=str(key_file))
    try:
        gahp.start()
        assert gahp.command("BLAH_PING", "2", "lancium") == ["S"]
        rc, err = gahp.wait_results(["2"])["2"]
        assert rc != "0" and "chmod 600" in err
    finally:
        gahp.close()
    assert sim.request_log == []


def test_a_cancel_lancium_refuses_is_answered_failed_and_done_by_the_next_gahp(
        start_gahp: Start, sim: LanciumSim, key_file: Path, tmp_path: Path) -> None:
    """While Lancium refuses the delete, the cancel is an error result (the gridmanager keeps the job and
    asks again), not a success that leaves the job running; a GAHP that exits before Lancium recovers
    leaves the cancel to the next GAHP of its user, which carries it out unasked."""
    iwd = tmp_path / "iwd"
    iwd.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    knobs = dict(PODGAHP_LANCIUM_BASE_URL=sim.url, PODGAHP_LANCIUM_API_KEY_FILE=str(key_file),
                 PODGAHP_STATE_DIR=str(state), PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS="0",
                 PODGAHP_LANCIUM_RETRIES="0", PODGAHP_LANCIUM_CANCEL_RETRY_MAX_SECONDS="0")
    first = start_gahp(program="lancium_gahp", **knobs)
    first.start()
    rc, err, job_id = first.request("BLAH_JOB_SUBMIT", _submit_ad(iwd, "ce.example.org_ce_8.0_1700000000",
                                                                  "PODGAHP_SIM_NEVER_START=1"))
    assert (rc, err) == ("0", "NULL"), err
    lancium_id = int(job_id.split("/")[1])
    sim.inject(503, method="DELETE", count=1000)
    rc, err = first.request("BLAH_JOB_CANCEL", job_id)
    assert rc != "0" and "HTTP 503" in err, (rc, err)
    assert first.close() == 0
    sim.clear_faults()
    assert sim.job(lancium_id)["status"] not in ("delete pending", "deleted")

    second = start_gahp(program="lancium_gahp", **knobs)
    second.start()
    wait_until(lambda: sim.jobs().get(lancium_id, {}).get("status"), "the job deleted by the next GAHP", 20, 0.05,
               done=lambda status: status in ("delete pending", "deleted", None))
    assert second.request("BLAH_JOB_CANCEL", job_id) == ["0", "NULL"]
