"""A finished Lancium job's ``stdout.txt`` and ``stderr.txt`` written back to its ``Out`` and ``Err``,
where the GAHP recorded them at submit (:mod:`gahp.rules.records`), never where the job says, inside the
job's directory only (:func:`gahp.core.outputs.write_output`)."""

from __future__ import annotations

import logging
from typing import Dict

from gahp.backends.lancium.api import LanciumClient
from gahp.core.errors import GahpError, Missing
from gahp.core.outputs import write_output
from gahp.rules.records import JobRecord

log = logging.getLogger(__name__)


def write_outputs(client: LanciumClient, lancium_id: int, record: JobRecord, job_id: str, best_effort: bool) -> bool:
    """Fetch stdout/stderr into Out/Err; False if one is still being prepared (202).

    A missing output (404) is written as an empty file, so the CE finds every file it expects. With
    ``best_effort`` (jobs in ``error``) nothing is awaited and failures are only logged; otherwise an
    OSError of the write is raised (the agent holds the job).
    """
    targets = [(p, n) for p, n in ((record.stdout, "stdout.txt"), (record.stderr, "stderr.txt")) if p]
    contents: Dict[str, bytes] = {}
    for path, remote in targets:
        try:
            data = client.output(lancium_id, remote)
        except Missing:
            if best_effort:
                continue
            data = b""
        except GahpError as e:
            if best_effort:
                log.info("%s: %s not fetched: %s", job_id, remote, e)
                return False
            raise
        if data is None:  # 202: still being prepared
            return False
        contents[path] = contents.get(path, b"") + data  # Out == Err: both, in order
    for path, data in contents.items():
        try:
            write_output(record.iwd, path, [data])
        except OSError as e:
            if best_effort:
                log.info("%s: cannot write %s: %s", job_id, path, e)
                return False
            raise
        log.info("%s: wrote %d bytes to %s", job_id, len(data), path)
    return True
