"""The agent's contract, run against every backend alike (the in-memory one, Lancium's and Kubernetes'
over their simulators, in one shared world fixture): a submit is idempotent per sandbox and recorded
before it is made, a pilot's outputs are written before it is reported completed or it is held, a
final answer is given for good, a cancel is kept in the job's record (done) and repeats, pilots that
fail fast close their queue, and a job that cannot be recorded is not made.

And the shape every backend shares: no backend calls a rule of the agent's itself (none imports the
modules that hold them, or touches their objects), each registered backend is an adapter with the
verbs of :class:`gahp.backends.base.Backend`, its state table's holds come from the registry, and
every module of gahp/backends/ beside the backend packages is in a layer of the kit's contract."""

from __future__ import annotations

import ast
import configparser
import importlib
import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

from gahp.rules import holds
from gahp.core import plugins
from gahp.agent import Agent
from gahp.backends import backend_class
from gahp.backends.base import Backend
from gahp.backends.table import Rule
from gahp.core.config import Knobs
from gahp.core.errors import BackendError
from gahp.core.job import PilotJob
from gahp.core.jobstate import JobState, Phase
from polling import wait_until

ROOT = Path(__file__).resolve().parents[3]
BACKENDS = ROOT / "gahp" / "backends"
PACKAGES = sorted(p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists())
NAMESPACE = "pilots"
WORLDS = ("memory", "lancium", "k8s")


@dataclass
class World:
    """One backend inside its agent, over its service, and what a test needs to drive it. Its pilots
    say how they end in their environment, as the simulators read it: ``PODGAHP_SIM_EXIT_CODE`` (the
    service's job exits with it) and ``PODGAHP_SIM_RUN_SECONDS`` (600: it runs on)."""

    name: str
    make: Callable[..., Agent]
    """Another agent of the same backend, service and state directory (a fresh GAHP process)."""
    made: Optional[Callable[[], int]]
    """How many remote jobs the service holds (None: the backend has no service to ask)."""
    tmp: Path

    def pilot(self, sandbox: str = "ce.test_host_1.0_1795297304", exit_code: int = 0, long: bool = False,
              stdout: str = "pilot.out") -> PilotJob:
        exe = self.tmp / "glidein_startup.sh"
        exe.write_text("#!/bin/sh\necho pilot\n")
        env = [("PODGAHP_SIM_EXIT_CODE", str(exit_code))] + ([("PODGAHP_SIM_RUN_SECONDS", "600")] if long else [])
        return PilotJob(executable=str(exe), iwd=str(self.tmp), sandbox_id=sandbox, arguments=("-v",),
                        environment=tuple(env), stdout=str(self.tmp / stdout), stderr=str(self.tmp / "pilot.err"),
                        memory_mb=256, wall_time_s=3600)


def _memory(tmp: Path, state: str) -> Iterator[World]:
    from gahp.backends.memory import MemoryBackend

    def make(**knobs: str) -> Agent:
        return Agent(MemoryBackend.from_knobs(Knobs({"PODGAHP_STATE_DIR": state, "PODGAHP_MEMORY_IDLE_SECONDS": "0.1",
                                                     "PODGAHP_MEMORY_RUN_SECONDS": "0.3", **knobs})))

    yield World("memory", make, None, tmp)


def _lancium(tmp: Path, state: str) -> Iterator[World]:
    from gahp.backends.lancium.backend import LanciumBackend
    from podgahp_sim.lancium import LanciumSim, LanciumSimSettings

    settings = LanciumSimSettings(tick=0.01, submit_seconds=0.02, queue_seconds=0.05, run_seconds=0.3,
                                  delete_seconds=0.2, output_prepare_polls=1)
    with LanciumSim(settings) as sim:
        key = tmp / "lancium.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(sim.api_key + "\n")

        def make(**knobs: str) -> Agent:
            return Agent(LanciumBackend.from_knobs(Knobs({
                "PODGAHP_STATE_DIR": state, "PODGAHP_LANCIUM_BASE_URL": sim.url,
                "PODGAHP_LANCIUM_API_KEY_FILE": str(key), "PODGAHP_LANCIUM_LIST_MAX_AGE_SECONDS": "0",
                "PODGAHP_LANCIUM_BACKOFF_SECONDS": "0.01", "PODGAHP_LANCIUM_BACKOFF_MAX_SECONDS": "0.05",
                "PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS": "5", **knobs})))

        yield World("lancium", make, lambda: len(sim.jobs()), tmp)


def _k8s(tmp: Path, state: str) -> Iterator[World]:
    from gahp.backends.k8s.backend import KubernetesBackend
    from podgahp_sim.k8s import KubeSim, SimConfig

    config = SimConfig(namespaces=("default", NAMESPACE), tick_seconds=0.05, run_seconds=0.5,
                       container_create_seconds=0.05, image_backoff_seconds=0.1, gc_seconds=0.1,
                       sigterm_exit_seconds=0.2)
    with KubeSim(config) as sim:
        kubeconfig = sim.write_kubeconfig(str(tmp / "kubeconfig"), namespace=NAMESPACE)

        def make(**knobs: str) -> Agent:
            return Agent(KubernetesBackend.from_knobs(Knobs({
                "PODGAHP_STATE_DIR": state, "PODGAHP_K8S_KUBECONFIG": kubeconfig,
                "PODGAHP_K8S_IMAGE": "registry.example/pilot:1.0", "PODGAHP_K8S_CE_NAME": "ce.test",
                "PODGAHP_K8S_BACKOFF_SECONDS": "0.05", "PODGAHP_K8S_BACKOFF_MAX_SECONDS": "0.2",
                "PODGAHP_K8S_REQUEST_TIMEOUT_SECONDS": "3", "PODGAHP_K8S_SYNC_TIMEOUT_SECONDS": "5",
                "PODGAHP_K8S_REAP_INTERVAL_SECONDS": "0", **knobs})))

        yield World("k8s", make, lambda: len(sim.pods(NAMESPACE)), tmp)


@pytest.fixture(params=WORLDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """Every backend over its service; every agent made is closed after the test."""
    state = tmp_path / "state"
    state.mkdir(mode=0o1777)
    build = globals()["_" + request.param]  # a world is the generator named for its backend
    agents: List[Agent] = []
    for world in build(tmp_path, str(state)):
        make = world.make

        def made(**knobs: str) -> Agent:
            agent = make(**knobs)
            agents.append(agent)
            return agent

        world.make = made
        try:
            yield world
        finally:
            for agent in agents:
                agent.close()


def _final(agent: Agent, job_id: str, timeout: float = 30.0) -> JobState:
    return wait_until(lambda: agent.status(job_id), f"{job_id} ended", timeout, 0.05,
                      done=lambda state: state.phase.final)


# -- the contract -----------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_a_submit_is_recorded_and_idempotent_per_sandbox(world: World) -> None:
    agent = world.make()
    job_id = agent.submit(world.pilot(long=True))
    assert job_id.startswith(f"{world.name}/") and not any(c.isspace() for c in job_id)
    assert agent.submit(world.pilot(long=True)) == job_id  # the sandbox has a live job: it is the pilot
    record = agent.records.get(job_id)
    assert record is not None and record.sandbox_id == world.pilot().sandbox_id and record.cancel == ""
    assert world.made is None or world.made() == 1


@pytest.mark.timeout(120)
def test_outputs_are_written_before_completion_and_the_final_answer_is_kept(world: World) -> None:
    agent = world.make()
    job_id = agent.submit(world.pilot())
    state = _final(agent, job_id)
    assert state.phase is Phase.COMPLETED and state.exit_code == 0, state
    assert (world.tmp / "pilot.out").exists()
    assert agent.status(job_id) is state and agent.status_now(job_id) is state  # given for good
    fresh = world.make()  # a fresh GAHP finishes the job's business from its id and record alone
    assert _final(fresh, job_id).phase is Phase.COMPLETED


@pytest.mark.timeout(120)
def test_an_output_that_cannot_be_written_holds_the_job(world: World) -> None:
    os.symlink("/etc", world.tmp / "link")
    agent = world.make()
    job_id = agent.submit(world.pilot(stdout="link/pilot.out"))
    state = _final(agent, job_id)
    assert (state.phase, state.hold_code, state.hold_subcode) == (Phase.HELD, holds.HOLD_RETRYABLE,
                                                                  holds.OUTPUT.subcode), state
    assert not os.path.exists("/etc/pilot.out")


@pytest.mark.timeout(120)
def test_a_cancel_is_kept_in_the_record_and_repeats(world: World) -> None:
    agent = world.make()
    job_id = agent.submit(world.pilot(long=True))
    agent.cancel(job_id)
    record = agent.records.get(job_id)
    assert record is not None and record.cancel == "done"
    assert agent.status(job_id).phase is Phase.REMOVED  # at once, for good
    agent.cancel(job_id)  # idempotent
    assert _final(world.make(), job_id).phase is Phase.REMOVED  # a fresh GAHP: from the record
    if world.made is not None:
        wait_until(world.made, "the remote job gone", 30, 0.05, done=lambda n: n == 0)


@pytest.mark.timeout(120)
def test_pilots_failing_fast_close_their_queue(world: World) -> None:
    agent = world.make(PODGAHP_BLACKHOLE_FAILURES="2")
    for n in range(2):
        assert _final(agent, agent.submit(world.pilot(sandbox=f"ce.test_host_{n}.0_1", exit_code=1))).exit_code == 1
    with pytest.raises(BackendError, match="closed as a black hole"):
        agent.submit(world.pilot(sandbox="ce.test_host_9.0_1"))
    agent.stats.flush()
    text = Path(agent.stats.path).read_text()
    assert '"submits_refused_blackhole":1' in text.replace(" ", "") and '"pilots_failed":2' in text.replace(" ", "")


@pytest.mark.timeout(120)
def test_a_job_that_cannot_be_recorded_is_not_made(world: World) -> None:
    agent = world.make()
    directories = agent.records.directories
    agent.records.directories = []  # no state directory can be used
    with pytest.raises(BackendError, match="cannot be recorded, so it is not made.*PODGAHP_STATE_DIR"):
        agent.submit(world.pilot())
    assert world.made is None or world.made() == 0
    agent.records.directories = directories
    job_id = agent.submit(world.pilot())
    assert agent.records.get(job_id) is not None


# -- the shape --------------------------------------------------------------------------------

#: The modules that hold the agent's rules, and the names of its objects: no backend imports or touches them.
AGENT_MODULES = ("gahp.agent", "gahp.rules.answers", "gahp.rules.cancels", "gahp.rules.figures")
AGENT_NAMES = {"gahp.rules.blackhole": {"Guard", "verdict"}}
AGENT_OBJECTS = {"pipeline", "reports", "guard", "stats", "_cancels"}


def _backend_modules() -> List[Path]:
    return sorted(p for p in BACKENDS.rglob("*.py") if p.name != "base.py")


def _kit_uses(path: Path) -> List[str]:
    """What a backend module takes of the agent's rules (each a line naming it)."""
    found: List[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if node.module in AGENT_MODULES or names & AGENT_NAMES.get(node.module, set()):
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if a.name in AGENT_MODULES]
        elif isinstance(node, ast.Attribute) and node.attr in AGENT_OBJECTS:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "put"
              and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "records"):
            found.append(f"line {node.lineno}: records.put (a cancel's record is the agent's)")
    return found


@pytest.mark.parametrize("path", [str(p.relative_to(ROOT)) for p in _backend_modules()])
def test_no_backend_calls_a_rule_of_the_agents_itself(path: str) -> None:
    assert _kit_uses(ROOT / path) == []


def test_the_finder_of_rule_calls_finds_them(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gahp.rules.answers import RANK\nfrom gahp.rules.blackhole import Guard, GuardSettings\n"
                   "def f(self):\n    self.pipeline.report()\n    self.records.put(1)\n    self.records.get(1)\n")
    assert sorted(line.split(":")[0] for line in _kit_uses(bad)) == ["line 1", "line 2", "line 4", "line 5"]


@pytest.mark.parametrize("name", plugins.backend_names())
def test_every_backend_is_an_adapter_with_the_verbs_and_a_place(name: str) -> None:
    cls = backend_class(name)
    assert issubclass(cls, Backend) and not inspect.isabstract(cls)
    for verb in ("queue_of", "ping", "create", "observe", "remove", "refresh_proxy"):
        assert getattr(cls, verb) is not getattr(Backend, verb), f"{name} has no {verb}"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_package_has_a_backend_module_and_names_its_modules(package: str) -> None:
    modules = {p.stem for p in (BACKENDS / package).glob("*.py")} - {"__init__"}
    assert "backend" in modules
    described = (BACKENDS / package / "__init__.py").read_text()
    for name in sorted(modules):
        assert f"``{name}``" in described, f"{package}/__init__.py does not say what {name} holds"


@pytest.mark.parametrize("package", [p for p in PACKAGES if (BACKENDS / p / "state.py").exists()])
def test_a_state_table_of_a_backend_takes_its_holds_from_the_registry(package: str) -> None:
    table: Dict[str, Rule] = importlib.import_module(f"gahp.backends.{package}.state").STATE_TABLE
    assert table and all(isinstance(rule, Rule) for rule in table.values())
    for key, rule in table.items():
        assert rule.hold is None or rule.hold in holds.HOLDS.values(), key


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in BACKENDS.glob("*/*.py")))
def test_no_backend_repeats_the_kits_rules(path: str) -> None:
    text = (ROOT / path).read_text()
    assert not re.search(r"for attempt in range|TRANSIENT|RETRY_STATUSES|def translate\(method", text), path
    assert "_send(" not in text or "self.door.call(" in text, path
    assert not re.search(r"Hold\(|HOLD_RETRYABLE|HOLD_FATAL|hold_subcode=", text), path
    assert "cannot be recorded" not in text, path  # JobRecords.note's
    assert ".delay(" not in text and "time.sleep(" not in text, path  # a wait of its own


def test_every_module_beside_the_backend_packages_is_in_the_kits_layers() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    layers = parser["importlinter:contract:backend-layers"]["layers"]
    declared = {name.strip() for line in layers.splitlines() for name in re.split(r"[|:]", line) if name.strip()}
    modules = {p.stem for p in BACKENDS.glob("*.py") if p.stem != "__init__"}
    assert modules == declared
