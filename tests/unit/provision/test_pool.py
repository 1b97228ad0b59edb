"""The pilots' slots as the user pool shows them: what a startd ad says of a pilot, and what an ad
that is not a pilot's, or is malformed, says (nothing)."""

from __future__ import annotations

from typing import Dict, Optional

import classad2
import pytest

from gahp.core.config import Knobs
from gahp.provision.plan import Slot
from gahp.provision.pool import slot_constraint, slot_of
from gahp.provision.settings import ProvisionSettings

NOW = 10_000.0
BASE: Dict[str, object] = {"PodgahpProvisioner": "prov-1", "PodgahpGroup": "1c/2048MiB", "PodgahpPilotId": "12.3",
                           "State": "Unclaimed", "SlotType": "Static", "EnteredCurrentState": NOW - 100,
                           "DaemonStartTime": NOW - 110, "MyCurrentTime": NOW, "LastHeardFrom": NOW}


@pytest.mark.parametrize("changes, slot", [
    ({}, Slot("12.3", "1c/2048MiB", False, 100.0)),
    ({"State": "Claimed"}, Slot("12.3", "1c/2048MiB", True, 0.0)),
    ({"DaemonStartTime": NOW - 3000}, Slot("12.3", "1c/2048MiB", False, 100.0, served=True)),
    # its clock is an hour off: ages come from its own clock, plus the time since the collector heard it
    ({"EnteredCurrentState": NOW + 3600 - 100, "DaemonStartTime": NOW + 3600 - 110, "MyCurrentTime": NOW + 3600 - 30,
      "LastHeardFrom": NOW - 30}, Slot("12.3", "1c/2048MiB", False, 100.0)),
    ({"MyCurrentTime": None, "LastHeardFrom": None}, Slot("12.3", "1c/2048MiB", False, 100.0)),
    ({"SlotType": "Partitionable", "Cpus": 8, "TotalSlotCpus": 8}, Slot("12.3", "1c/2048MiB", False, 100.0)),
    ({"SlotType": "Partitionable", "Cpus": 6, "TotalSlotCpus": 8}, Slot("12.3", "1c/2048MiB", True, 0.0)),
    ({"PodgahpPilotId": None}, None),
    ({"PodgahpPilotId": 12}, None),
    ({"PodgahpGroup": "x" * 2000}, None),
    ({"State": None}, None),
    ({"EnteredCurrentState": "soon"}, Slot("12.3", "1c/2048MiB", False, 0.0)),
    ({"EnteredCurrentState": float("nan")}, Slot("12.3", "1c/2048MiB", False, 0.0)),
], ids=lambda v: str(v))
def test_slot_of(changes: Dict[str, object], slot: Optional[Slot]) -> None:
    ad = {k: v for k, v in {**BASE, **changes}.items() if v is not None}
    assert slot_of(ad, NOW) == slot
    if all(not isinstance(v, float) or v == v for v in ad.values()):  # the same from a real ClassAd
        assert slot_of(classad2.ClassAd(ad), NOW) == slot


def test_only_slots_carrying_the_provisioners_name_are_asked_for() -> None:
    settings = ProvisionSettings.from_knobs(Knobs({"PODGAHP_PROVISION_NAME": "prov-1"}))
    expression = classad2.ExprTree(slot_constraint(settings))
    assert expression.eval(classad2.ClassAd({k: v for k, v in BASE.items()})) is True
    for other in ({"PodgahpProvisioner": "prov-2"}, {"PodgahpPilotId": None}):
        ad = {k: v for k, v in {**BASE, **other}.items() if v is not None}
        assert expression.eval(classad2.ClassAd(ad)) is False
