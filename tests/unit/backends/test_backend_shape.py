"""Every backend has the same shape: the same module names for the same concerns, each backend's
package saying so, the same names in them for the same roles (the submit's ``Submitter``, the state
table of ``Rule`` rows, settings from a ``from_knobs`` classmethod, the job id's two functions, the
outputs' writer), and none holding what the kit holds for all (a retry loop over requests, the
translation of statuses, a wait between attempts or reconnections of its own, a hold code of its own,
the recording of a job). Every module of
gahp/backends/ beside the backend packages is in a layer of the kit's import contract."""

from __future__ import annotations

import configparser
import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from gahp import holds
from gahp.backends.table import Rule
from gahp.records import JobRecord

ROOT = Path(__file__).resolve().parents[3]
BACKENDS = ROOT / "gahp" / "backends"
PACKAGES = sorted(p.name for p in BACKENDS.iterdir() if (p / "__init__.py").exists())

#: The concerns every service backend has, each in a module of this name.
SHARED = ("backend", "settings", "api", "spec", "submit", "cache", "state", "output", "identity", "retention",
          "census")


def _module(package: str, name: str) -> Any:
    return importlib.import_module(f"gahp.backends.{package}.{name}")


def test_there_are_backend_packages() -> None:
    assert {"k8s", "lancium"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_has_a_module_of_the_same_name_for_each_shared_concern(package: str) -> None:
    modules = {p.stem for p in (BACKENDS / package).glob("*.py")}
    assert set(SHARED) <= modules, sorted(set(SHARED) - modules)
    described = (BACKENDS / package / "__init__.py").read_text()
    for name in SHARED:
        assert f"``{name}``" in described, f"{package}/__init__.py does not say what {name} holds"


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_submits_through_a_submitter_that_returns_the_job_and_its_record(package: str) -> None:
    submit = _module(package, "submit")
    assert inspect.isclass(submit.Submitter) and list(inspect.signature(submit.Submitter.submit).parameters) == \
        ["self", "job"]
    fields = [f.name for f in dataclasses.fields(submit.Submitted)]
    assert {"record", "made"} <= set(fields) and ("job_id" in fields or hasattr(submit.Submitted, "job_id")), fields
    assert submit.Submitted.__dataclass_fields__["record"].type in (JobRecord, "JobRecord")


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_has_one_state_table_of_rules_with_its_holds_from_the_registry(package: str) -> None:
    state = _module(package, "state")
    assert state.STATE_TABLE and all(isinstance(rule, Rule) for rule in state.STATE_TABLE.values())
    for key, rule in state.STATE_TABLE.items():
        assert rule.hold is None or rule.hold in holds.HOLDS.values(), key
    assert callable(state.classify) and callable(state.job_state)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_reads_its_settings_by_a_from_knobs_classmethod(package: str) -> None:
    settings = _module(package, "settings")
    classes = [c for _, c in inspect.getmembers(settings, inspect.isclass)
               if c.__module__ == settings.__name__ and isinstance(inspect.getattr_static(c, "from_knobs", None),
                                                                    classmethod)]
    assert len(classes) == 1 and dataclasses.is_dataclass(classes[0]), classes
    backend = _module(package, "backend")
    source = inspect.getsource(backend)
    assert f"{classes[0].__name__}.from_knobs(knobs)" in source


@pytest.mark.parametrize("package", PACKAGES)
def test_each_backend_names_its_job_ids_and_writes_its_outputs_by_the_same_functions(package: str) -> None:
    identity = _module(package, "identity")
    assert callable(identity.job_id_of) and callable(identity.parse_job_id)
    assert identity.sandbox_key is importlib.import_module("gahp.identity").sandbox_key  # the GAHP-wide rule
    write_outputs = _module(package, "output").write_outputs
    assert inspect.signature(write_outputs).return_annotation in (bool, "bool")  # the pipeline's Outputs


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in BACKENDS.glob("*/*.py")))
def test_no_backend_repeats_the_kits_rules(path: str) -> None:
    text = (ROOT / path).read_text()
    assert not re.search(r"for attempt in range|TRANSIENT|RETRY_STATUSES|def translate\(method", text), path
    assert "_send(" not in text or "self.door.call(" in text, path
    assert not re.search(r"Hold\(|HOLD_RETRYABLE|HOLD_FATAL|hold_subcode=", text), path
    assert "cannot be recorded" not in text, path  # Pipeline.record's
    assert ".delay(" not in text and "time.sleep(" not in text, path  # a wait of its own


def test_every_module_beside_the_backend_packages_is_in_the_kits_layers() -> None:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    layers = parser["importlinter:contract:backend-layers"]["layers"]
    declared = {name.strip() for line in layers.splitlines() for name in re.split(r"[|:]", line) if name.strip()}
    modules = {p.stem for p in BACKENDS.glob("*.py") if p.stem != "__init__"}
    assert modules == declared
