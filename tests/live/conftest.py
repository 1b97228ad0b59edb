"""Fixtures for tests that drive real HTCondor daemons (schedd, JobRouter, gridmanager).

Every test runs once per HTCondor series in PODGAHP_CONDOR_SERIES (default "trixie sid", i.e.
HTCondor 23.x and 25.x from Debian root filesystems; "native" for an installed HTCondor >= 23),
see `harness.rootfs`. Building a root takes under a minute the first time and is cached.

The harness needs root. Daemon logs of a failing test's pools are printed in its teardown.
"""

from __future__ import annotations

import shutil
import uuid
from typing import Any, Callable, Dict, Generator, Iterator, List, Optional

import pytest

from engines import start_real_cluster
from harness import Installation, Pool, get_installation, series_from_env
from podgahp_sim.kube.cluster import KubeCluster

#: Route used by most live tests: every vanilla job goes to podgahp's k8s GAHP. The CE router
#: defaults of ce-config/standalone supply the source-job constraint, so no REQUIREMENTS.
K8S_ROUTE = """\
JOB_ROUTER_ROUTE_NAMES = K8s
JOB_ROUTER_ROUTE_K8s @=jrt
  TargetUniverse = 9
  GridResource = "batch k8s"
  SET default_CERequirements "RequestCpus,RequestDisk,k8s_namespace"
  SET k8s_namespace "pilots"
@jrt
"""

#: K8S_GAHP for the tests: podgahp with its in-memory backend. The wrapper first reports on stderr
#: (copied into GridmanagerLog.<user>) which user it runs as and which configuration it inherited.
MEMORY_GAHP_WRAPPER = """\
#!/bin/sh
echo "gahp-wrapper: user=$(id -un) HOME=$HOME CONDOR_CONFIG=$CONDOR_CONFIG" >&2
exec {podgahp} gahp --backend memory
"""


#: Bound of one live test, set-up included (a first root filesystem build takes a few minutes).
LIVE_TIMEOUT_SECONDS = 1800


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: drives real HTCondor daemons (slow; runs last)")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    # Live tests take minutes: run them after everything else. A stable sort, after pytest has
    # grouped the tests by installation, so each root filesystem is set up once.
    items.sort(key=lambda item: item.get_closest_marker("live") is not None)
    # A live test may first build a root filesystem and start pools (fixture set-up counts against
    # the timeout): a longer bound than the unit tests' default of setup.cfg.
    for item in items:
        if item.get_closest_marker("live") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LIVE_TIMEOUT_SECONDS))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"podgahp_rep_{report.when}", report)


def _failed(node: pytest.Item) -> bool:
    return any(getattr(getattr(node, f"podgahp_rep_{when}", None), "failed", False)
               for when in ("setup", "call"))


@pytest.fixture(scope="session", params=series_from_env())
def installation(request: pytest.FixtureRequest) -> Installation:
    """The HTCondor installation of one series, with podgahp installed (built on first use)."""
    inst = get_installation(request.param)
    inst.acquire()
    try:
        inst.install_podgahp()
    finally:
        inst.release()
    return inst


@pytest.fixture(scope="module")
def acquired(installation: Installation) -> Iterator[Installation]:
    """The installation, with its mounts held for a module's tests (tools run in it without daemons)."""
    installation.acquire()
    try:
        yield installation
    finally:
        installation.release()


@pytest.fixture
def scratch(acquired: Installation) -> Iterator[str]:
    """A scratch directory inside the installation (its path as the tools see it), removed after."""
    path = f"/tmp/podgahp-test-{uuid.uuid4().hex[:8]}"
    acquired.host_path(path).mkdir(parents=True)
    yield path
    shutil.rmtree(acquired.host_path(path), ignore_errors=True)


@pytest.fixture
def make_pool(installation: Installation, request: pytest.FixtureRequest) -> Iterator[Callable[..., Pool]]:
    """Start pools; on teardown print their logs if the test failed, then stop them."""
    pools: List[Pool] = []

    def make(extra_config: str = "", files: Optional[Dict[str, str]] = None, **kwargs: Any) -> Pool:
        pool = Pool(installation, extra_config=extra_config, files=files,
                    name=request.node.originalname[:40], **kwargs)
        pools.append(pool)
        return pool.start()

    yield make
    failed = _failed(request.node)
    for pool in pools:
        if failed:
            pool.dump_logs()
        pool.stop(failed=failed)


@pytest.fixture
def make_k8s_pool(make_pool: Callable[..., Pool], installation: Installation) -> Callable[..., Pool]:
    """Start a CE-like pool whose route K8s sends every vanilla job to
    `podgahp gahp --backend memory`; `extra_config` is appended (e.g. PODGAHP_MEMORY_* knobs)."""

    def make(extra_config: str = "") -> Pool:
        return make_pool(
            extra_config=K8S_ROUTE + "K8S_GAHP = $(LOCAL_DIR)/k8s_gahp\n" + extra_config,
            files={"k8s_gahp": MEMORY_GAHP_WRAPPER.format(podgahp=installation.bin("podgahp"))},
        )

    return make


@pytest.fixture
def k8s_pool(make_k8s_pool: Callable[..., Pool]) -> Pool:
    """A started pool from `make_k8s_pool` with the memory backend's default timings."""
    return make_k8s_pool()


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[KubeCluster]:
    """The real engine of the live tests: the real control plane with the simulator's kubelets as the
    nodes of the simulated cluster of e2e.py (two CPU nodes and a tainted GPU node) and the
    opportunistic queue's PriorityClass, once per test process."""
    from e2e import OPPORTUNISTIC_PRIORITY, real_nodes

    cluster = start_real_cluster(nodes=real_nodes())
    try:
        name, value = OPPORTUNISTIC_PRIORITY
        cluster.admin.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value})
        yield cluster
    finally:
        cluster.stop()
