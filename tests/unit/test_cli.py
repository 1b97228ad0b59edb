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
