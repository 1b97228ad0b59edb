"""docs/gahp-by-hand.md, done as a reader does it: its shell lines run as written (the simulated
cluster, the scratch configuration), then its typed lines sent to ``k8s_gahp`` one by one, each answer
read as the page shows it: the pilot is submitted, runs, completes with its output written back, and
is cancelled."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

from gahp_driver import script
from paths import DOCS
from polling import wait_until

PAGE = DOCS / "gahp-by-hand.md"
SCRATCH = "/tmp/bh"


def page_parts() -> Tuple[List[str], List[Tuple[str, List[str]]]]:
    """The shell lines of the scratch session, and each typed line with the lines the page shows after it."""
    text = PAGE.read_text()
    session = text.split("## A whole session on a scratch configuration", 1)[1]
    shell = re.search(r"```sh\n(.*?)```", session, re.S)
    typed = re.search(r"```\n(< \$GahpVersion.*?)```", session, re.S)
    assert shell and typed, "the page's shell block and typed session"
    exchanges: List[Tuple[str, List[str]]] = []
    for line in typed.group(1).splitlines():
        if line.startswith("> "):
            exchanges.append((line[2:], []))
        elif line.startswith("< ") and exchanges:
            exchanges[-1][1].append(line[2:])
    return shell.group(1).replace("\\\n", " ").splitlines(), exchanges


def test_the_by_hand_session_runs_as_the_page_shows(tmp_path: Path) -> None:
    shell, exchanges = page_parts()
    scratch = str(tmp_path / "bh")
    lines = [line.replace(SCRATCH, scratch) for line in shell]
    assert lines[-1].strip() == "k8s_gahp" and any(line.startswith("podgahp sim k8s") for line in lines)
    # The page's lines up to the GAHP, with the simulated cluster's pid and the environment kept.
    setup = (f"exec > {tmp_path}/setup.out 2>&1\n" + "\n".join(lines[:-1])
             + f"\necho $! > {tmp_path}/sim.pid\nenv -0 > {tmp_path}/env\n")
    bin_dir = os.path.dirname(script("podgahp"))
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", HOME=str(tmp_path))
    env = {k: v for k, v in env.items() if k != "CONDOR_CONFIG" and not k.startswith("_CONDOR_")}
    done = subprocess.run(["bash", "-e", "-c", setup], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, (tmp_path / "setup.out").read_text()
    sim_pid = int((tmp_path / "sim.pid").read_text())
    try:
        gahp_env: Dict[str, str] = dict(item.split("=", 1) for item in
                                        (tmp_path / "env").read_text().split("\0") if "=" in item)
        wait_until(lambda: Path(f"{scratch}/kubeconfig").exists(), "the simulated cluster's kubeconfig", 30)
        run_session(exchanges, scratch, gahp_env)
    finally:
        os.kill(sim_pid, signal.SIGTERM)
        wait_until(lambda: not running(sim_pid), "the simulated cluster to stop", 30)


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_session(exchanges: List[Tuple[str, List[str]]], scratch: str, env: Dict[str, str]) -> None:
    with subprocess.Popen(["k8s_gahp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                          cwd=scratch) as gahp:
        talk(gahp, exchanges, scratch)
    assert Path(f"{scratch}/sandbox/pilot.out").exists() and Path(f"{scratch}/sandbox/pilot.err").exists()


def talk(gahp: "subprocess.Popen[str]", exchanges: List[Tuple[str, List[str]]], scratch: str) -> None:
    assert gahp.stdin is not None and gahp.stdout is not None
    job_id = ""
    try:
        assert gahp.stdout.readline().startswith("$GahpVersion: ")
        pending: Dict[str, List[str]] = {}
        for typed, shown in exchanges:
            typed = typed.replace(SCRATCH, scratch)
            if job_id:
                typed = re.sub(r"k8s/pilots/pilot-[0-9a-f]+-1", job_id, typed)
            if typed != "RESULTS":
                gahp.stdin.write(typed + "\n")
                gahp.stdin.flush()
                assert gahp.stdout.readline().rstrip("\n").split(" ")[0] == shown[0].split(" ")[0], typed
                if typed.startswith("BLAH_"):
                    pending[typed.split(" ")[1]] = shown
                continue
            # RESULTS: ask again until the answer of the last request is in, as a reader would.
            request = list(pending)[-1]
            expected = next(p for p in shown[1:] if p.split(" ")[0] == request)
            answer = results_until(gahp, request, typed)
            assert answer.split(" ")[:3] == expected.split(" ")[:3], (answer, expected)
            if expected.split(" ")[3:4] and expected.split(" ")[3].startswith("k8s/"):
                job_id = answer.split(" ")[3]
            if " JobStatus\\ =\\ 4;" in expected:  # the page's final status: completed, exit code 0
                answer = wait_status(gahp, answer, request, typed, job_id)
                assert " JobStatus\\ =\\ 4;" in answer and "ExitCode\\ =\\ 0;" in answer, answer
            pending.pop(request)
        assert gahp.wait(30) == 0
    finally:
        if gahp.poll() is None:
            gahp.kill()
            gahp.wait(30)


def results_until(gahp: "subprocess.Popen[str]", request: str, typed: str) -> str:
    assert gahp.stdin is not None and gahp.stdout is not None
    found: List[str] = []

    def ask() -> List[str]:
        gahp.stdin.write("RESULTS\n")  # type: ignore[union-attr]
        gahp.stdin.flush()  # type: ignore[union-attr]
        head = gahp.stdout.readline().split(" ")  # type: ignore[union-attr]
        assert head[0] == "S", head
        count = int(head[1])
        lines = [gahp.stdout.readline().rstrip("\n") for _ in range(count)]  # type: ignore[union-attr]
        found.extend(lines)
        return [line for line in found if line.split(" ")[0] == request]
    return wait_until(ask, f"the answer of request {request} ({typed})", 30, 0.2)[-1]


def wait_status(gahp: "subprocess.Popen[str]", answer: str, request: str, typed: str, job_id: str) -> str:
    """Ask the status again (a new request id each time) until the pilot completed."""
    assert gahp.stdin is not None and gahp.stdout is not None
    number = [int(request) * 100]

    def status() -> str:
        number[0] += 1
        gahp.stdin.write(f"BLAH_JOB_STATUS {number[0]} {job_id}\n")  # type: ignore[union-attr]
        gahp.stdin.flush()  # type: ignore[union-attr]
        assert gahp.stdout.readline().strip() == "S"  # type: ignore[union-attr]
        return results_until(gahp, str(number[0]), typed)
    if " JobStatus\\ =\\ 4;" in answer:
        return answer
    return wait_until(status, f"{job_id} completed", 30, 0.2, done=lambda a: " JobStatus\\ =\\ 4;" in a)
