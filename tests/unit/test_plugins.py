"""The one registry of backends: names, classes and programs all come from the entry points."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

from gahp import cli
from gahp.core import plugins
from gahp.backends import backend_class
from gahp.backends.base import Backend
from gahp.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _setup_cfg_entry_points() -> configparser.SectionProxy:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser["options.entry_points"]


def test_the_installed_registry_is_the_one_in_setup_cfg() -> None:
    declared = [line.split("=")[0].strip() for line in _setup_cfg_entry_points()["podgahp.backends"].splitlines()
                if line.strip()]
    assert plugins.backend_names() == sorted(declared) and {"k8s", "lancium", "memory"} <= set(declared)


@pytest.mark.parametrize("name", plugins.backend_names())
def test_each_registered_backend_loads_as_a_backend_of_its_name(name: str) -> None:
    found = backend_class(name)
    assert issubclass(found, Backend) and found.name == name


def test_an_unregistered_backend_is_a_configuration_error_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"'slurm'.*k8s, lancium, memory"):
        backend_class("slurm")


def test_each_gahp_program_is_a_registered_backend() -> None:
    scripts = [line.split("=") for line in _setup_cfg_entry_points()["console_scripts"].splitlines() if line.strip()]
    programs = {name.strip(): target.strip() for name, target in scripts if name.strip().endswith("_gahp")}
    assert programs == {f"{n}_gahp": f"gahp.cli:{n}_gahp" for n in plugins.programs()}
    assert {"k8s_gahp", "lancium_gahp"} <= set(programs)
    for name in programs:
        assert callable(getattr(cli, name)) and getattr(cli, name).__name__ == name
    with pytest.raises(AttributeError):
        cli.slurm_gahp  # noqa: B018 - no such backend, no such program
