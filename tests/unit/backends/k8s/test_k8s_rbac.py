"""Least privilege: the shipped Role grants exactly the rights podgahp uses; with the simulator
enforcing it every operation goes through, and without any one rule BLAH_PING names it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import pytest
import yaml

from gahp.agent import Agent
from gahp.backends.k8s.rights import RIGHTS
from gahp.core.errors import BackendError
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim

from engines import shipped_role
from k8s_helpers import NAMESPACE, BackendFactory, make_job, wait_state
from paths import DOCS

pytestmark = pytest.mark.both_engines

MANIFEST = DOCS / "podgahp-rbac.yaml"


role = shipped_role


def granted(doc: Dict[str, Any]) -> Set[Tuple[str, str]]:
    return {(resource, verb) for rule in doc["rules"] for resource in rule["resources"] for verb in rule["verbs"]}


def test_manifest_grants_exactly_the_rights_used() -> None:
    assert granted(role()) == {(resource, verb) for resource, verb, _ in RIGHTS}
    kinds = [d["kind"] for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding"]
    assert role()["metadata"]["namespace"] == NAMESPACE


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_every_operation_goes_through_with_the_role(make_backend: BackendFactory, sim: KubeSim,
                                                    tmp_path: Path) -> None:
    sim.enforce_role(role())
    backend = make_backend(PODGAHP_K8S_FINISHED_RETENTION_SECONDS="0")
    backend.ping()
    done = backend.submit(make_job(tmp_path, sandbox="done_1.0_1", env=[("PODGAHP_SIM_LOG", "hello")]))
    assert wait_state(backend, done, Phase.COMPLETED).exit_code == 0
    assert "hello" in (tmp_path / "pilot.out").read_text()
    proxy = tmp_path / "proxy"
    proxy.write_text("proxy 1")
    running = backend.submit(make_job(tmp_path, sandbox="run_1.0_1", proxy=str(proxy),
                                      env=[("PODGAHP_SIM_RUN_SECONDS", "60")]))
    wait_state(backend, running, Phase.RUNNING)
    proxy.write_text("proxy 2")
    backend.refresh_proxy(running, str(proxy))
    assert backend.submit(make_job(tmp_path, sandbox="run_1.0_1", proxy=str(proxy))) == running
    backend.cancel(running)
    cache = next(iter(backend.backend.clusters.caches()))
    sim.wait_for(lambda: backend.backend.reap(cache) or True, 5, "a clean-up pass")
    refused = [f"{r.method} {r.path}" for r in sim.requests() if r.status == 403]
    assert refused == []
    assert backend._cancels.pending() == 0


@pytest.mark.parametrize("resource,verb", [(r, v) for r, v, _ in RIGHTS], ids=[f"{v}-{r}" for r, v, _ in RIGHTS])
def test_ping_names_a_missing_right(make_backend: BackendFactory, sim: KubeSim, resource: str, verb: str) -> None:
    reduced = copy.deepcopy(role())
    rules = []
    for rule in reduced["rules"]:
        if resource not in rule["resources"]:
            rules.append(rule)
            continue
        if len(rule["resources"]) > 1:
            rules.append(dict(rule, resources=[r for r in rule["resources"] if r != resource]))
        verbs = [v for v in rule["verbs"] if v != verb]
        if verbs:
            rules.append(dict(rule, resources=[resource], verbs=verbs))
    reduced["rules"] = rules
    assert granted(reduced) == granted(role()) - {(resource, verb)}
    sim.enforce_role(reduced)
    with pytest.raises(BackendError, match=f"may not {verb} {resource}, needed to .*docs/podgahp-rbac.yaml") as info:
        make_backend().ping()
    others_named: List[str] = [f"may not {v} {r}," for r, v, _ in RIGHTS if (r, v) != (resource, verb)]
    assert not any(text in str(info.value) for text in others_named)


def test_ping_names_a_broken_template_and_a_missing_namespace(make_backend: BackendFactory, sim: KubeSim,
                                                              tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="pod template .*nope.yaml cannot be read"):
        make_backend(PODGAHP_K8S_POD_TEMPLATE=str(tmp_path / "nope.yaml")).ping()
    with pytest.raises(BackendError, match="namespace elsewhere does not exist"):
        make_backend(PODGAHP_K8S_NAMESPACE="elsewhere").ping()
    assert sim.pods() == []  # the dry runs stored nothing


def test_ping_with_a_token_file_that_cannot_be_read(make_backend: BackendFactory, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="token file .* cannot be read .PODGAHP_K8S_TOKEN_FILE"):
        make_backend(PODGAHP_K8S_TOKEN_FILE=str(tmp_path / "missing-token")).ping()


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_reaper_and_pings_do_not_need_more(make_backend: BackendFactory, sim: KubeSim) -> None:
    sim.enforce_role(role())
    backend: Agent = make_backend()
    for _ in range(2):
        backend.ping()
    assert not [r for r in sim.requests() if r.status == 403]


@pytest.mark.simulator_only("KubeSim.deny takes a right from the simulator's token")
def test_a_trace_says_when_the_identity_may_not_list_events(make_backend: BackendFactory, sim: KubeSim,
                                                            tmp_path: Path) -> None:
    """The shipped Role does not grant ``list events``: a trace then says the Events are not shown and
    why, rather than showing a stall without them."""
    from gahp.backends.k8s.podtrace import PodLook

    backend = make_backend()
    job_id = backend.submit(make_job(tmp_path, cpus=64))  # stays pending: the scheduler writes an Event
    name = job_id.split("/")[2]
    look = PodLook(backend.backend.settings, None)
    try:
        sim.wait_for(lambda: look.events(NAMESPACE, name), 20, "the pod's FailedScheduling Event")
        assert any("FailedScheduling" in line for line in look.events(NAMESPACE, name))
        sim.deny("list", "events", NAMESPACE)
        assert look.events(NAMESPACE, name) == [
            f"(the pod's Events are not shown: this identity may not list events in namespace {NAMESPACE}; "
            "an optional right, see docs/kubernetes.md)"]
    finally:
        look.close()
