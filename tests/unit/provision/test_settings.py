"""The packaged defaults file and the code agree on every knob of the decision."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from gahp.core.config import Knobs
from gahp.provision.settings import DEFAULTS, ProvisionSettings

ROOT = Path(__file__).resolve().parents[3]


def test_the_defaults_file_holds_the_codes_defaults(tmp_path: Path) -> None:
    config = tmp_path / "condor_config"
    config.write_text(f"include : {ROOT}/condor_config.d/40-podgahp-provision-defaults.conf\n")
    probe = ("import dataclasses, json\nfrom gahp.core.config import Knobs\n"
             "from gahp.provision.settings import ProvisionSettings\n"
             "s = ProvisionSettings.from_knobs(Knobs())\n"
             "print(json.dumps({**dataclasses.asdict(s.policy), 'idle_minutes': s.pilot_idle_minutes}))")
    out = subprocess.run([sys.executable, "-c", probe], env={"CONDOR_CONFIG": str(config)}, capture_output=True,
                         text=True, timeout=60, check=True)
    coded = ProvisionSettings.from_knobs(Knobs({}))
    assert json.loads(out.stdout) == {**dataclasses.asdict(coded.policy), "idle_minutes": coded.pilot_idle_minutes}
    # the admin file lists each, commented out, with the same value
    admin = (ROOT / "condor_config.d/40-podgahp-provision.conf").read_text()
    for knob, value in DEFAULTS.items():
        assert f"# PODGAHP_PROVISION_{knob} = {value}\n" in admin, knob
