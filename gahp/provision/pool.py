"""Supply: this provisioner's pilots as the user pool's collector shows them, one :class:`Slot` per
startd slot that carries this provisioner's name (``PodgahpProvisioner``), its group
(``PodgahpGroup``) and its job id at the CE (``PodgahpPilotId``), as the shipped pilot script
advertises them.

Whoever may advertise startds to the pool can write these ads: :mod:`gahp.provision.plan` counts an
ad only for a pilot of the group it names that runs at the CE, one per pilot, so a forged ad can at
most make a running pilot look idle (fewer new pilots); it never makes the provisioner remove one.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, List, Optional

from gahp.core.errors import GahpError
from gahp.provision.pilots import classad_literal
from gahp.provision.plan import Slot
from gahp.provision.settings import ProvisionSettings

log = logging.getLogger(__name__)

#: What is read of each slot.
PROJECTION = ["Name", "PodgahpProvisioner", "PodgahpGroup", "PodgahpPilotId", "State", "SlotType", "Cpus",
              "TotalSlotCpus", "EnteredCurrentState", "DaemonStartTime", "MyCurrentTime", "LastHeardFrom"]
#: A slot that left Unclaimed this long after its startd started has been claimed before.
FIRST_STATE_S = 60
#: Most slots read per cycle (bounds memory against a collector full of ads claiming this name).
MAX_SLOTS = 100_000


class SupplyUnknown(GahpError):
    """The pool's collector could not be asked for the pilots' slots: nothing may be submitted on a guess."""


def slot_constraint(settings: ProvisionSettings) -> str:
    return f"PodgahpProvisioner =?= {classad_literal(settings.name)} && PodgahpPilotId =!= undefined"


def _number(ad: Any, name: str) -> Optional[float]:
    value = ad.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def slot_of(ad: Any, now: float) -> Optional[Slot]:
    """A slot from a startd ad (as a mapping); None when it is not one of the pilots' slots as the pilot
    script advertises them."""
    pilot_id, group, state = ad.get("PodgahpPilotId"), ad.get("PodgahpGroup"), ad.get("State")
    if not all(isinstance(v, str) and 0 < len(v) <= 1024 for v in (pilot_id, group, state)):
        return None
    entered = _number(ad, "EnteredCurrentState")
    # ages on the startd's clock (its MyCurrentTime at the last update) plus the time since the
    # collector heard it: a startd whose clock is off does not age its slots
    own_now, heard = _number(ad, "MyCurrentTime"), _number(ad, "LastHeardFrom")
    if entered is None:
        idle_s = 0.0
    elif own_now is not None:
        idle_s = max(0.0, own_now - entered) + (max(0.0, now - heard) if heard is not None else 0.0)
    else:
        idle_s = max(0.0, now - entered)
    if ad.get("SlotType") == "Partitionable":
        cpus, total = _number(ad, "Cpus"), _number(ad, "TotalSlotCpus")
        claimed = cpus is not None and total is not None and cpus < total
        served = False
    else:
        claimed = state != "Unclaimed"
        started = _number(ad, "DaemonStartTime")
        served = not claimed and entered is not None and started is not None and entered - started > FIRST_STATE_S
    return Slot(pilot_id=str(pilot_id), group=str(group), claimed=claimed, idle_s=0.0 if claimed else idle_s,
                served=served)


def read_slots(settings: ProvisionSettings, clock: Callable[[], float] = time.time) -> List[Slot]:
    """This provisioner's pilots' slots in the user pool; SupplyUnknown when the collector fails."""
    import htcondor2

    try:
        collector = htcondor2.Collector(settings.pool) if settings.pool else htcondor2.Collector()
        ads = collector.query(htcondor2.AdType.Startd, constraint=slot_constraint(settings), projection=PROJECTION)
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds
        raise SupplyUnknown(f"the collector of {settings.pool or 'the local pool'} cannot be asked for the "
                            f"pilots' slots: {e}") from e
    now = clock()
    slots = []
    for ad in ads[:MAX_SLOTS]:
        slot = slot_of(ad, now)
        if slot is not None:
            slots.append(slot)
    if len(ads) > MAX_SLOTS:
        log.warning("the pool shows %d slots named for this provisioner; %d read", len(ads), MAX_SLOTS)
    return slots
