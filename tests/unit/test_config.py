from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Set

import pytest

from gahp.core import plugins
from gahp.core.config import Knobs, ServerSettings
from gahp.core.errors import ConfigError

ROOT = Path(__file__).parent.parent.parent
CONFIG_DIR = ROOT / "condor_config.d"
#: The GAHP's knobs, and each backend program's <NAME>_GAHP (a new backend's too: from the registry).
PROGRAM_KNOBS = {f"{name.upper()}_GAHP": f"/usr/bin/{name}_gahp" for name in plugins.programs()}
PREFIXES = "|".join(["PODGAHP"] + [knob[:-len("_GAHP")] for knob in PROGRAM_KNOBS])
KNOB = re.compile(rf"\b((?:{PREFIXES})_[A-Z0-9_]*[A-Z0-9])\b")


@pytest.mark.parametrize("method, value, message", [
    ("integer", "ten", "PODGAHP_X = 'ten' is not an integer"),
    ("integer", "0", "PODGAHP_X = 0 is below the minimum of 1"),
    ("number", "1e", "PODGAHP_X = '1e' is not a finite number"),
    ("boolean", "maybe", "PODGAHP_X = 'maybe' is not a boolean"),
], ids=["integer", "minimum", "number", "boolean"])
def test_bad_knob_values_name_knob_value_and_form(method: str, value: str, message: str) -> None:
    knobs = Knobs({"PODGAHP_X": value})
    with pytest.raises(ConfigError, match=re.escape(message)):
        if method == "boolean":
            knobs.boolean("PODGAHP_X", False)
        else:
            getattr(knobs, method)("PODGAHP_X", 5, minimum=1)


def test_knob_reads() -> None:
    knobs = Knobs({"A": " 12 ", "B": "", "C": "yes", "D": "a, b c", "E": "2.5"})
    assert knobs.integer("A", 1) == 12
    assert knobs.integer("B", 7) == 7  # empty means unset
    assert knobs.boolean("C", False) is True
    assert knobs.names("D", []) == ["a", "b", "c"]
    assert knobs.number("E", 0) == 2.5
    assert knobs.optional("MISSING") is None


def test_server_settings_defaults_and_timeout_below_the_gridmanager() -> None:
    settings = ServerSettings.from_knobs(Knobs({"LOG": "/var/log/condor"}), "k8s")
    assert settings.log_file.startswith("/var/log/condor/PodgahpLog.k8s.")
    assert settings.request_timeout_s == 240 and settings.workers == 50
    assert settings.log_level == logging.INFO
    short = ServerSettings.from_knobs(Knobs({"GRIDMANAGER_GAHP_CALL_TIMEOUT": "30"}), "k8s")
    assert short.request_timeout_s < 30
    clamped = ServerSettings.from_knobs(Knobs({"PODGAHP_REQUEST_TIMEOUT_SECONDS": "400"}), "k8s")
    assert clamped.request_timeout_s < 300
    with pytest.raises(ConfigError, match="PODGAHP_DEBUG"):
        ServerSettings.from_knobs(Knobs({"PODGAHP_DEBUG": "LOUD"}), "k8s")


def _knobs_in_code() -> Set[str]:
    found: Set[str] = set()
    for path in (ROOT / "gahp").rglob("*.py"):
        if path == ROOT / "gahp/backends/memory.py":
            continue  # the test backend's knobs are in its module's docstring, never in production files
        text = path.read_text()
        reads = r"\.(?:raw|string|optional|integer|number|boolean|names)\(\s*"
        names = re.findall(reads + r"\"([A-Z0-9_]+)\"", text)
        prefix = re.search(r"^PREFIX = \"([A-Z0-9_]+)\"", text, re.MULTILINE)
        if prefix:  # knobs built as PREFIX + "WHAT"
            names += [prefix.group(1) + n for n in re.findall(reads + r"PREFIX \+ \"([A-Z0-9_]+)\"", text)]
        found.update(n for n in names if KNOB.fullmatch(n))
    return found


def _documented(pattern: str) -> Dict[str, str]:
    """Knob → text of the comment block above it, for knobs set or commented out in the files."""
    knobs: Dict[str, str] = {}
    for path in sorted(CONFIG_DIR.glob(pattern)):
        comment: list = []
        for line in path.read_text().splitlines():
            match = re.match(rf"^#?\s*((?:{PREFIXES})_[A-Z0-9_]+)\s*=", line)
            if match:
                knobs.setdefault(match.group(1), " ".join(comment))
            elif line.startswith("#"):
                comment.append(line)
            else:
                comment = []
    return knobs


def test_every_knob_read_is_documented_in_a_defaults_file() -> None:
    documented = _documented("*-defaults.conf")
    missing = _knobs_in_code() - set(documented)
    assert not missing, f"knobs read but not in condor_config.d/*-defaults.conf: {sorted(missing)}"
    for knob, comment in documented.items():
        assert "default" in comment.lower(), f"{knob}: its comment does not give the default"


def test_every_knob_in_an_admin_file_exists_in_a_defaults_file() -> None:
    defaults = set(_documented("*-defaults.conf"))
    admin = {k for path in CONFIG_DIR.glob("*.conf") if not path.name.endswith("-defaults.conf")
             for k in _documented(path.name)}
    assert admin, "no admin files"
    assert not admin - defaults, f"admin knobs unknown to the defaults: {sorted(admin - defaults)}"


FILES = sorted(CONFIG_DIR.glob("*.conf")) + sorted((ROOT / "ce-config/condor").glob("*.conf"))
#: A knob setting in a file, or one commented out in the admin's form ("# KNOB = value").
SETTING = re.compile(r"^(#? ?)([A-Za-z][A-Za-z0-9_]*) = ?(.*)$", re.M)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_file_has_the_name_banner_and_comment_style_of_the_others(path: Path) -> None:
    """HTCondor-CE's naming, NN-podgahp-<area>[-defaults].conf; a boxed banner naming the area, whose
    first line says whose file it is; "# " comments, "####" boxed section titles, nothing else."""
    assert re.fullmatch(r"[0-9]{2}-podgahp(-[a-z0-9]+)*(-defaults)?\.conf", path.name)
    lines = path.read_text().splitlines()
    box = "#" * 102
    assert lines[0] == box and lines[1] == "#" and lines[2].startswith("#  podgahp: ") and len(lines[2]) == 102
    label = "ADMIN SETTINGS" if path.parent == CONFIG_DIR and not path.name.endswith("-defaults.conf") else "DO NOT EDIT"
    assert lines[2].endswith(label)
    end = lines.index(box, 1)
    for line in lines[1:end]:
        assert line == "#" or line.startswith("#  "), line
    for line in lines[end + 1:]:
        assert not line.startswith("##") or line == "#" * 36, f"{path.name}: {line!r}"
        assert not line.startswith("#") or line == "#" * 36 or line.startswith(("# ", "#  ")) or line == "#", line


def test_each_admin_file_lists_every_knob_of_its_defaults_file_commented_out_with_its_value() -> None:
    pairs = [(p, p.with_name(p.name.replace("-defaults.conf", ".conf"))) for p in CONFIG_DIR.glob("*-defaults.conf")]
    assert len(pairs) >= 5 and all(admin.exists() for _, admin in pairs)
    for defaults, admin in pairs:
        shipped = {k: v for _, k, v in SETTING.findall(defaults.read_text())
                   if not k.startswith("SCHEDD_CRON_")}  # the cron job's definition is not a setting
        listed = {k: v for mark, k, v in SETTING.findall(admin.read_text()) if mark == "# "}
        assert listed == shipped, admin.name
        assert not [k for mark, k, _ in SETTING.findall(admin.read_text()) if mark == ""], admin.name


def test_each_backend_program_knob_is_in_its_own_pair_and_no_test_knob_ships() -> None:
    """<NAME>_GAHP is set once, in NN-podgahp-<name>-defaults.conf, for each backend a CE runs (those
    with a <name>_gahp program); the site schedd of a CE routing into it reads that pair too. The
    in-memory test backend has no knob in any shipped file."""
    programs = plugins.programs()
    assert {"k8s", "lancium"} <= set(programs)
    schedd2 = (ROOT / "ce-config/condor/60-podgahp-ce-schedd2.conf").read_text()
    for name in programs:
        knob = f"{name.upper()}_GAHP"
        setters = [p.name for p in FILES for mark, k, _ in SETTING.findall(p.read_text()) if k == knob and not mark]
        (where,) = setters
        assert re.fullmatch(rf"[0-9]{{2}}-podgahp-{name}-defaults\.conf", where)
        assert f"/usr/share/condor-ce/config.d/{where}" in schedd2
        assert f"/etc/condor-ce/config.d/{where.replace('-defaults', '')}" in schedd2
    assert not [p.name for p in FILES if "PODGAHP_MEMORY_" in p.read_text()]


def test_htcondor_reads_the_shipped_files(tmp_path: Path) -> None:
    """HTCondor itself reads the whole directory, and finds each knob with the value its file sets."""
    config = tmp_path / "condor_config"
    config.write_text(f"RELEASE_DIR = /usr\nBIN = /usr/bin\nLOG = {tmp_path}\n"
                      f"LOCAL_CONFIG_DIR = {CONFIG_DIR}\n")
    shipped = {k: v for path in CONFIG_DIR.glob("*-defaults.conf") for mark, k, v in SETTING.findall(path.read_text())
               if not mark and "$(" not in v}
    probe = ("import json, sys, htcondor2; p = htcondor2.param; "
             "print(json.dumps({k: p.get(k) for k in json.loads(sys.argv[1])}))")
    names = sorted(shipped) + sorted(PROGRAM_KNOBS)
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(names)], env={"CONDOR_CONFIG": str(config)},
                         capture_output=True, text=True, check=True)
    values = json.loads(out.stdout)
    assert {knob: values.pop(knob) for knob in PROGRAM_KNOBS} == PROGRAM_KNOBS
    assert {"K8S_GAHP", "LANCIUM_GAHP"} <= set(PROGRAM_KNOBS)
    assert len(shipped) > 50 and values == {k: (v or None) for k, v in shipped.items()}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e400"])
def test_numbers_must_be_finite(value: str) -> None:
    from gahp.core.config import Knobs

    with pytest.raises(ConfigError, match=f"SOME_TIMEOUT = '{value}' is not a finite number"):
        Knobs({"SOME_TIMEOUT": value}).number("SOME_TIMEOUT", 1.0)


def test_huge_numbers_are_refused() -> None:
    from gahp.core.config import Knobs

    with pytest.raises(ConfigError, match="above the maximum"):
        Knobs({"N": "1e300"}).number("N", 1.0)
    with pytest.raises(ConfigError, match="above the maximum"):
        Knobs({"N": str(10 ** 30)}).integer("N", 1)


def test_log_defaults_to_user_log_on_a_ce() -> None:
    from gahp.core.config import user_name

    on_ce = ServerSettings.from_knobs(Knobs({"LOG": "/var/log/condor-ce", "USER_LOG": "/var/log/condor-ce/user"}),
                                      "k8s")
    assert on_ce.log_file == f"/var/log/condor-ce/user/PodgahpLog.k8s.{user_name()}"
    plain = ServerSettings.from_knobs(Knobs({"LOG": "/var/log/condor"}), "k8s")
    assert plain.log_file == f"/var/log/condor/PodgahpLog.k8s.{user_name()}"


@pytest.mark.parametrize("explicit, environ, files, path, why", [
    ("/x/condor_config", {"CONDOR_CONFIG": "/y"}, {"/etc/condor-ce/condor_config"}, "/x/condor_config",
     "--condor-config"),
    (None, {"CONDOR_CONFIG": "/y"}, {"/etc/condor-ce/condor_config"}, "/y", "CONDOR_CONFIG in the environment"),
    (None, {"PODGAHP_CE_CONDOR_CONFIG": "/pool/condor_config"}, {"/etc/condor-ce/condor_config"},
     "/pool/condor_config", "the HTCondor-CE's, from PODGAHP_CE_CONDOR_CONFIG"),
    (None, {}, {"/etc/condor-ce/condor_config", "/etc/condor/condor_config"}, "/etc/condor-ce/condor_config",
     "the HTCondor-CE's, as condor_ce_* tools read it"),
    (None, {}, {"/etc/condor/condor_config"}, "/etc/condor/condor_config", "HTCondor's default"),
    (None, {}, set(), None, "CONDOR_CONFIG is not set and none of /etc/condor-ce/condor_config"),
], ids=["option", "environment", "ce-variable", "ce-installed", "htcondor-default", "none"])
def test_ce_tools_find_the_configuration_as_condor_ce_tools_do(explicit: str, environ: Dict[str, str],
                                                                files: Set[str], path: str, why: str) -> None:
    from gahp.core.config import find_config

    source = find_config(explicit, environ, files.__contains__)
    assert source.path == path and source.why.startswith(why), source
    assert (path or "no HTCondor configuration") in source.describe()


def test_a_gahp_without_any_configuration_says_how_to_give_one() -> None:
    from gahp.core.config import gahp_config

    assert gahp_config({"CONDOR_CONFIG": "ONLY_ENV"}, lambda p: False) is None
    assert gahp_config({}, {"/etc/condor/condor_config"}.__contains__) is None
    problem = gahp_config({}, {"/etc/condor-ce/condor_config"}.__contains__)
    assert problem and "CONDOR_CONFIG is not set" in problem and "CONDOR_CONFIG=/etc/condor-ce/condor_config" in problem
