"""What the schedd knows: the grid job ids of the jobs that exist, read with the htcondor bindings.

``podgahp reap`` runs on the CE (as a schedd cron job) and asks the schedd holding the routed jobs,
by default the local one, or ``JOB_ROUTER_SCHEDD2_NAME`` where the JobRouter routes into a second
schedd (``PODGAHP_REAP_SCHEDD_NAME`` / ``PODGAHP_REAP_SCHEDD_POOL`` override).
"""

from __future__ import annotations

from typing import Optional, Set

from gahp.errors import GahpError


class ScheddUnavailable(GahpError):
    """The schedd could not be asked; nothing may be deleted on a guess."""


def grid_job_ids(grid_type: str, name: Optional[str] = None, pool: Optional[str] = None) -> Set[str]:
    """The GAHP job ids (last word of ``GridJobId``) of every job in the queue whose GridResource is
    ``batch <grid_type>``."""
    import htcondor2

    try:
        if name:
            collector = htcondor2.Collector(pool) if pool else htcondor2.Collector()
            schedd = htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, name))
        else:
            schedd = htcondor2.Schedd()
        ads = schedd.query(constraint=f'GridResource =?= "batch {grid_type}" && GridJobId isnt undefined',
                           projection=["GridJobId"])
    except Exception as e:  # noqa: BLE001 - the bindings raise several kinds; any means "unknown"
        where = f"schedd {name}" + (f" in pool {pool}" if pool else "") if name else "the local schedd"
        raise ScheddUnavailable(f"{where} cannot be queried: {e}") from e
    ids = set()
    for ad in ads:
        words = str(ad.get("GridJobId", "")).split()
        if words:
            ids.add(words[-1])
    return ids
