"""What the schedd knows, read with the htcondor bindings: the grid job ids of the jobs that exist
(for ``podgahp reap``) and the routing attributes of one job (for :mod:`gahp.provenance`).

``podgahp reap`` runs on the CE (as a schedd cron job) and asks the schedd holding the routed jobs,
by default the local one, or ``JOB_ROUTER_SCHEDD2_NAME`` where the JobRouter routes into a second
schedd (``PODGAHP_REAP_SCHEDD_NAME`` / ``PODGAHP_REAP_SCHEDD_POOL`` override).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from gahp.errors import GahpError


#: Which knobs choose the schedd podgahp reap, q and trace read, for their errors.
SCHEDD_KNOBS = ("(the schedd holding the routed jobs is PODGAHP_REAP_SCHEDD_NAME / PODGAHP_REAP_SCHEDD_POOL, "
                "default JOB_ROUTER_SCHEDD2_NAME / _POOL, else the local schedd of that configuration)")


class ScheddUnavailable(GahpError):
    """The schedd could not be asked; nothing may be deleted on a guess."""


def query(constraint: str, projection: List[str], name: Optional[str] = None,
          pool: Optional[str] = None) -> List[Dict[str, object]]:
    """Job ads of the local schedd (or schedd ``name`` of ``pool``) matching ``constraint``, as dicts."""
    try:
        ads = locate(name, pool).query(constraint=constraint, projection=projection)
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        raise ScheddUnavailable(f"{describe(name, pool)} cannot be queried: {e}") from e
    return [{key: ad.get(key) for key in projection} for ad in ads]


def locate(name: Optional[str] = None, pool: Optional[str] = None) -> Any:
    """The local schedd, or schedd ``name`` as ``pool``'s collector (default the local one) knows it;
    raises what the bindings raise."""
    import htcondor2

    if not name:
        return htcondor2.Schedd()
    collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
    return htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, name))


def describe(name: Optional[str], pool: Optional[str]) -> str:
    if not name:
        return "the local schedd"
    return f"schedd {name}" + (f" in pool {pool}" if pool else "")


def grid_job_ids(grid_type: str, name: Optional[str] = None, pool: Optional[str] = None) -> Set[str]:
    """The GAHP job ids (last word of ``GridJobId``) of every job in the queue whose GridResource is
    ``batch <grid_type>``."""
    ads = query(f'GridResource =?= "batch {grid_type}" && GridJobId isnt undefined', ["GridJobId"], name, pool)
    ids = set()
    for ad in ads:
        words = str(ad.get("GridJobId") or "").split()
        if words:
            ids.add(words[-1])
    return ids
