"""This provisioner's pilots at the CE: read, submitted and removed through the CE's schedd with the
htcondor bindings, as a factory's pilots are (the local schedd where the provisioner runs on the
CE, or ``PODGAHP_PROVISION_CE_SCHEDD`` of ``PODGAHP_PROVISION_CE_POOL``).

A pilot carries its group's shape the way the CE's routes read it (``xcount``, ``maxMemory``,
``RequestCpus``/``RequestMemory``/``RequestGPUs``/``RequestDisk``, ``maxWallTime``, ``queue``), and
its environment tells the pilot which pool to join and which jobs to start (the OSG backfill
image's variables: ``CONDOR_HOST``, ``NUM_CPUS``, ``MEMORY``, ``NUM_GPUS``, ``ACCEPT_IDLE_MINUTES``,
``ACCEPT_JOBS_FOR_HOURS``; and ``PODGAHP_PILOT_GROUP``, ``PODGAHP_PILOT_START``,
``PODGAHP_PILOT_PROVISIONER``, ``PODGAHP_PILOT_ID``, which its startd advertises so that the
provisioner finds it in the pool).
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gahp.core.errors import GahpError
from gahp.provision.plan import Ending, Pilot
from gahp.provision.settings import ProvisionSettings
from gahp.provision.shape import Group, Scalar

log = logging.getLogger(__name__)

IDLE = 1
HELD = 5


#: The pilot's job id at the CE, in its environment: the submit description's only macro.
PILOT_ID = "PODGAHP_PILOT_ID='$(ClusterId).$(ProcId)'"


class CeUnavailable(GahpError):
    """The CE's schedd could not be asked or refused the request."""


def classad_literal(value: Optional[Scalar]) -> str:
    """A value as a ClassAd literal holding no ``$``: written as ``\\044`` in strings, so that no macro
    language it passes through (the submit description, a startd's configuration) expands it."""
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\044") + '"'


def submit_text(value: str) -> str:
    """A value of a submit command taken as it is: ``$`` is written ``$(DOLLAR)``."""
    return value.replace("$", "$(DOLLAR)")


def start_expression(group: Group, settings: ProvisionSettings) -> str:
    """What a pilot of ``group`` starts: the jobs the filter lets through with its group's GROUP_BY
    values that fit in it (a shaped pilot: requests at most its shape, so that a job whose requests
    were rounded up to it runs there; a partitionable one: its slot splits)."""
    clauses = [f"({settings.job_filter})"]
    shape = group.shape
    if settings.kind == "shaped":
        clauses += [f"TARGET.RequestCpus <= {shape.cpus}", f"TARGET.RequestMemory <= {shape.memory_mb}",
                    f"(TARGET.RequestGPUs ?: 0) <= {shape.gpus}"]
        if shape.disk_kb:
            clauses.append(f"TARGET.RequestDisk <= {shape.disk_kb}")
    for name, value in group.extra:
        clauses.append(f"TARGET.{name} =?= {classad_literal(value)}")
    return " && ".join(clauses)


def environment_string(pairs: Sequence[Tuple[str, str]]) -> str:
    """HTCondor's submit ``environment`` syntax: values in single quotes, quotes doubled, ``$`` as
    ``$(DOLLAR)`` (the value is not a macro)."""
    quoted = (name + "='" + submit_text(value.replace("'", "''").replace('"', '""')) + "'" for name, value in pairs)
    return '"' + " ".join(quoted) + '"'


def pilot_environment(group: Group, settings: ProvisionSettings) -> List[Tuple[str, str]]:
    shape = group.shape
    pairs = [("CONDOR_HOST", settings.pool or ""), ("NUM_CPUS", str(shape.cpus)),
             ("MEMORY", str(shape.memory_mb)), ("NUM_GPUS", str(shape.gpus)),
             ("DISK", str(shape.disk_kb)),
             ("ACCEPT_IDLE_MINUTES", str(settings.pilot_idle_minutes)),
             ("ACCEPT_JOBS_FOR_HOURS", str(max(1, settings.pilot_wall_minutes // 60))),
             ("PODGAHP_PILOT_KIND", settings.kind), ("PODGAHP_PILOT_GROUP", str(group)),
             ("PODGAHP_PILOT_PROVISIONER", settings.name),
             ("PODGAHP_PILOT_START", start_expression(group, settings))]
    if settings.pilot_token_file:
        pairs.append(("PODGAHP_PILOT_TOKEN_FILE", os.path.basename(settings.pilot_token_file)))
    for item in settings.pilot_environment.split():
        name, _, value = item.partition("=")
        pairs.append((name, value))
    return pairs


def provisioner_key(settings: ProvisionSettings) -> str:
    """16 hex digits naming this provisioner at its CE (its name, the CE's schedd and pool): its files
    in the shared directory carry it, so provisioners of one user for other CEs never write the same."""
    key = "\n".join((settings.name, settings.ce_schedd or "", settings.ce_pool or "")).encode()
    return hashlib.sha256(key).hexdigest()[:16]


def submit_description(group: Group, settings: ProvisionSettings, directory: str) -> Dict[str, str]:
    shape = group.shape
    # job ids repeat from one CE's schedd to another's: the provisioner's key keeps the names apart
    name = f"pilot-{provisioner_key(settings)[:8]}-$(ClusterId).$(ProcId)"
    description = {
        "universe": "vanilla",
        "executable": submit_text(settings.pilot_executable),
        "initialdir": submit_text(directory),
        "output": f"{name}.out",
        "error": f"{name}.err",
        "request_cpus": str(shape.cpus),
        "request_memory": str(shape.memory_mb),
        "+xcount": str(shape.cpus),
        "+maxMemory": str(shape.memory_mb),
        "+maxWallTime": str(settings.pilot_wall_minutes),
        "+PodgahpProvisioner": classad_literal(settings.name),
        "+PodgahpGroup": classad_literal(str(group)),
        # the pilot's own job id, for its startd to advertise (PodgahpPilotId): the one macro
        "environment": environment_string(pilot_environment(group, settings))[:-1] + " " + PILOT_ID + '"',
    }
    if shape.gpus:
        description["request_gpus"] = str(shape.gpus)
    if shape.disk_kb:
        description["request_disk"] = str(shape.disk_kb)
    if settings.pilot_queue:
        description["+queue"] = classad_literal(settings.pilot_queue)
    if settings.pilot_token_file:
        description["transfer_input_files"] = submit_text(settings.pilot_token_file)
    return description


COMPLETED = 4
#: Most pilots whose ending one cycle asks the CE's history for (the others count as not known).
MAX_ENDINGS = 500


def _own_constraint(settings: ProvisionSettings) -> str:
    return (f"PodgahpProvisioner =?= {classad_literal(settings.name)} && Owner =?= {classad_literal(settings.ce_owner)}"
            " && RoutedFromJobId =?= undefined")


def pilots_constraint(settings: ProvisionSettings) -> str:
    """This provisioner's pilots at the CE that are not done: its name, its owner (a job of another
    user that claims the name is not one), not the JobRouter's copies (they carry the same attributes)."""
    return _own_constraint(settings) + " && (JobStatus == 1 || JobStatus == 2 || JobStatus == 5)"


def endings_constraint(settings: ProvisionSettings, job_ids: Sequence[str]) -> Optional[str]:
    """This provisioner's pilots among ``job_ids`` (the first :data:`MAX_ENDINGS` of the form
    ``<cluster>.<proc>``; the others are left out); None when there is none."""
    wanted = []
    for job_id in job_ids:
        cluster, _, proc = job_id.partition(".")
        if cluster.isdigit() and proc.isdigit() and len(job_id) <= 24:
            wanted.append(f'"{int(cluster)}.{int(proc)}"')
        if len(wanted) >= MAX_ENDINGS:
            break
    # a list, not a chain of ||: a long chain is too deep for a ClassAd to evaluate
    return (f"{_own_constraint(settings)} && member(strcat(ClusterId, \".\", ProcId), {{{', '.join(wanted)}}})"
            if wanted else None)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else 0.0


def ending(ad: Any) -> Ending:
    """A pilot's ending from its history ad (any attribute missing or not a number: not known)."""
    code = ad.get("ExitCode")
    started = _number(ad.get("JobCurrentStartDate")) or _number(ad.get("JobStartDate"))
    done = _number(ad.get("CompletionDate"))
    ran = max(_number(ad.get("RemoteWallClockTime")), done - started if started and done else 0.0)
    return Ending(completed=ad.get("JobStatus") == COMPLETED,
                  exit_code=code if isinstance(code, int) and not isinstance(code, bool)
                  and ad.get("ExitBySignal") is not True else None,
                  ran_s=ran)


class CeQueue:
    """The CE's schedd as this provisioner uses it."""

    def __init__(self, settings: ProvisionSettings, directory: str) -> None:
        self.settings = settings
        self.directory = directory

    def _schedd(self) -> Any:
        import htcondor2

        settings = self.settings
        try:
            if settings.ce_schedd:
                collector = htcondor2.Collector(settings.ce_pool) if settings.ce_pool else htcondor2.Collector()
                return htcondor2.Schedd(collector.locate(htcondor2.DaemonType.Schedd, settings.ce_schedd))
            return htcondor2.Schedd()
        except Exception as e:  # noqa: BLE001 - the bindings raise several kinds
            raise CeUnavailable(f"the CE's schedd cannot be found: {e} (PODGAHP_PROVISION_CE_SCHEDD and "
                                "PODGAHP_PROVISION_CE_POOL name it, default the local schedd)") from e

    def pilots(self) -> List[Pilot]:
        """This provisioner's pilots that are not done (held ones count as idle: they wait)."""
        constraint = pilots_constraint(self.settings)
        projection = ["ClusterId", "ProcId", "JobStatus", "EnteredCurrentStatus", "PodgahpGroup"]
        try:
            ads = self._schedd().query(constraint=constraint, projection=projection)
        except CeUnavailable:
            raise
        except Exception as e:  # noqa: BLE001
            raise CeUnavailable(f"the CE's schedd cannot be asked for pilots: {e} (PODGAHP_PROVISION_CE_SCHEDD "
                                "and PODGAHP_PROVISION_CE_POOL name it, default the local schedd)") from e
        found = []
        for ad in ads:
            status = ad.get("JobStatus")
            found.append(Pilot(job_id=f"{ad.get('ClusterId')}.{ad.get('ProcId')}",
                               group=str(ad.get("PodgahpGroup", "")), idle=status in (IDLE, HELD),
                               since=float(ad.get("EnteredCurrentStatus") or 0), held=status == HELD))
        return found

    def endings(self, job_ids: Sequence[str]) -> Dict[str, Ending]:
        """How those of ``job_ids`` that left the queue ended, as the schedd's history says (job id →
        ending; a pilot it does not know is left out)."""
        constraint = endings_constraint(self.settings, job_ids)
        if constraint is None:
            return {}
        projection = ["ClusterId", "ProcId", "JobStatus", "ExitCode", "ExitBySignal", "RemoteWallClockTime",
                      "JobCurrentStartDate", "JobStartDate", "CompletionDate"]
        try:
            ads = self._schedd().history(constraint, projection, match=MAX_ENDINGS)
            return {f"{ad.get('ClusterId')}.{ad.get('ProcId')}": ending(ad) for ad in ads}
        except CeUnavailable:
            raise
        except Exception as e:  # noqa: BLE001
            raise CeUnavailable(f"the CE's schedd cannot be asked how pilots ended: {e}") from e

    def submit(self, group: Group, count: int) -> str:
        """Submit ``count`` pilots of ``group``; returns the cluster id."""
        import htcondor2

        os.makedirs(self.directory, exist_ok=True)
        description = htcondor2.Submit(submit_description(group, self.settings, self.directory))
        try:
            result = self._schedd().submit(description, count=count)
        except CeUnavailable:
            raise
        except Exception as e:  # noqa: BLE001
            raise CeUnavailable(f"the CE's schedd refused {count} pilots of group {group}: {e}") from e
        return str(result.cluster())

    def remove(self, pilots: Sequence[Pilot], reason: str) -> None:
        import htcondor2

        try:
            self._schedd().act(htcondor2.JobAction.Remove, [p.job_id for p in pilots], reason)
        except CeUnavailable:
            raise
        except Exception as e:  # noqa: BLE001
            raise CeUnavailable(f"the CE's schedd did not remove {len(pilots)} pilots: {e}") from e

