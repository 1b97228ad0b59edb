"""Which Lancium jobs are this GAHP's, and what a job id may name.

Lancium has one identity per account: every holder of a key to the account sees, and may change, every
job in it, and a job's ``name`` and ``notes`` are whatever its creator wrote. So nothing on Lancium
proves who made a job. Here:

* a job id is accepted only in the exact form podgahp hands out, ``lancium/<id>`` (a positive number
  without leading zeros), so nothing a job id holds can widen a request;
* a job's name is ``podgahp-<key>-<nonce>``: ``key`` hashes this CE, the HTCondor user and the sandbox
  (:func:`gahp.rules.identity.sandbox_key`), so two users never claim one name through a GAHP; ``nonce`` is
  fresh for each submit of the sandbox;
* what proves that this GAHP made a job for its user is its own record (:mod:`gahp.rules.records`), written
  when the job was created: status, cancel, proxy refresh, adoption by a later submit and the clean-up
  act only on recorded jobs, whatever the job's name says;
* before the create answer arrives the job has no id; the submit records the name it is about to use
  (:func:`pending_key`), so a job made by a create whose answer was lost is recognised by that name
  (the oldest job of that name: a copy made by someone who saw it comes later).
"""

from __future__ import annotations

import re
import secrets
from typing import Optional

from gahp.core.errors import InvalidJob
from gahp.rules.identity import KEY_LENGTH, sandbox_key as sandbox_key  # the GAHP-wide rule

JOB_ID_PREFIX = "lancium/"
_JOB_ID = re.compile(r"^lancium/([1-9][0-9]{0,17})$")
NAME_PREFIX = "podgahp-"
NONCE_LENGTH = 12
_NAME = re.compile(r"^podgahp-([0-9a-f]{%d})-([0-9a-f]{%d})$" % (KEY_LENGTH, NONCE_LENGTH))


def job_id_of(lancium_id: int) -> str:
    return f"{JOB_ID_PREFIX}{lancium_id}"


def parse_job_id(job_id: str) -> int:
    """The numeric Lancium id in ``lancium/<id>``; InvalidJob for anything else."""
    match = _JOB_ID.fullmatch(job_id)
    if not match:
        raise InvalidJob(f"{job_id[:200]!r} is not a Lancium job id podgahp hands out (lancium/<number>)")
    return int(match.group(1))


def new_name(key: str) -> str:
    """A job name for one submit of the sandbox of ``key``."""
    return f"{NAME_PREFIX}{key}-{secrets.token_hex(NONCE_LENGTH // 2)}"


def key_of_name(name: Optional[str]) -> Optional[str]:
    """The sandbox key in a job name of the form podgahp gives (None for any other name)."""
    match = _NAME.fullmatch(name or "")
    return match.group(1) if match else None


def pending_key(key: str) -> str:
    """Record key of the name a submit of sandbox ``key`` is creating a job under."""
    return f"lancium/pending.{key}"
