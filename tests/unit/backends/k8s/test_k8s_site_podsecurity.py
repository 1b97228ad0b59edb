"""Pod Security admission on the pilots' namespace (docs/kubernetes.md, "What a site's cluster does
to pilots"): pods built from podgahp's safe defaults and from the shipped template
(docs/podgahp-pod-template.yaml) are admitted at ``restricted``, and so at ``baseline``; a pod the
level refuses is a submit refused with the server's words (the gridmanager holds the job with them),
counted by the queue's black-hole guard.

On the simulator only: Pod Security admission came in Kubernetes 1.23 and the real engine's 1.20 has
none (its namespace label does nothing). The same was checked by hand on a 1.36 control plane, whose
words the simulator's are: ``violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or
container "pilot" must set securityContext.runAsNonRoot=true), runAsUser=0 (pod must not set
runAsUser=0)``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from gahp.agent import Agent
from gahp.core.errors import QuotaExceeded
from gahp.core.jobstate import Phase
from paths import DOCS
from podgahp_sim.k8s import KubeSim
from podgahp_sim.k8s.podsecurity import ENFORCE, violations

from k8s_helpers import IMAGE, BackendFactory, make_job, wait_state

ROOT_TEMPLATE = f"""
spec:
  securityContext: {{runAsUser: 0}}
  containers:
  - name: pilot
    image: {IMAGE}
"""


@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_the_defaults_and_the_shipped_template_are_admitted(make_backend: BackendFactory, sim: KubeSim,
                                                           tmp_path: Path, namespace: str, level: str) -> None:
    sim.label_namespace(namespace, {ENFORCE: level})
    sim.add_priority_class("pilot-low", -10)  # the shipped template's
    plain = make_backend()
    shipped = make_backend(PODGAHP_K8S_POD_TEMPLATE=str(DOCS / "podgahp-pod-template.yaml"))
    for n, backend in enumerate((plain, shipped)):
        job_id = backend.submit(make_job(tmp_path, sandbox="ce.test_host_ps.%d_1795297304" % n,
                                         env=[("PODGAHP_SIM_RUN_SECONDS", "0.5")]))
        assert wait_state(backend, job_id, Phase.COMPLETED, Phase.HELD).phase is Phase.COMPLETED


def test_a_pod_the_level_refuses_is_refused_with_its_words_and_counted(make_backend: BackendFactory, sim: KubeSim,
                                                                       tmp_path: Path, namespace: str) -> None:
    template = tmp_path / "root.yaml"
    template.write_text(ROOT_TEMPLATE)
    sim.label_namespace(namespace, {ENFORCE: "restricted"})
    backend: Agent = make_backend(PODGAHP_K8S_POD_TEMPLATE=str(template))
    with pytest.raises(QuotaExceeded) as error:
        backend.submit(make_job(tmp_path))
    words = str(error.value)
    assert ('is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container '
            '"pilot" must set securityContext.runAsNonRoot=true), runAsUser=0 (pod must not set runAsUser=0)') in words
    assert "RBAC" not in words and sim.pods(namespace) == []
    backend.stats.flush()
    assert json.loads(Path(backend.stats.path).read_text())["pods_refused"] == 1
    sim.label_namespace(namespace, {ENFORCE: "baseline"})  # running as root is baseline's
    job_id = backend.submit(make_job(tmp_path, sandbox="ce.test_host_ps.9_1795297304"))
    assert job_id and len(sim.pods(namespace)) == 1


def container(**context: Any) -> Dict[str, Any]:
    return {"name": "c", "image": IMAGE, "securityContext": context}


RESTRICTED_OK = dict(allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"]}, runAsNonRoot=True,
                     seccompProfile={"type": "RuntimeDefault"})

#: (pod spec, level, the violations Pod Security reports), one row per check.
CHECKS: List[Tuple[Dict[str, Any], str, List[Tuple[str, str]]]] = [
    ({"containers": [container(**RESTRICTED_OK)]}, "restricted", []),
    ({"containers": [container()]}, "baseline", []),
    ({"containers": [container(privileged=True)]}, "baseline",
     [("privileged", 'container "c" must not set securityContext.privileged=true')]),
    ({"hostNetwork": True, "hostPID": True, "containers": [container()]}, "baseline",
     [("host namespaces", "hostNetwork=true, hostPID=true")]),
    ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}], "containers": [container()]}, "baseline",
     [("hostPath volumes", 'volume "h"')]),
    ({"containers": [dict(container(), ports=[{"containerPort": 80, "hostPort": 80}])]}, "baseline",
     [("hostPort", 'container "c" uses hostPort 80')]),
    ({"containers": [container(capabilities={"add": ["NET_ADMIN"]})]}, "baseline",
     [("non-default capabilities", 'container "c" must not include "NET_ADMIN" in securityContext.capabilities.add')]),
    ({"containers": [container(seccompProfile={"type": "Unconfined"})]}, "baseline",
     [("seccompProfile", 'container "c" must not set securityContext.seccompProfile.type to "Unconfined"')]),
    ({"containers": [container(**dict(RESTRICTED_OK, allowPrivilegeEscalation=True))]}, "restricted",
     [("allowPrivilegeEscalation != false", 'container "c" must set securityContext.allowPrivilegeEscalation=false')]),
    ({"containers": [container(**dict(RESTRICTED_OK, capabilities={"drop": ["NET_RAW"], "add": ["SYS_ADMIN"]}))]},
     "restricted", [("unrestricted capabilities", 'container "c" must set securityContext.capabilities.drop=["ALL"]; '
                     'container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add')]),
    ({"volumes": [{"name": "h", "hostPath": {"path": "/"}}], "containers": [container(**RESTRICTED_OK)]},
     "restricted", [("restricted volume types", 'volume "h" uses restricted volume type "hostPath"')]),
    ({"containers": [container(**dict(RESTRICTED_OK, runAsNonRoot=None))]}, "restricted",
     [("runAsNonRoot != true", 'pod or container "c" must set securityContext.runAsNonRoot=true')]),
    ({"securityContext": {"runAsNonRoot": True}, "containers": [container(**dict(RESTRICTED_OK, runAsNonRoot=None,
                                                                                 runAsUser=0))]},
     "restricted", [("runAsUser=0", 'container "c" must not set runAsUser=0')]),
    ({"containers": [container(**dict(RESTRICTED_OK, seccompProfile=None))]}, "restricted",
     [("seccompProfile", 'pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" '
                         'or "Localhost"')]),
]


@pytest.mark.parametrize("spec, level, expected", CHECKS, ids=[
    "restricted-ok", "baseline-ok", "privileged", "host-namespaces", "host-path", "host-port", "capabilities-add",
    "seccomp-unconfined", "privilege-escalation", "capabilities-restricted", "volume-types", "run-as-non-root",
    "run-as-user", "seccomp-unset"])
def test_each_check_of_the_standards(spec: Dict[str, Any], level: str, expected: List[Tuple[str, str]]) -> None:
    for c in spec["containers"]:
        c["securityContext"] = {k: v for k, v in c["securityContext"].items() if v is not None}
    assert violations({"spec": spec}, level) == expected

