"""The status cache: one LIST + WATCH per namespace, resumed from resourceVersion, relisted on
410 Expired, and an API request count that stays flat while the number of polled pilots grows.
Also the clean-up of finished and superseded pods.
"""

from __future__ import annotations

import getpass
import json
import time
import urllib.request
from pathlib import Path
from typing import Iterator, List

import pytest

from gahp.agent import Agent
from gahp.backends.k8s.backend import KubernetesBackend
from gahp.backends.k8s.identity import ANN_USER, owner_labels, pod_name, sandbox_key
from gahp.backends.k8s.spec import ANN_REPORTED, LABEL_GENERATION, LABEL_QUEUE, LABEL_SANDBOX
from gahp.core.config import Knobs
from gahp.core.errors import TransientError
from gahp.core.jobstate import Phase
from podgahp_sim.k8s import KubeSim, RequestRecord, SimConfig, SimNode

from k8s_helpers import IMAGE, NAMESPACE, BackendFactory, knobs_for, make_job, wait_state
from polling import wait_until

pytestmark = pytest.mark.both_engines


USER = getpass.getuser()


def name_of(tag: str, generation: int = 1) -> str:
    """The pod name podgahp gives sandbox ``tag`` of this user on CE ce.test."""
    return pod_name(sandbox_key("ce.test", USER, tag), generation)


def _create_pods(sim: KubeSim, names: List[str], labels: dict = {},  # noqa: B006 - read only
                 namespace: str = NAMESPACE) -> None:
    """Create pods straight through the REST API, labelled as this user's pilots on this CE (long-running)."""
    for name in names:
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "annotations": {ANN_USER: USER},
                             "labels": {**owner_labels("ce.test", USER), LABEL_QUEUE: "default",
                                        LABEL_SANDBOX: name[6:26], LABEL_GENERATION: "1", **labels}},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "pilot", "image": IMAGE,
                                         "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
                                         "env": [{"name": "PODGAHP_SIM_RUN_SECONDS", "value": "3600"}]}]}}
        request = urllib.request.Request(f"{sim.url}/api/v1/namespaces/{namespace}/pods", method="POST",
                                         data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {sim.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=sim.client_context()) as response:
            assert response.status == 201


def _poll_all(backend: Agent, names: List[str], namespace: str = NAMESPACE) -> None:
    for name in names:
        assert backend.status(f"k8s/{namespace}/{name}").phase in (Phase.IDLE, Phase.RUNNING)


@pytest.fixture
def big_sim() -> Iterator[KubeSim]:
    """One node large enough for 1000 small pods, so the scheduler does not retry them every tick; an
    event log long enough for every change of them, so that no watch expires (410) and lists again."""
    config = SimConfig(namespaces=(NAMESPACE,), tick_seconds=0.2, container_create_seconds=0.05,
                       event_log_size=50000, nodes=(SimNode("big-node", cpu="1000", memory="1000Gi", pods=5000),))
    with KubeSim(config) as running:
        yield running


@pytest.fixture
def big_backend(big_sim: KubeSim, tmp_path: Path) -> Iterator[Agent]:
    backend = Agent(KubernetesBackend.from_knobs(Knobs(knobs_for(big_sim.write_kubeconfig(
        str(tmp_path / "kubeconfig"), namespace=NAMESPACE)))))
    yield backend
    backend.close()


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_request_count_stays_flat_from_10_to_1000_pilots(big_backend: Agent, big_sim: KubeSim) -> None:
    """Polls are answered from the watch copy: once the copy is in and its WATCH open, polling 10 pilots
    or 1000 makes no API request at all. The count starts only then, so that it holds the polls'
    requests alone, not the copy's own LIST and WATCH (which the sim records as they arrive, however
    late a loaded machine lets them come)."""
    backend, sim = big_backend, big_sim
    names = [name_of(f"flat-{i:04d}") for i in range(1000)]
    _create_pods(sim, names[:10])
    _poll_all(backend, names[:10])  # starts the watch copy
    cache = next(iter(backend.backend.clusters.caches()))
    wait_until(lambda: cache.synced and cache.watching, "the copy listed and its WATCH open", 20)
    sessions = (cache.lists, cache.watches)
    sim.clear_requests()
    for _ in range(3):
        _poll_all(backend, names[:10])
    with_10 = [(r.method, r.path) for r in sim.requests()]

    _create_pods(sim, names[10:])
    wait_until(lambda: all(cache.get(n) for n in names), "the watch delivered 1000 pods", 30)
    sim.clear_requests()
    for _ in range(3):
        _poll_all(backend, names)
    with_1000 = [(r.method, r.path) for r in sim.requests()]
    assert (with_10, with_1000) == ([], [])
    assert (cache.lists, cache.watches) == sessions  # the same WATCH all along: the copy made no request


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_watch_resumes_from_the_last_resource_version(backend: Agent, sim: KubeSim,
                                                      tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "1.5")]))
    wait_state(backend, job_id, Phase.IDLE, Phase.RUNNING)
    cache = next(iter(backend.backend.clusters.caches()))
    lists = cache.lists


    def watches() -> List[RequestRecord]:
        sim.drop_watches()  # the request log records a watch when it ends
        return [r for r in sim.requests("GET", "/pods$") if r.query.get("watch")]

    sim.wait_for(lambda: len(watches()) >= 2, 5, "two watches ended")
    for resumed in watches()[1:]:
        assert resumed.query.get("resourceVersion") not in (None, "", "0")
    state = wait_state(backend, job_id, Phase.COMPLETED, Phase.HELD)
    assert state.phase is Phase.COMPLETED and cache.lists == lists  # resumed, not relisted


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_expired_watch_relists(backend: Agent, sim: KubeSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "1")]))
    wait_state(backend, job_id, Phase.IDLE, Phase.RUNNING)
    cache = next(iter(backend.backend.clusters.caches()))
    lists = cache.lists
    sim.compact()

    def behind() -> bool:
        cache._rv = "1"  # as if this process had fallen behind the server's event log
        sim.drop_watches()  # repeated: the watch may not be open yet
        return cache.lists > lists

    sim.wait_for(behind, 5, "a relist after 410")
    assert wait_state(backend, job_id, Phase.COMPLETED, Phase.HELD).phase is Phase.COMPLETED


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_expired_watch_as_http_410_relists(backend: Agent, sim: KubeSim, tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, env=[("PODGAHP_SIM_RUN_SECONDS", "1")]))
    wait_state(backend, job_id, Phase.IDLE, Phase.RUNNING)
    cache = next(iter(backend.backend.clusters.caches()))
    lists = cache.lists
    sim.fail_next(1, status=410, method="GET", path="/pods$")
    sim.wait_for(lambda: sim.drop_watches() or cache.lists > lists, 5, "a relist after HTTP 410")


@pytest.mark.simulator_only("changes the credentials the simulator accepts")
def test_a_poll_of_an_unchanged_pod_gives_the_same_answer(backend: Agent, sim: KubeSim,
                                                         tmp_path: Path) -> None:
    """The answer (and its status ad) is built once per change of the pod, not per poll."""
    job_id = backend.submit(make_job(tmp_path, cpus=1, env=[("PODGAHP_SIM_RUN_SECONDS", "3600")]))
    running = wait_until(lambda: backend.status_now(job_id), "the pod running in the watch copy", 15,
                         done=lambda state: state is not None and state.phase is Phase.RUNNING)
    assert backend.status_now(job_id) is running and backend.status(job_id) is running
    _, namespace, name = job_id.split("/")
    copy = backend.backend.clusters.watched(namespace)[0]
    seen = copy.get(name)
    request = urllib.request.Request(f"{sim.url}/api/v1/namespaces/{namespace}/pods/{name}", method="PATCH",
                                     data=json.dumps({"metadata": {"annotations": {"x": "y"}}}).encode(),
                                     headers={"Authorization": f"Bearer {sim.token}",
                                              "Content-Type": "application/merge-patch+json"})
    with urllib.request.urlopen(request, context=sim.client_context()) as response:
        assert response.status == 200
    wait_until(lambda: copy.get(name) is not seen, "the changed pod in the watch copy", 15)
    # derived anew from the changed pod: an equal answer, handed out as the same object
    assert backend.status_now(job_id) is running


@pytest.mark.simulator_only("injects API faults (errors, latency, dropped or expired watches)")
def test_status_keeps_answering_from_the_cache_while_the_api_fails(backend: Agent, sim: KubeSim,
                                                                   tmp_path: Path) -> None:
    job_id = backend.submit(make_job(tmp_path, cpus=64))
    wait_state(backend, job_id, Phase.IDLE)
    sim.fail_next(1000, status=503)
    sim.drop_watches()
    time.sleep(0.3)
    assert backend.status(job_id).phase is Phase.IDLE
    sim.clear_faults()


def test_clean_up_deletes_reported_and_superseded_pods(make_backend: BackendFactory, sim: KubeSim,
                                                       tmp_path: Path, namespace: str) -> None:
    backend = make_backend(PODGAHP_K8S_FINISHED_RETENTION_SECONDS="0")
    done = backend.submit(make_job(tmp_path, sandbox="done_1.0_1"))
    assert wait_state(backend, done, Phase.COMPLETED).phase is Phase.COMPLETED
    unreported = backend.submit(make_job(tmp_path, sandbox="quiet_1.0_1", stdout=None, stderr=None))
    sim.wait_for_phase(namespace, unreported.split("/")[2], "Succeeded")
    old_gen, new_gen = name_of("shared", 1), name_of("shared", 2)
    _create_pods(sim, [old_gen], {LABEL_SANDBOX: "shared", LABEL_GENERATION: "1"}, namespace)
    _create_pods(sim, [new_gen], {LABEL_SANDBOX: "shared", LABEL_GENERATION: "2"}, namespace)
    cache = next(iter(backend.backend.clusters.caches()))
    sim.wait_for(lambda: cache.get(new_gen) and cache.get(done.split("/")[2]) is not None and
                 cache.get(done.split("/")[2]).annotation(ANN_REPORTED), 5, "cache current")  # type: ignore[union-attr]
    deleted = backend.backend.reap(cache)
    assert sorted(deleted) == sorted([done.split("/")[2], old_gen])
    assert sim.pod(namespace, unreported.split("/")[2]) is not None  # outcome never reported: kept


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_submit_costs_a_pod_and_a_secret_and_no_list(backend: Agent, sim: KubeSim,
                                                       tmp_path: Path) -> None:
    """Once the watch copy is in, each submit is two requests (create pod, create Secret): whether the
    sandbox has pods already is the copy's to answer, not a LIST of the namespace."""
    backend.ping()
    wait_state(backend, backend.submit(make_job(tmp_path, sandbox="ce.test_warm_1.0_1")), Phase.IDLE,
               Phase.RUNNING, Phase.COMPLETED)
    sim.clear_requests()
    for i in range(20):
        backend.submit(make_job(tmp_path, sandbox=f"ce.test_host_{i}.0_1795297304"))
    served = [(r.method, r.path.rsplit("/", 1)[-1]) for r in sim.requests() if not r.query.get("watch")]
    assert sorted(set(served)) == [("POST", "pods"), ("POST", "secrets")], served
    assert len(served) == 40


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_status_for_a_pod_the_copy_lacks_reads_that_pod_only(backend: Agent, sim: KubeSim,
                                                              tmp_path: Path) -> None:
    """An unknown job id costs one GET of that pod, never a relist of the namespace."""
    job_id = backend.submit(make_job(tmp_path))
    wait_state(backend, job_id, Phase.IDLE, Phase.RUNNING, Phase.COMPLETED)
    sim.clear_requests()
    missing = f"k8s/{NAMESPACE}/{name_of('never-made')}"
    assert backend.status(missing).phase is Phase.REMOVED
    served = [(r.method, r.path) for r in sim.requests() if not r.query.get("watch")]
    assert served == [("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{name_of('never-made')}")], served


def test_one_clean_up_pass_deletes_everything_due(make_backend: BackendFactory, sim: KubeSim, tmp_path: Path,
                                                  namespace: str) -> None:
    """However many pods are due (here 120 superseded ones, more than a capped pass took), one pass
    deletes them all; nothing else is touched."""
    backend = make_backend()
    old = [name_of(f"many-{i:03d}", 1) for i in range(120)]
    for i, name in enumerate(old):
        _create_pods(sim, [name], {LABEL_SANDBOX: f"many-{i:03d}", LABEL_GENERATION: "1"}, namespace)
    newer = [name_of(f"many-{i:03d}", 2) for i in range(120)]
    for i, name in enumerate(newer):
        _create_pods(sim, [name], {LABEL_SANDBOX: f"many-{i:03d}", LABEL_GENERATION: "2"}, namespace)
    _poll_all(backend, newer[:1], namespace)  # starts the watch copy
    cache = next(iter(backend.backend.clusters.caches()))
    sim.wait_for(lambda: all(cache.get(n) for n in newer), 20, "the watch copy has every pod")
    assert sorted(backend.backend.reap(cache)) == sorted(old)
    assert all(sim.pod(namespace, n) is not None for n in newer)


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_a_status_does_not_wait_for_the_namespace_list(make_backend: BackendFactory, sim: KubeSim) -> None:
    """A GAHP started on a namespace whose LIST is slow (many pods, a loaded API server) answers a
    status with one GET of that pod instead of waiting for the LIST."""
    names = [name_of("slow-list")]
    _create_pods(sim, names)
    sim.delay_next(8, method="GET", path=f"/namespaces/{NAMESPACE}/pods$")
    backend = make_backend()
    started = time.monotonic()
    assert backend.status(f"k8s/{NAMESPACE}/{names[0]}").phase in (Phase.IDLE, Phase.RUNNING)
    assert time.monotonic() - started < 4
    reads = sim.requests("GET", f"/pods/{names[0]}$")
    assert len(reads) == 1
    cache = next(iter(backend.backend.clusters.caches()))
    assert not cache.synced  # the LIST is still being served: the answer did not come from it
    sim.wait_for(lambda: cache.synced, 20, "the LIST in")
    assert cache.get(names[0]) is not None


class PagedApi:
    """An API server's pod LIST in pages of ``limit`` (each page's token is the index of its first pod),
    answering 410 to the page of the ``expire``-th request; records the thread of every request."""

    def __init__(self, pods: int, expire: int = 0) -> None:
        self.pods = [{"metadata": {"name": f"p{i:03d}", "resourceVersion": str(100 + i)}} for i in range(pods)]
        self.expire = expire
        self.threads: List[str] = []

    def call(self, what: str, method: str, namespace: str, **kwargs: object) -> object:
        import threading

        from gahp.core.errors import Expired

        self.threads.append(threading.current_thread().name)
        if len(self.threads) == self.expire:
            raise Expired(f"{what}: the continue token expired")
        first, limit = int(str(kwargs.get("_continue") or 0)), int(str(kwargs["limit"]))
        following = first + limit if first + limit < len(self.pods) else None
        page = {"kind": "PodList", "metadata": {"resourceVersion": "999", **(
            {"continue": str(following)} if following else {})}, "items": self.pods[first:first + limit]}
        decode = kwargs["decode"]
        assert callable(decode)
        return decode(json.dumps(page).encode())


@pytest.mark.parametrize("msgspec_there", [True, False], ids=["next-page-asked-ahead", "one-after-the-other"])
def test_a_list_reads_every_page_and_starts_again_when_its_token_expires(
        monkeypatch: pytest.MonkeyPatch, msgspec_there: bool) -> None:
    """Each page of a LIST is parsed while the next is asked for (where its token can be read without
    parsing it); a token that expires mid-way starts the LIST again, and the copy has every pod once."""
    from gahp.backends.k8s import cache as cache_module, view
    from gahp.backends.k8s.cache import PodCache

    monkeypatch.setattr(cache_module, "PAGE", 7)
    if not msgspec_there:
        monkeypatch.setattr(view, "_list_meta", None)
    api = PagedApi(30, expire=3)
    cache = PodCache(api, NAMESPACE, "", watch_timeout_s=1, backoff_s=0.1, backoff_max_s=0.1)  # type: ignore[arg-type]
    with cache._list_lock:
        cache._list()
    assert sorted(p.name for p in cache.pods()) == [f"p{i:03d}" for i in range(30)]
    assert len(api.threads) == 2 + 1 + 5  # two pages, the 410, then the five pages of the LIST again
    ahead = [t for t in api.threads if t.startswith(f"list-{NAMESPACE}")]
    assert len(ahead) == (2 + 4 if msgspec_there else 0)  # every request but the first of each LIST


@pytest.mark.simulator_only("counts requests in the simulator's request log")
def test_close_ends_every_thread_and_refuses_new_work(make_backend: BackendFactory, sim: KubeSim) -> None:
    """close() returns once the watch and warm-up threads have ended, even while a request of the copy
    waits out a long back-off before its next attempt; the backend then starts no copy and makes no
    client again (a thread left running would go on asking whatever answers on the API's address)."""
    backend = make_backend(PODGAHP_K8S_BACKOFF_SECONDS="60", PODGAHP_K8S_BACKOFF_MAX_SECONDS="60")
    sim.fail_next(1000, status=503)
    backend.start()  # the warm-up starts the copy of the queue's namespace
    wait_until(lambda: sim.requests("GET", f"/namespaces/{NAMESPACE}/pods$"), "the copy's first LIST refused")
    cache = next(iter(backend.backend.clusters.caches()))
    thread = cache._thread
    backend.close()
    assert thread is not None and not thread.is_alive()
    assert backend.backend._warming is not None and not backend.backend._warming.is_alive()
    with pytest.raises(TransientError, match="shutting down"):
        backend.status(f"k8s/{NAMESPACE}/{name_of('after-close')}")
    assert not cache.watching and cache._thread is thread
