"""Lancium job ids: ``lancium/<numeric id>``, the form the gridmanager stores and sends back."""

from __future__ import annotations

import re

from gahp.errors import InvalidJob

JOB_ID_PREFIX = "lancium/"
_JOB_ID = re.compile(r"^lancium/([0-9]{1,18})$")


def job_id_of(lancium_id: int) -> str:
    return f"{JOB_ID_PREFIX}{lancium_id}"


def lancium_id_of(job_id: str) -> int:
    """The numeric Lancium id in ``lancium/<id>``; InvalidJob for anything else."""
    match = _JOB_ID.match(job_id)
    if not match:
        raise InvalidJob(f"{job_id!r} is not a Lancium job id (expected lancium/<number>)")
    return int(match.group(1))
