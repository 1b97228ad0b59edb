"""Shared test fixtures; ``tests/`` is on sys.path so tests import ``gahp_driver``."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import pytest

from engines import ENGINES, RealEngine, namespace_for, start_real_cluster
from gahp_driver import GahpProcess, gahp_env, script
from podgahp_sim.kube.cluster import KubeCluster


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """Undoes what a test changed of the logging module's state in this process: the level of the
    ``gahp`` loggers (a test that quietens them), and what ``gahp.core.logs.setup`` sets (a handler on
    the root logger, the record fields it does not gather, warnings captured). Without it a later test
    of the same process, pytest-xdist's choice, reads no line of podgahp's log (caplog) or writes to an
    earlier test's file. The root logger's level and pytest's own handlers are pytest's to restore."""
    root, gahp_logger = logging.getLogger(), logging.getLogger("gahp")
    handlers, level = set(root.handlers), gahp_logger.level
    gathered = (logging._srcfile, logging.logThreads, logging.logMultiprocessing)
    showwarning = warnings.showwarning
    yield
    for handler in list(root.handlers):
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
            handler.close()
    gahp_logger.setLevel(level)
    logging._srcfile, logging.logThreads, logging.logMultiprocessing = gathered
    logging.captureWarnings(False)
    warnings.showwarning = showwarning


@pytest.fixture
def start_gahp(tmp_path: Path) -> Iterator[Callable[..., GahpProcess]]:
    """Start ``podgahp gahp --backend NAME`` (or a named console script) with knobs as keywords."""
    started: List[GahpProcess] = []

    def start(backend: str = "memory", program: str = "", **knobs: str) -> GahpProcess:
        argv = [script(program)] if program else [script("podgahp"), "gahp", "--backend", backend]
        proc = GahpProcess(argv, env=gahp_env(str(tmp_path), **knobs), cwd=str(tmp_path))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


#: Live test modules whose tests share what a module-scoped fixture of their own starts (pools, a
#: cluster). Under ``make live`` (``--dist loadscope``) their tests run in one worker, in order, once
#: per HTCondor series, so it starts once per series; every other live test runs in whichever worker
#: is free. Checked at collection against the modules' fixtures.
SHARED_MODULES = frozenset({"tests/live/test_real_pilots.py"})
#: Live test modules whose every test runs on the real engine (without the engine parameter).
REAL_ENGINE_MODULES = frozenset({"tests/live/test_e2e_real_control_plane.py"})


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    collected, shared = set(), set()
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        module = getattr(item, "module", None)
        if item.get_closest_marker("live") is None or info is None or module is None:
            continue
        path = item.nodeid.split("::", 1)[0]
        collected.add(path)
        if any(d.scope == "module" and getattr(d.func, "__module__", None) == module.__name__
               for defs in info.name2fixturedefs.values() for d in defs):
            shared.add(path)
    if shared != SHARED_MODULES & collected:
        raise pytest.UsageError(f"tests/conftest.py: SHARED_MODULES should name {sorted(shared)} of {sorted(collected)}")


def live_scope(nodeid: str, series: "frozenset[str]") -> str:
    """The unit of work of a live test under ``--dist loadscope``: its own, except the tests of
    SHARED_MODULES, one unit per module and series (the series is the test's parameter), and those on
    the real engine, one unit per series: one worker per series starts a control plane (a worker's
    own, tests/engines.py), not every worker."""
    path = nodeid.split("::", 1)[0]
    params = re.search(r"\[([^\]]*)\]$", nodeid)
    words = set(params.group(1).split("-")) if params else set()
    found = sorted(series & words)
    if "real" in words or path in REAL_ENGINE_MODULES:
        return f"real engine[{found[0]}]" if found else "real engine"
    if path not in SHARED_MODULES:
        return nodeid
    return f"{path}[{found[0]}]" if found else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Optional[Any]:
    """``--dist loadscope`` (``make live``): the units of work of :func:`live_scope`."""
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    from harness import series_from_env

    series = frozenset(series_from_env())

    class LiveScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return live_scope(nodeid, series)

    return LiveScheduling(config, log)


# ------------------------------------------------------------------ the two Kubernetes engines


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``engine``: both engines for a test marked ``both_engines`` (itself or its module) but not
    ``simulator_only``, else the simulator (tests/engines.py)."""
    if "engine" in metafunc.fixturenames:
        both = (metafunc.definition.get_closest_marker("both_engines") is not None
                and metafunc.definition.get_closest_marker("simulator_only") is None)
        metafunc.parametrize("engine", ENGINES if both else ENGINES[:1], scope="function")


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[KubeCluster]:
    """The real control plane with two simulated nodes, once per test process (under the default
    directory of control planes, where the next start removes what a killed run left)."""
    cluster = start_real_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def real_engine(request: pytest.FixtureRequest) -> Iterator[RealEngine]:
    """A namespace of the test's own on the real control plane (deleted afterwards); for a test marked
    ``fault_proxy``, reached through a proxy that injects its faults (tests/faultproxy.py)."""
    cluster: KubeCluster = request.getfixturevalue("real_cluster")
    namespace = namespace_for(request.node.name)
    cluster.add_namespace(namespace)
    engine = None
    try:
        engine = RealEngine(cluster, namespace, proxied=request.node.get_closest_marker("fault_proxy") is not None)
        yield engine
    finally:
        if engine is not None:
            engine.close()
        cluster.delete_namespace(namespace)


@pytest.fixture
def real_default_engine(request: pytest.FixtureRequest) -> Iterator[RealEngine]:
    """The real control plane's ``default`` namespace, emptied for the test (for the tests that name it)."""
    cluster: KubeCluster = request.getfixturevalue("real_cluster")
    engine = RealEngine(cluster, "default")
    try:
        engine.empty_namespace()
        yield engine
    finally:
        engine.close()
        engine.empty_namespace()
