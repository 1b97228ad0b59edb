"""Lancium as the CE-wide tools see it (:class:`~gahp.backends.base.CeView`): the jobs of this CE in the
Lancium account, all users, from one ``GET /jobs`` plus a ``GET /jobs/{id}`` for each job whose
ownership or state needs its details, so ``podgahp reap``, ``q`` and ``health`` cover Lancium too.

Nothing on Lancium proves who made a job (:mod:`gahp.backends.lancium.identity`). A job is this CE's
when the CE's schedd names it in a grid job (``held``), or when its name has podgahp's form and its
``notes`` name this CE, a user and a sandbox whose key (:func:`gahp.rules.identity.sandbox_key`) is the one
in the name: the notes, which a GAHP writes at submit, are read here only to be checked against the
name, and a job whose notes do not match is not listed (so never deleted). The orphan rules of
:mod:`gahp.ce.orphans` then decide, on the sandbox the notes name. Ages are taken on this machine's clock
against the job's ``created_at`` (Lancium's answers carry no time of their own to the client).

At most :data:`MAX_DETAILS` jobs are read in detail per census; the others wait for the next one (an
error line says how many).
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Dict, FrozenSet, Optional

from gahp.backends.base import Census, CeView, RemoteJob
from gahp.backends.lancium.api import JobJSON, LanciumClient
from gahp.backends.lancium.identity import job_id_of, sandbox_key, key_of_name, parse_job_id
from gahp.backends.http import truncate
from gahp.core.errors import Conflict, Missing
from gahp.backends.lancium.settings import LanciumSettings
from gahp.backends.lancium.state import LIVE_STATES
from gahp.core.errors import GahpError

log = logging.getLogger(__name__)

#: Most ``GET /jobs/{id}`` of one census.
MAX_DETAILS = 500
#: The black-hole guard's and the figures' one queue for Lancium.
QUEUE = "lancium"
#: Lancium state -> what ``podgahp health`` counts it as.
HEALTH = {"created": "Pending", "submitted": "Pending", "queued": "Pending", "ready": "Pending",
          "running": "Running", "finished": "Succeeded", "error": "Failed"}
#: Largest ``notes`` read.
MAX_NOTES = 4096


def _time(text: Any) -> Optional[datetime.datetime]:
    if not isinstance(text, str) or not text or len(text) > 64:
        return None
    try:
        parsed = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.timezone.utc)


def sandbox_of(detail: JobJSON, key: str, ce_name: str) -> Optional[str]:
    """The sandbox the job's ``notes`` name, when they name this CE and a user and sandbox whose key is
    ``key`` (the one in the job's name); None for any other job."""
    notes = detail.get("notes")
    if not isinstance(notes, str) or len(notes) > MAX_NOTES:
        return None
    try:
        said = json.loads(notes)
    except ValueError:
        return None
    if not isinstance(said, dict):
        return None
    ce, user, sandbox = said.get("ce"), said.get("user"), said.get("sandbox")
    if not (isinstance(ce, str) and isinstance(user, str) and isinstance(sandbox, str)) or ce != ce_name:
        return None
    return sandbox if sandbox_key(ce, user, sandbox) == key else None


class LanciumCeView(CeView):
    """The jobs of this CE in the Lancium account."""

    backend = "lancium"
    noun = "Lancium job"

    def __init__(self, settings: LanciumSettings, client: Optional[LanciumClient] = None) -> None:
        self.settings = settings
        self.ce_name = settings.ce_name
        self.client = client or LanciumClient(settings.client)
        self.sent = 0

    @property
    def requests(self) -> int:
        return self.sent

    def _detail(self, lancium_id: int) -> Optional[JobJSON]:
        self.sent += 1
        try:
            return self.client.show_job(lancium_id)
        except Missing:
            return None

    def census(self, held: FrozenSet[str]) -> Census:
        census = Census(self.backend, queues=(QUEUE,))
        self.sent += 1
        try:
            listed = self.client.list_jobs()
        except GahpError as e:
            census.errors.append(f"Lancium jobs cannot be listed: {truncate(str(e))}")
            return census
        looked = waiting = 0
        for summary in listed:
            key = key_of_name(summary["name"])
            if key is None:
                continue  # not a name podgahp gives
            jid, status = job_id_of(summary["id"]), summary["status"]
            ours = jid in held
            detail: Optional[JobJSON] = None
            if not ours or status == "error":
                if looked >= MAX_DETAILS:
                    waiting += 1
                    continue
                looked += 1
                try:
                    detail = self._detail(summary["id"])
                except GahpError as e:
                    census.errors.append(f"{jid}: cannot be read: {truncate(str(e))}")
                    continue
                if detail is None:
                    continue  # gone meanwhile
            sandbox = sandbox_of(detail, key, self.ce_name) if detail is not None else None
            if not ours and sandbox is None:
                continue  # another CE's, or not shown to be this CE's: never listed, never deleted
            census.jobs.append(self._remote(jid, summary["id"], status, detail, sandbox or ""))
        if waiting:
            census.errors.append(f"{waiting} Lancium jobs named as podgahp's were not looked at in this pass (at "
                                 f"most {MAX_DETAILS} per pass); the next pass looks at them")
        return census

    def _remote(self, jid: str, lancium_id: int, status: str, detail: Optional[JobJSON], sandbox: str) -> RemoteJob:
        raw: Dict[str, Any] = dict(detail or {})
        error = raw.get("error_string")
        reason = f"Lancium error: {truncate(error)}" if status == "error" and isinstance(error, str) and error else ""
        return RemoteJob(
            job_id=jid, name=str(lancium_id), queue=QUEUE, state=status, health=HEALTH.get(status, ""),
            alive=status in LIVE_STATES or status == "created", deleting=status == "delete pending",
            sandbox=sandbox, created=_time(raw.get("created_at")),
            listed_at=datetime.datetime.now(datetime.timezone.utc), reason=reason)

    def delete(self, job: RemoteJob) -> None:
        """Terminate (a queued or running job) and delete; already gone is success."""
        lancium_id = parse_job_id(job.job_id)
        for step in (self.client.terminate_job, self.client.delete_job):
            self.sent += 1
            try:
                step(lancium_id)
            except (Missing, Conflict) as e:
                log.info("%s: %s: %s", job.job_id, step.__name__, e)

    def close(self) -> None:
        self.client.close()
