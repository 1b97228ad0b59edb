from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from gahp import __version__
from gahp.cli import main
from gahp_driver import script
from polling import wait_until


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_gahp_needs_a_known_backend() -> None:
    result = CliRunner().invoke(main, ["gahp", "--backend", "slurm"])
    assert result.exit_code == 2 and "slurm" in result.output


def _wait_for(path: Path, timeout: float = 20) -> str:
    return wait_until(lambda: path.exists() and path.read_text().strip() and path.read_text(),
                      f"{path} written", timeout, 0.1)


def test_sim_k8s_serves_the_official_client(tmp_path: Path) -> None:
    from kubernetes import client, config

    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([script("podgahp"), "sim", "k8s", "--kubeconfig", str(kubeconfig),
                             "--namespace", "pilots", "--nodes", "1"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert "simulated Kubernetes API at https://127.0.0.1:" in proc.stdout.readline()
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig),
                                                             persist_config=False))
        assert api.list_namespaced_pod("pilots").items == []
        api.api_client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        proc.stdout.close()  # type: ignore[union-attr]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sim_lancium_writes_a_private_key(tmp_path: Path, signum: signal.Signals) -> None:
    # Started as `nohup make test &` would start it: SIGINT ignored by the parent. Both signals
    # still stop the simulator.
    key, url = tmp_path / "key", tmp_path / "url"
    proc = subprocess.Popen([script("podgahp"), "sim", "lancium", "--key-file", str(key),
                             "--url-file", str(url)], stdout=subprocess.DEVNULL, preexec_fn=_ignore_sigint)
    try:
        base = _wait_for(url).strip()
        assert key.stat().st_mode & 0o077 == 0
        reply = requests.post(f"{base}/access_tokens",
                              headers={"Authorization": f"Bearer {key.read_text().strip()}"}, timeout=10)
        assert reply.status_code == 201 and reply.headers["Authorization"].startswith("Bearer ")
    finally:
        proc.send_signal(signum)
        assert proc.wait(10) == 0


NATIVE_CONFIG = [p for p in ("/etc/condor/condor_config", "/usr/local/etc/condor_config") if Path(p).exists()]


@pytest.mark.parametrize("program, backend", [("k8s_gahp", "k8s"), ("lancium_gahp", "lancium")])
def test_gahp_programs_answer_help_and_version_and_refuse_arguments(program: str, backend: str) -> None:
    helped = subprocess.run([script(program), "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and f'GridResource = "batch {backend}"' in helped.stdout
    assert f"BLAH_PING 1 {backend}" in helped.stdout and "PODGAHP_LOG" in helped.stdout
    version = subprocess.run([script(program), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"{program} (podgahp) {__version__}"
    wrong = subprocess.run([script(program), "--kubeconfig", "x"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    assert wrong.returncode == 2 and "takes no arguments" in wrong.stderr and wrong.stdout == ""


@pytest.mark.skipif(bool(NATIVE_CONFIG), reason=f"this machine has an HTCondor configuration: {NATIVE_CONFIG}")
@pytest.mark.parametrize("argv", [["k8s_gahp"], ["podgahp", "gahp", "--backend", "k8s"]], ids=["k8s_gahp", "podgahp-gahp"])
def test_a_gahp_without_configuration_says_so_and_creates_nothing(tmp_path: Path, argv: list) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG" and not k.startswith("_CONDOR_")}
    env["HOME"] = str(tmp_path / "home")
    root_before = set(os.listdir("/"))
    proc = subprocess.run([script(argv[0]), *argv[1:]], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=60, input="COMMANDS\r\n")
    assert proc.returncode != 0 and "no HTCondor configuration" in proc.stderr and proc.stdout == ""
    assert "CONDOR_CONFIG" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"] and not any((tmp_path / "tmp").iterdir())  # the test's TMPDIR
    assert set(os.listdir("/")) <= root_before


def _ce_tool(tmp_path: Path, *args: str, **env_extra: str) -> "subprocess.CompletedProcess[str]":
    import os

    env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG" and not k.startswith("_CONDOR_")}
    env.update(HOME=str(tmp_path / "home"), **env_extra)
    return subprocess.run([script("podgahp"), *args], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("command", [["q"], ["q", "--json"], ["reap", "--dry-run"]], ids=["q", "q-json", "reap"])
def test_ce_tools_read_the_ce_configuration_and_name_it_in_errors(tmp_path: Path, command: list) -> None:
    # A CE whose routed jobs live in a schedd that is not running: the tool reads the CE's file
    # without CONDOR_CONFIG (as condor_ce_q does), and its error names that file and the knobs.
    ce_config = tmp_path / "condor_config"
    ce_config.write_text(f"LOG = {tmp_path}\nPODGAHP_REAP_SCHEDD_NAME = ce-schedd@nowhere\n"
                         "PODGAHP_REAP_SCHEDD_POOL = 127.0.0.1:1\nTOOL_TIMEOUT_MULTIPLIER = 0\n")
    proc = _ce_tool(tmp_path, *command, PODGAHP_CE_CONDOR_CONFIG=str(ce_config))
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert "schedd ce-schedd@nowhere in pool 127.0.0.1:1 cannot be queried" in proc.stderr, proc.stderr
    assert "PODGAHP_REAP_SCHEDD_NAME" in proc.stderr
    assert f"read HTCondor configuration {ce_config} (the HTCondor-CE's" in proc.stderr
    explicit = _ce_tool(tmp_path, "--condor-config", str(ce_config), *command)
    assert f"read HTCondor configuration {ce_config} (--condor-config)" in explicit.stderr, explicit.stderr


@pytest.mark.skipif(bool(NATIVE_CONFIG) or Path("/etc/condor-ce").exists(),
                    reason="this machine has an HTCondor configuration")
@pytest.mark.parametrize("command", [["q"], ["health"], ["reap"], ["provision", "--once"]])
def test_ce_tools_without_any_configuration_say_so(tmp_path: Path, command: list) -> None:
    proc = _ce_tool(tmp_path, *command)
    assert proc.returncode == 1 and "no HTCondor configuration" in proc.stderr and "--condor-config" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["tmp"] and not any((tmp_path / "tmp").iterdir())


def test_routes_check_has_each_backend_say_how_it_gives_a_whole_node() -> None:
    from gahp.backends import backend_class
    from gahp.cli import _whole_node

    assert "WHOLE_NODE_CPUS" in _whole_node("k8s") and _whole_node("k8s") == backend_class("k8s").whole_node
    assert "node_exclusive" in _whole_node("lancium")
    assert "cannot be loaded" in _whole_node("slurm")


def test_trace_as_root_says_to_run_it_as_a_user_before_submitting(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CE's schedd refuses root's jobs: a test pilot is never submitted as root, and the message says
    what to run instead."""
    import os

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    result = CliRunner().invoke(main, ["trace"])
    assert result.exit_code == 1 and "cannot be submitted as root" in result.output
    assert "runuser -u USER -- podgahp trace" in result.output and "podgahp trace 1234.0" in result.output
    assert "read HTCondor configuration" not in result.output  # stopped before reading or submitting anything
