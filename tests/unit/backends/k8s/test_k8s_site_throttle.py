"""An API server that throttles podgahp, on the real control plane: API Priority and Fairness (beta
and on by default in 1.20) with a FlowSchema that puts podgahp's ServiceAccount in a priority level of
the smallest share, which rejects what it cannot serve at once (``429`` with ``Retry-After``).
Submits from many threads at once, as the GAHP's workers make them, all go through at the rate the
server allows: none fails (the gridmanager would hold its job), none makes a second pod, and the log
says that the server throttles. (The simulator's counterpart, a 429 with ``Retry-After`` injected,
is in test_k8s_backend.py.)
"""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, List

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.identity import LABEL_SANDBOX
from gahp.core.config import Knobs
from engines import ACCOUNT, RealEngine
from k8s_helpers import knobs_for, make_job
from polling import wait_until
from podgahp_sim.kube.client import ApiError

PILOTS = 30
#: At most this many rounds of PILOTS submits, until the server has throttled one.
ROUNDS = 6
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1beta1"


@pytest.fixture
def throttled(real_engine: RealEngine) -> Iterator[str]:
    """The account's requests in a priority level of one share that rejects what waits; its name."""
    engine = real_engine
    name = "podgahp-" + engine.namespace
    engine.api.call("POST", FLOWCONTROL + "/prioritylevelconfigurations", {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta1", "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {"assuredConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}}})
    engine.api.call("POST", FLOWCONTROL + "/flowschemas", {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1beta1", "kind": "FlowSchema", "metadata": {"name": name},
        "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                 "distinguisherMethod": {"type": "ByUser"},
                 "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                     "name": ACCOUNT, "namespace": engine.namespace}}],
                     "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                        "namespaces": ["*"], "clusterScope": True}],
                     "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
    try:
        yield name
    finally:
        for kind in ("flowschemas", "prioritylevelconfigurations"):
            try:
                engine.api.call("DELETE", "%s/%s/%s" % (FLOWCONTROL, kind, name))
            except ApiError as e:
                if e.status != 404:
                    raise


class Flood:
    """``count`` threads reading pods as the account, one connection each, until the block ends."""

    def __init__(self, engine: RealEngine, count: int) -> None:
        self.engine, self.count = engine, count
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._read, daemon=True) for _ in range(count)]

    def _read(self) -> None:
        context = self.engine.client_context()
        url = "%s/api/v1/namespaces/%s/pods?limit=1" % (self.engine.url, self.engine.namespace)
        while not self.stop.is_set():
            request = urllib.request.Request(url, headers={"Authorization": "Bearer " + self.engine.token})
            try:
                with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                    answer.read()
            except OSError:  # 429 (urllib's HTTPError is one) or a connection refused: again
                continue

    def __enter__(self) -> "Flood":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)


def rejected(engine: RealEngine, level: str) -> int:
    """The API server's own count of the requests of ``level`` it rejected."""
    total = 0
    for line in engine.api.text("/metrics").splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{") and f'priority_level="{level}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


@pytest.mark.timeout(600)
def test_submits_go_on_at_the_throttled_rate(real_engine: RealEngine, throttled: str, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    engine = real_engine
    kubeconfig = engine.write_kubeconfig(str(tmp_path / "kubeconfig"))
    # one retry only: the 429s are waited through (PODGAHP_K8S_THROTTLE_WAIT_SECONDS), not retried
    backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(kubeconfig, PODGAHP_K8S_BACKOFF_MAX_SECONDS="10",
                                                           PODGAHP_K8S_RETRIES="1"))))
    caplog.set_level(logging.INFO)
    def throttled_submits() -> List[str]:
        return [r.getMessage() for r in caplog.records if "the service throttles" in r.getMessage()
                and "create " in r.getMessage()]

    try:
        backend.ping()
        job_ids: List[str] = []
        # the account's level kept full by 40 readers of its own (the same user: the same flow), so that the
        # submits meet its rejections however fast the machine serves them: full once the server rejects
        # the readers' own requests; then rounds of submits until the server has throttled one of them (on
        # a busy machine the readers, slowed too, can leave a round's submits a free seat each time)
        with Flood(engine, 40):
            wait_until(lambda: rejected(engine, throttled) > 0, "the server rejecting the readers' requests",
                       timeout=120, interval=0.2)
            with ThreadPoolExecutor(20) as pool:
                for first in range(0, PILOTS * ROUNDS, PILOTS):
                    jobs = [make_job(tmp_path, sandbox="ce.test_host_t.%d_1795297304" % n,
                                     env=[("PODGAHP_SIM_RUN_SECONDS", "3600")]) for n in range(first, first + PILOTS)]
                    job_ids += list(pool.map(backend.submit, jobs))
                    if throttled_submits():
                        break
        assert throttled_submits(), "the server throttled none of %d submits" % len(job_ids)
        assert rejected(engine, throttled) > 0
        assert len(set(job_ids)) == len(job_ids)
        per_sandbox = Counter(p["metadata"]["labels"][LABEL_SANDBOX] for p in engine.pods())
        assert len(per_sandbox) == len(job_ids) and set(per_sandbox.values()) == {1}
    finally:
        backend.close()
