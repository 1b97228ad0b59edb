"""Writing a finished pilot's ``Out`` and ``Err`` from its pod log, before it is reported completed.

Kubernetes keeps one log per container with standard output and standard error merged, so:
``Out`` gets the whole pilot container log; ``Err`` gets a few ``podgahp:`` lines describing how the
pod ended (node, exit code or signal, reason) — and when ``Err`` is the same file as ``Out`` those
lines follow the log. With no ``Out``, the log goes to ``Err``. Where they go is what the GAHP
recorded at submit (:mod:`gahp.rules.records`), never the pod's annotations (anyone allowed to patch pods
can change those); files are written inside the job's directory only, atomically, with the GAHP's
(the job owner's) identity (:mod:`gahp.core.outputs`).
Knows the API only through the :class:`~gahp.backends.k8s.api.KubeApi` it is given.
"""

from __future__ import annotations

import logging
import itertools
from typing import Any, Dict, Iterator, Optional

from gahp.backends.http import JsonObj
from gahp.backends.k8s.api import KubeApi, translate
from gahp.backends.k8s.spec import CONTAINER
from gahp.backends.k8s.view import Pod, PodRecord, record_of
from gahp.core.errors import BackendError, NotFound
from gahp.core.jobstate import JobState
from gahp.core.outputs import write_output
from gahp.rules.records import JobRecord

log = logging.getLogger(__name__)


def _container_name(pod: PodRecord) -> str:
    names = [c.get("name") for c in pod.containers]
    if CONTAINER in names or not names:
        return CONTAINER
    return str(names[0])


def summary(pod: Pod, state: JsonObj, out: Optional[str]) -> bytes:
    """The ``podgahp:`` lines written to ``Err``."""
    view = record_of(pod)
    lines = [f"podgahp: pod {view.namespace}/{view.name} on {view.node or 'no node'} ended"]
    if state.get("exit_signal") is not None:
        lines.append(f"podgahp: killed by signal {state['exit_signal']}")
    else:
        lines.append(f"podgahp: exit code {state.get('exit_code') or 0}")
    if state.get("exit_reason"):
        lines.append(f"podgahp: {state['exit_reason']}")
    if out:
        lines.append(f"podgahp: the pod log (standard output and error merged) is in {out}")
    return ("\n".join(lines) + "\n").encode()


def _stream(response: Any, what: str) -> Iterator[bytes]:
    """The response body in chunks; a failed read becomes a :mod:`gahp.core.errors` error, not an OSError."""
    try:
        for chunk in response.stream(64 * 1024, decode_content=True):
            yield chunk
    except Exception as e:  # noqa: BLE001 - network failures while streaming, translated once
        raise translate(e, what) from e


def write_outputs(api: KubeApi, pod: Pod, state: JobState, job_id: str, max_bytes: int,
                  record: Optional[JobRecord]) -> bool:
    """Write ``Out``/``Err`` of a finished pod where ``record`` says; True (a pod's log is never still
    being prepared: :data:`gahp.backends.base.Outputs`). OSError when a file cannot
    be written; TransientError when the log cannot be read now (a missing log is written as empty, with
    a note in ``Err``). Without a record (a pod made before records were kept), nothing is written."""
    view = record_of(pod)
    if record is None:
        log.warning("[%s] no record of where this pilot's outputs go: they are not written (podgahp writes "
                    "them only where it recorded at submit, never where a pod's annotations say)", job_id)
        return True
    out, err = record.stdout, record.stderr
    if not out and not err:
        return True
    where = f"pod {view.namespace}/{view.name}"
    extra = {"exit_code": state.exit_code, "exit_signal": state.exit_signal, "exit_reason": state.exit_reason}
    note = b""
    log_path = out or err
    assert log_path is not None
    kwargs: Dict[str, Any] = {"container": _container_name(view)}
    if max_bytes:
        kwargs["limit_bytes"] = max_bytes
    response: Any = None
    try:
        response = api.call(f"read log of {where}", "read_namespaced_pod_log", view.name, view.namespace,
                            job_id=job_id, stream=True, **kwargs)
    except (NotFound, BackendError) as e:
        note = f"podgahp: the pod log is not available: {e}\n".encode()
        log.info("[%s] %s", job_id, note.decode().strip())
    chunks: Iterator[bytes] = iter(())
    if response is not None:
        chunks = _stream(response, f"read log of {where}")
    text = note + summary(view, extra, out if err != out else None)
    try:
        written = write_output(record.iwd, log_path, itertools.chain(chunks, [text] if err == log_path else []))
    finally:
        if response is not None:
            response.release_conn()
    if err and err != log_path:
        write_output(record.iwd, err, [text])
    log.info("[%s] wrote %d bytes of pod log to %s%s", job_id, written, log_path,
             f" and the outcome to {err}" if err else "")
    return True
