"""The simulated API server and the real control plane give the same answers through kubectl, for the
same objects: what ``kubectl auth can-i --list`` lists for the identity of podgahp's shipped Role.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Dict, Iterator, Tuple

import pytest
import yaml

from engines import RealEngine
from paths import DOCS
from podgahp_sim.k8s import KubeSim, SimConfig

pytestmark = pytest.mark.both_engines


class Kubectl:
    def __init__(self, kubeconfig: str, home: Path) -> None:
        self.env = dict(os.environ, KUBECONFIG=kubeconfig, HOME=str(home))

    def out(self, *args: str, stdin: str = "") -> str:
        done = subprocess.run(["kubectl", *args], input=stdin, env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture
def cluster(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tuple[Kubectl, str, str]]:
    """(kubectl as the admin, the namespace, the server's gitVersion) on either engine."""
    if engine == "real":
        real: RealEngine = request.getfixturevalue("real_engine")
        admin = real.cluster.write_kubeconfig(str(tmp_path / "admin"), namespace=real.namespace)
        yield Kubectl(admin, tmp_path), real.namespace, real.cluster.plane.release.text.split()[-1]
        return
    with KubeSim(SimConfig(namespaces=("default", "pilots"))) as sim:
        yield Kubectl(sim.write_kubeconfig(str(tmp_path / "admin"), namespace="pilots"), tmp_path), "pilots", \
            sim.config.git_version


def resource_rows(kubectl: Kubectl, *args: str) -> Dict[str, str]:
    lines = kubectl.out("auth", "can-i", "--list", *args).splitlines()
    assert re.split(r"\s{2,}", lines[0].strip()) == ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
    return {row[0]: row[-1] for row in (re.split(r"\s{2,}", line.strip()) for line in lines[1:] if line[:1].strip())}


def test_auth_can_i_list_shows_the_roles_rules(cluster: Tuple[Kubectl, str, str], tmp_path: Path) -> None:
    admin, namespace, version = cluster
    manifest = [d for d in yaml.safe_load_all((DOCS / "podgahp-rbac.yaml").read_text()) if d]
    for doc in manifest:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    admin.out("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest}))
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = admin.out("create", "--raw", "/api/v1/namespaces/%s/serviceaccounts/podgahp/token" % namespace,
                       "-f", "-", stdin=json.dumps(request))
    token = json.loads(answer)["status"]["token"]
    account_config = str(tmp_path / "account")
    server = admin.out("config", "view", "--minify", "--raw", "-o", "json")
    config = json.loads(server)
    config["users"][0]["user"] = {"token": token}
    Path(account_config).write_text(json.dumps(config))
    account = Kubectl(account_config, tmp_path)
    # SelfSubjectReview (authentication.k8s.io) came with 1.28: system:basic-user grants it from then on
    basic = {"selfsubjectaccessreviews.authorization.k8s.io": "[create]",
             "selfsubjectrulesreviews.authorization.k8s.io": "[create]"}
    major, minor = (int(x) for x in re.findall(r"\d+", version)[:2])
    if (major, minor) >= (1, 28):
        basic["selfsubjectreviews.authentication.k8s.io"] = "[create]"
    assert resource_rows(account) == dict(basic, **{
        "pods": "[create get list watch patch delete]", "pods/log": "[get]", "secrets": "[create get update patch]"})
    assert resource_rows(account, "-n", "default") == basic
