"""What a pilot becomes on Lancium (shape, run time, inputs, notes) and the Lancium knobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

from gahp.backends.lancium.backend import LanciumBackend
from gahp.backends.lancium.identity import key_of_name, new_name, parse_job_id, sandbox_key
from gahp.backends.lancium.settings import LanciumSettings, SpecDefaults
from gahp.backends.lancium.spec import (
    LAUNCHER,
    input_files,
    job_fields,
    lancium_shape,
    launcher,
    notes_text,
    run_time,
)
from gahp.core.config import Knobs
from gahp.core.errors import ConfigError, InvalidJob
from gahp.core.job import PilotJob
from paths import REPO

ROOT = REPO
DEFAULTS = ROOT / "condor_config.d" / "30-podgahp-lancium-defaults.conf"
ADMIN = ROOT / "condor_config.d" / "30-podgahp-lancium.conf"


@pytest.mark.parametrize(
    "cpus, memory_mb, shape",
    [
        (1, None, (2, 4)),
        (1, 1, (2, 4)),
        (2, 4096, (2, 4)),
        (3, None, (4, 8)),
        (1, 5000, (4, 8)),  # 5 GB -> 3 cores -> 4 (even)
        (2, 4097, (4, 8)),
        (8, 16000, (8, 16)),
        (8, 2000, (8, 16)),  # memory follows the cores
        (1, 64 * 1024, (32, 64)),
        (64, None, (64, 128)),
        (63, 128 * 1024, (64, 128)),
    ],
    ids=["one-core", "tiny-memory", "exact", "odd-cores", "memory-bound", "one-mib-over", "8c-16g",
         "cores-bound", "64g", "largest", "largest-by-both"],
)
def test_cpu_memory_rounding(cpus: int, memory_mb: Optional[int], shape: Tuple[int, int]) -> None:
    assert lancium_shape(cpus, memory_mb) == shape


@pytest.mark.parametrize("cpus, memory_mb", [(65, None), (72, None), (1, 129 * 1024)],
                         ids=["65-cores", "72-cores", "129g"])
def test_shapes_beyond_128_gb_are_refused(cpus: int, memory_mb: Optional[int]) -> None:
    with pytest.raises(InvalidJob, match="exceeds the limit of 128 GB"):
        lancium_shape(cpus, memory_mb)


@pytest.mark.parametrize("wall, expected", [(None, 259200), (1, 600), (3600, 3600), (10**9, 2592000)],
                         ids=["default", "below-minimum", "as-is", "above-maximum"])
def test_run_time(wall: Optional[int], expected: int) -> None:
    assert run_time(wall, 259200) == expected


def test_names_bind_ce_user_and_sandbox() -> None:
    key = sandbox_key("ce.example.org", "alice", "ce_1.0_17")
    name = new_name(key)
    assert key_of_name(name) == key and name != new_name(key)  # a fresh nonce for each submit
    assert len({key, sandbox_key("ce.example.org", "mallory", "ce_1.0_17"), sandbox_key("ce2", "alice", "ce_1.0_17"),
                sandbox_key("ce.example.org", "alice", "ce_1.0_18")}) == 4
    # Another user claiming the sandbox, or a sandbox id that shifts the separators, gets another key.
    assert sandbox_key("ce", "a", "b-c") != sandbox_key("ce", "a-b", "c")
    for foreign in (None, "", "podgahp:ce_1.0_17", f"podgahp-{key}", f"podgahp-{key}-x", f"podgahp-{key.upper()}-0123456789ab"):
        assert key_of_name(foreign) is None


def test_notes_name_the_pilot_but_not_where_its_outputs_go(tmp_path: Path) -> None:
    pilot = _pilot(tmp_path, stdout=str(tmp_path / "p.out"))
    text = notes_text(pilot, "ce", "alice")
    assert '"sandbox":"sb"' in text and '"user":"alice"' in text and str(tmp_path) not in text


def test_launcher_quotes_everything() -> None:
    script = launcher("pilot it.sh", ("a", "b c", "it's", "$HOME"), "in put", "x509 up").decode()
    assert script.startswith("#!/bin/sh\n")
    assert "exec './pilot it.sh' a 'b c' 'it'\"'\"'s' '$HOME' < 'in put'" in script
    assert "X509_USER_PROXY=\"$PWD\"/'x509 up'; export X509_USER_PROXY" in script


def _pilot(tmp_path: Path, **fields: object) -> PilotJob:
    exe = tmp_path / "pilot.sh"
    exe.write_text("echo\n")
    values: Dict[str, object] = dict(executable=str(exe), iwd=str(tmp_path), sandbox_id="sb")
    values.update(fields)
    return PilotJob(**values)  # type: ignore[arg-type]


def test_inputs_urls_and_stdin(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("IN")
    pilot = _pilot(tmp_path, stdin=str(tmp_path / "in.txt"),
                   transfer_input=("https://example.org/files/token?x=1",))
    files = {f.name: f for f in input_files(pilot, 1000)}
    assert set(files) == {LAUNCHER, "pilot.sh", "in.txt", "token"}
    assert files["token"].url == "https://example.org/files/token?x=1" and files["token"].content is None
    assert b"< in.txt" in (files[LAUNCHER].content or b"")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: {"transfer_input": (str(p / "sub" / "pilot.sh"),)}, "would both be named 'pilot.sh'"),
        (lambda p: {"transfer_input": (str(p / LAUNCHER),)}, "podgahp launcher"),
        (lambda p: {"transfer_input": (str(p / "sub"),)}, "is a directory"),
        (lambda p: {"transfer_input": (str(p / "big"),)}, "allowed (PODGAHP_LANCIUM_MAX_INPUT_BYTES)"),
    ],
    ids=["duplicate-name", "launcher-name", "directory", "too-big"],
)
def test_bad_inputs_are_refused(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pilot.sh").write_text("x")
    (tmp_path / LAUNCHER).write_text("x")
    (tmp_path / "big").write_bytes(b"x" * 2000)
    with pytest.raises(InvalidJob, match=re.escape(message)):
        input_files(_pilot(tmp_path, **make(tmp_path)), 1000)


def test_job_fields_defaults(tmp_path: Path) -> None:
    defaults = SpecDefaults(image="img", qos="medium", max_run_time_s=7200, gpu_type="v100", account="acct")
    fields = job_fields(_pilot(tmp_path, gpus=1, environment=(("A", "1"),)), defaults, "podgahp-n", "notes")
    assert fields["image"] == "img" and fields["qos"] == "medium" and fields["max_run_time"] == 7200
    assert fields["resources"] == {"core_count": 2, "memory": 4, "gpu_count": 1, "gpu": "v100"}
    assert fields["environment"] == [{"variable": "A", "value": "1"}]
    assert fields["account"] == "acct"
    assert (fields["name"], fields["notes"]) == ("podgahp-n", "notes")


def test_route_setting_of_the_wrong_type(tmp_path: Path) -> None:
    defaults = SpecDefaults(image="img", qos="high", max_run_time_s=7200, gpu_type=None, account=None)
    with pytest.raises(InvalidJob, match="route setting lancium_image = 3 is not a non-empty string"):
        job_fields(_pilot(tmp_path, settings={"lancium_image": 3}), defaults, "podgahp-n", "notes")


# --------------------------------------------------------------------------------------------
# Knobs


def _conf_values(path: Path, commented: bool) -> Dict[str, str]:
    pattern = r"^# (PODGAHP_LANCIUM_[A-Z0-9_]+) =(.*)$" if commented else r"^(PODGAHP_LANCIUM_[A-Z0-9_]+) =(.*)$"
    values: Dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(pattern, line)
        if match:
            values[match.group(1)] = match.group(2).strip()
    return values


def test_defaults_file_matches_the_code() -> None:
    shipped = _conf_values(DEFAULTS, commented=False)
    assert LanciumSettings.from_knobs(Knobs(shipped)) == LanciumSettings.from_knobs(Knobs({}))
    assert _conf_values(ADMIN, commented=True) == shipped
    code = (ROOT / "gahp" / "backends" / "lancium" / "settings.py").read_text()
    read = set(re.findall(r"\"(PODGAHP_LANCIUM_[A-Z0-9_]+)\"", code))
    assert read == set(shipped)


def test_default_settings() -> None:
    settings = LanciumSettings.from_knobs(Knobs({}))
    assert settings.client.base_url == "https://portal.lancium.com/api/v1"
    assert settings.client.api_key_file.endswith("/.lancium/api_key") and "~" not in settings.client.api_key_file
    assert (settings.spec.image, settings.spec.qos, settings.spec.max_run_time_s) == ("lancium/ubuntu", "high",
                                                                                        259200)
    assert settings.client.verify is True


@pytest.mark.parametrize(
    "knob, value, message",
    [
        ("PODGAHP_LANCIUM_BASE_URL", "portal.lancium.com", "is not an http:// or https:// URL"),
        ("PODGAHP_LANCIUM_QOS", "fast", "PODGAHP_LANCIUM_QOS = 'fast' is not one of high, medium"),
        ("PODGAHP_LANCIUM_REQUEST_TIMEOUT_SECONDS", "soon", "= 'soon' is not a finite number"),
        ("PODGAHP_LANCIUM_RETRIES", "-1", "PODGAHP_LANCIUM_RETRIES = -1 is below the minimum of 0"),
        ("PODGAHP_LANCIUM_MAX_RUN_TIME_SECONDS", "60", "is below the minimum of 600"),
        ("PODGAHP_LANCIUM_CA_FILE", "/nonexistent/ca.pem", "is not a readable file"),
        ("PODGAHP_LANCIUM_IMAGE", "a b", "no blanks allowed"),
        ("PODGAHP_LANCIUM_LIST_STALE_SECONDS", "1", "below the minimum of 30"),
    ],
    ids=["url", "qos", "timeout", "retries", "run-time", "ca-file", "image", "stale-below-max-age"],
)
def test_bad_knobs_name_knob_value_and_form(knob: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        LanciumBackend.from_knobs(Knobs({knob: value}))
    assert knob in str(info.value)


def test_job_ids() -> None:
    assert parse_job_id("lancium/1234") == 1234
