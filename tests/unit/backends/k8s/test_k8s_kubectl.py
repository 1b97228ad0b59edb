"""An admin finds a pilot's pod with kubectl by its HTCondor job id (the label the backend puts on it),
against the simulated cluster as against a real one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.spec import LABEL_JOB

from k8s_helpers import NAMESPACE, make_job

KUBECTL = shutil.which("kubectl")
pytestmark = [pytest.mark.skipif(KUBECTL is None, reason="no kubectl on this machine (make system-deps installs one)"),
              pytest.mark.both_engines]


def kubectl(kubeconfig: str, home: Path, *args: str) -> str:
    proc = subprocess.run([str(KUBECTL), *args], env=dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(home)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_kubectl_selects_a_pilots_pod_by_its_job_id(backend: Agent, kubeconfig: str,
                                                   tmp_path: Path, namespace: str) -> None:
    env = [("PODGAHP_SIM_RUN_SECONDS", "60")]
    first = backend.submit(make_job(tmp_path, sandbox="ce.test_9619_ce.test#12.0#1795684261_1234.0_1795684261",
                                    env=env))
    backend.submit(make_job(tmp_path, sandbox="ce.test_9619_ce.test#13.0#1795684261_1235.0_1795684261", env=env))
    found = kubectl(kubeconfig, tmp_path, "get", "pods", "-n", namespace, "-l", f"{LABEL_JOB}=1234.0", "-o", "name")
    assert found.split() == [f"pod/{first.split('/')[2]}"]
    assert kubectl(kubeconfig, tmp_path, "get", "pods", "-n", namespace, "-l", f"{LABEL_JOB}=99.0",
                   "-o", "name").split() == []
