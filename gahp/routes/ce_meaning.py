"""What an old-syntax route needs, once converted, to mean under HTCondor-CE's transforms what it
meant under HTCondor-CE 23.0.

HTCondor-CE 23.0 merged its own route defaults into every old-syntax route, the route's attributes
winning over the defaults of the same name: a route's ``eval_set_BatchRuntime`` replaced the CE's
wall-time rule, its ``set_RequestMemory`` the CE's memory rule, its ``copy_environment`` the CE's
copy of the pilot's environment. Today's CE applies its rules as transforms *after* the route
(``JOB_ROUTER_POST_ROUTE_TRANSFORM_NAMES``), from the job's ``xcount``, ``maxMemory``,
``maxWallTime``, ``orig_BatchRuntime`` and ``orig_environment``, and copies the pilot's environment
and ``BatchRuntime`` *before* it: a converted route that only says what the old one said is
overruled. :func:`ce_statements` gives the statements that make those transforms reach the old
route's result (and the notes that say why); what no statement can express is left to the proof,
which marks the route ``CHECK``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import classad2

#: The pilot's attributes HTCondor-CE copies before the route (its OrigRequests transform), and
#: where to; under HTCondor-CE 23.0 a route's own ``copy_<attribute>`` replaced the copy.
CE_COPIES: Tuple[Tuple[str, str], ...] = (
    ("environment", "orig_environment"), ("BatchRuntime", "orig_BatchRuntime"), ("WantWholeNode", "WholeNodes"))


@dataclass(frozen=True)
class CeStatements:
    """Statements to add after a converted route's own, and why."""

    statements: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()


def _keys(route: classad2.ClassAd) -> Dict[str, str]:
    return {key.lower(): key for key in route.keys()}


def _cpus_read(route: classad2.ClassAd, keys: Dict[str, str]) -> bool:
    """Whether the destination reads the routed job's RequestCpus: an HTCondor pool does
    (``TargetUniverse = 5``); a batch system only when ``default_CERequirements`` names it (else it
    reads ``remote_SMPGranularity``, which the old route and the CE's transforms set alike)."""
    universe = keys.get("targetuniverse")
    if universe is not None and route.eval(universe) == 5:
        return True
    for key in ("set_default_cerequirements", "default_cerequirements", "eval_set_default_cerequirements"):
        if key in keys:
            value = route.eval(keys[key])
            if not isinstance(value, str):
                return True  # not known here: keep RequestCpus as the route set it
            return "requestcpus" in [n.strip().lower() for n in value.replace(" ", ",").split(",")]
    return False


def ce_statements(route: classad2.ClassAd, name: str) -> CeStatements:
    """What ``route`` (an old route ad, merged with the file's JOB_ROUTER_DEFAULTS) needs added."""
    keys = _keys(route)
    statements: List[str] = []
    notes: List[str] = []

    def own(attribute: str) -> List[str]:
        return [prefix for prefix in ("set_", "eval_set_") if prefix + attribute.lower() in keys]

    if own("RequestMemory"):
        statements.append("EVALSET maxMemory RequestMemory")
        notes.append(f"route {name}: its own RequestMemory is also written as maxMemory, which HTCondor-CE's Memory "
                     "transform reads after the route (it would otherwise replace RequestMemory with the pilot's "
                     "maxMemory or default_maxMemory, 2000)")
    if own("RequestCpus") and _cpus_read(route, keys):
        statements.append("EVALSET xcount RequestCpus")
        notes.append(f"route {name}: its own RequestCpus is also written as xcount, which HTCondor-CE's Cpus "
                     "transform reads after the route (it would otherwise replace RequestCpus with the pilot's xcount "
                     "or default_xcount)")
    runtime = own("BatchRuntime")
    if "eval_set_" in runtime:
        statements += ["COPY BatchRuntime orig_BatchRuntime", "RENAME maxWallTime orig_maxWallTime"]
        notes.append(f"route {name}: its own BatchRuntime is kept as HTCondor-CE 23.0 kept it (its eval_set_ replaced "
                     "the CE's wall-time rule): copied to orig_BatchRuntime and the pilot's maxWallTime renamed "
                     "orig_maxWallTime, so that the CE's BatchRuntime transform leaves it")
    elif runtime:
        statements.append("COPY orig_BatchRuntime BatchRuntime")
        notes.append(f"route {name}: set_BatchRuntime gave way, under HTCondor-CE 23.0, to the pilot's own BatchRuntime "
                     "(the CE's wall-time rule came after it): the pilot's is put back, as the CE's transform would "
                     "otherwise keep the route's")
    if own("BatchQueue") and not own("remote_queue"):
        statements.append('EVALSET remote_queue batch_queue ?: (queue ?: "$(default_queue)")')
        notes.append(f"route {name}: its own BatchQueue did not reach the batch system under HTCondor-CE 23.0, whose "
                     "remote_queue (the pilot's batch_queue, else its queue, else default_queue, else none) came "
                     "after it and is what the gridmanager sends: kept so (remove the EVALSET remote_queue line to "
                     "send the route's BatchQueue instead)")
    for attribute, target in CE_COPIES:
        key = keys.get("copy_" + attribute.lower())
        if key is None:
            continue
        value = route.eval(key)
        if isinstance(value, str) and value.lower() == target.lower():
            continue
        statements.append(f"DELETE {target}")
        notes.append(f"route {name}: copy_{attribute} replaced HTCondor-CE 23.0's own copy to {target}, which today's "
                     f"CE makes before the route: deleted again (else, e.g., the pilot's environment comes back)")
    return CeStatements(tuple(statements), tuple(notes))
